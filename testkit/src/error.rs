//! The kit's one error type.
//!
//! Unlike the errors of yuebing's crates, these have no numeric code: they never cross a wire
//! or the C ABI, and a test that meets one fails with its message.

/// What can go wrong preparing a test's surroundings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every port tried in the range was taken or already handed out. Remedy: run fewer tests
    /// at once, or stop what holds the ports.
    #[error("no free port in {range:?} after {tries} tries")]
    NoFreePort {
        /// The range ports are drawn from.
        range: std::ops::Range<u16>,
        /// How many were tried.
        tries: usize,
    },
    /// A process the kit runs could not be started, did not become healthy, or could not be
    /// signalled (the `etcd` binary missing included). Remedy: read the message and the
    /// process's log; `scripts/test.sh` installs what the tests run.
    #[error("test process: {reason}")]
    Process {
        /// What failed.
        reason: String,
    },
}

impl Error {
    /// A [`Error::Process`] with `reason`.
    pub fn process(reason: impl Into<String>) -> Error {
        Error::Process {
            reason: reason.into(),
        }
    }
}

/// A result with the kit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
