//! The one error type of yuebing-bridge and its stable codes (−4000 … −4999); an error of the
//! store, the engine, the rpc layer or etcd that a bridged call returns keeps its own code.

/// Everything a bridged call can end with besides its own success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A blocking call was made on a thread that must never block on the bridge: a worker of
    /// the bridge's runtime (owned or supplied), or a thread of its callback pool. Waiting there could stall the
    /// very threads that would finish the call. Remedy: use the callback form (`then`), or
    /// await the async API from a task.
    #[error("a blocking call from a bridge thread (a runtime worker or a callback) would block the bridge")]
    WouldBlockBridge,
    /// The bridge shut down before the call finished, or was shut down when it was made.
    /// Remedy: make calls before shutting the bridge down.
    #[error("the bridge is shut down")]
    Shutdown,
    /// The call was cancelled; its work has stopped (nothing of it touches the caller's memory
    /// any more).
    #[error("the call was cancelled")]
    Canceled,
    /// `wait_timeout` ran out: the call was cancelled, and its work has stopped. Remedy: wait
    /// longer, or give the operation itself a deadline.
    #[error("the call did not finish in time and was cancelled")]
    Timeout,
    /// The process forked since the bridge started: its runtime threads do not exist in the
    /// child. Remedy: create a new bridge (and new clients) in the child.
    #[error("the bridge was started by process {parent}; this is a forked child")]
    Forked {
        /// The process that started the bridge.
        parent: u32,
    },
    /// A supplied runtime cannot host the bridge: a current-thread runtime runs only while
    /// someone is inside its `block_on`, so calls could wait forever. Remedy: supply a
    /// multi-thread runtime, or let the bridge own one.
    #[error("the bridge needs a multi-thread runtime; a current-thread runtime was supplied")]
    CurrentThreadRuntime,
    /// The bridge's threads could not be started. Remedy: read the message (out of threads or
    /// memory).
    #[error("the bridge could not start: {reason}")]
    Start {
        /// What failed.
        reason: String,
    },
    /// The operation panicked (a bug in it); the panic was caught and the bridge goes on.
    /// Remedy: report the message.
    #[error("the operation panicked: {message}")]
    Panicked {
        /// What the panic said.
        message: String,
    },
    /// A master address names an etcd cluster (`etcd://h:p,h:p/CLUSTER`), but this build has
    /// no etcd support. Remedy: build with the `etcd` feature (`cargo build --release
    /// --features etcd`; the Python package: `maturin develop --features etcd`), which needs
    /// protoc and libprotobuf-dev; or give the masters' own addresses.
    #[error(
        "master address {address:?}: finding the elected master through etcd needs a build \
         with the `etcd` feature (`cargo build --release --features etcd`; needs protoc and \
         libprotobuf-dev)"
    )]
    EtcdNotBuilt {
        /// The address given.
        address: String,
    },
    /// etcd failed: a malformed `etcd://` address, refused credentials, etcd unreachable
    /// while authenticating; its code (−5000 … −5999) is kept.
    #[cfg(feature = "etcd")]
    #[error(transparent)]
    Etcd(#[from] yuebing_etcd::Error),
    /// The store failed the call; its code is kept.
    #[error(transparent)]
    Store(#[from] yuebing_store::Error),
    /// The engine failed the call; its code is kept.
    #[error(transparent)]
    Engine(#[from] yuebing_engine::Error),
}

impl From<yuebing_rpc::Error> for Error {
    /// An rpc error (a bad endpoint or token, a lost connection) keeps its code.
    fn from(e: yuebing_rpc::Error) -> Error {
        Error::Store(e.into())
    }
}

/// The name of an error code of any layer ("ObjectNotFound" for −704, "RpcTimeout" for −2001,
/// …), or "Unknown": the names that the C ABI's `yuebing_error_name` gives, from one table.
pub fn code_name(code: i32) -> &'static str {
    crate::ffi::error::NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .and_then(|(_, name)| name.to_str().ok())
        .unwrap_or("Unknown")
}

/// Every named error code with its name (success, 0, is not among them), in the order of the
/// code ranges: for bindings that give each code a type of its own (the Python package's
/// exception classes), so that they cannot drift from the codes.
pub fn code_names() -> impl Iterator<Item = (i32, &'static str)> {
    crate::ffi::error::NAMES
        .iter()
        .filter(|(c, _)| *c != 0)
        .filter_map(|(c, name)| Some((*c, name.to_str().ok()?)))
}

/// Result alias for yuebing-bridge.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable numeric code: −4001 … for the bridge's own, the wrapped error's otherwise.
    pub fn code(&self) -> i32 {
        match self {
            Error::WouldBlockBridge => -4001,
            Error::Shutdown => -4002,
            Error::Canceled => -4003,
            Error::Timeout => -4004,
            Error::Forked { .. } => -4005,
            Error::CurrentThreadRuntime => -4006,
            Error::Start { .. } => -4007,
            Error::Panicked { .. } => -4008,
            Error::EtcdNotBuilt { .. } => -4012,
            #[cfg(feature = "etcd")]
            Error::Etcd(e) => e.code(),
            Error::Store(e) => e.code(),
            Error::Engine(e) => e.code(),
        }
    }

    /// The name of [`Error::code`] ("ObjectNotFound", "Canceled", …), as [`code_name`] gives it.
    pub fn name(&self) -> &'static str {
        code_name(self.code())
    }

    /// Whether making the call again can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Timeout | Error::Canceled => true,
            #[cfg(feature = "etcd")]
            Error::Etcd(e) => e.is_retryable(),
            Error::Store(e) => e.is_retryable(),
            Error::Engine(e) => e.is_retryable(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_codes_are_in_range_and_wrapped_ones_kept() {
        for e in [
            Error::WouldBlockBridge,
            Error::Shutdown,
            Error::Canceled,
            Error::Timeout,
            Error::Forked { parent: 1 },
            Error::CurrentThreadRuntime,
            Error::Start { reason: "x".into() },
            Error::Panicked {
                message: "x".into(),
            },
            Error::EtcdNotBuilt {
                address: "etcd://h:1/c".into(),
            },
        ] {
            assert!((-4999..=-4000).contains(&e.code()), "{e}");
        }
        let store = Error::Store(yuebing_store::Error::ObjectNotFound { key: "k".into() });
        assert_eq!(store.code(), -704);
        assert_eq!(store.name(), "ObjectNotFound");
        assert_eq!(Error::Canceled.name(), "Canceled");
    }

    #[test]
    fn every_code_has_one_name_and_the_c_abi_gives_the_same() {
        let names: Vec<_> = code_names().collect();
        assert!(names.len() > 60, "{}", names.len());
        let mut seen = std::collections::HashSet::new();
        for (code, name) in &names {
            assert!(seen.insert(*name), "{name} twice");
            assert_eq!(code_name(*code), *name);
            // SAFETY: a static NUL-terminated string.
            let c =
                unsafe { std::ffi::CStr::from_ptr(crate::ffi::error::yuebing_error_name(*code)) };
            assert_eq!(c.to_str(), Ok(*name));
        }
        assert_eq!(code_name(12345), "Unknown");
        assert!(names.iter().all(|(c, _)| *c != 0));
    }
}
