//! The one error type of yuebing-bridge and its stable codes (−4000 … −4999); an error of the
//! store, the engine, the rpc layer or etcd that a bridged call returns keeps its own code.

use yuebing_rpc::error_table as crate_error_table;
use yuebing_rpc::ErrorCode;

crate_error_table! {
    /// Everything a bridged call can end with besides its own success.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A blocking call was made on a thread that must never block on the bridge: a worker of
        /// the bridge's runtime (owned or supplied), or a thread of its callback pool. Waiting
        /// there could stall the very threads that would finish the call. Remedy: use the callback
        /// form (`then`), or await the async API from a task.
        WouldBlockBridge = -4001, "WouldBlockBridge", retryable: false,
            "a blocking call from a bridge thread (a runtime worker or a callback) would block \
             the bridge";
        /// The bridge shut down before the call finished, or was shut down when it was made.
        /// Remedy: make calls before shutting the bridge down.
        Shutdown = -4002, "Shutdown", retryable: false,
            "the bridge is shut down";
        /// The call was cancelled; its work has stopped (nothing of it touches the caller's memory
        /// any more).
        Canceled = -4003, "Canceled", retryable: true,
            "the call was cancelled";
        /// `wait_timeout` ran out: the call was cancelled, and its work has stopped. Remedy: wait
        /// longer, or give the operation itself a deadline.
        Timeout = -4004, "Timeout", retryable: true,
            "the call did not finish in time and was cancelled";
        /// The process forked since the bridge started: its runtime threads do not exist in the
        /// child. Remedy: create a new bridge (and new clients) in the child.
        Forked {
            /// The process that started the bridge.
            parent: u32,
        } = -4005, "Forked", retryable: false,
            "the bridge was started by process {parent}; this is a forked child";
        /// A supplied runtime cannot host the bridge: a current-thread runtime runs only while
        /// someone is inside its `block_on`, so calls could wait forever. Remedy: supply a
        /// multi-thread runtime, or let the bridge own one.
        CurrentThreadRuntime = -4006, "CurrentThreadRuntime", retryable: false,
            "the bridge needs a multi-thread runtime; a current-thread runtime was supplied";
        /// The bridge's threads could not be started. Remedy: read the message (out of threads or
        /// memory).
        Start {
            /// What failed.
            reason: String,
        } = -4007, "Start", retryable: false,
            "the bridge could not start: {reason}";
        /// The operation panicked (a bug in it); the panic was caught and the bridge goes on.
        /// Remedy: report the message.
        Panicked {
            /// What the panic said.
            message: String,
        } = -4008, "Panicked", retryable: false,
            "the operation panicked: {message}";
        /// A master address names an etcd cluster (`etcd://h:p,h:p/CLUSTER`), but this build has
        /// no etcd support. Remedy: build with the `etcd` feature (`cargo build --release
        /// --features etcd`; the Python package: `maturin develop --features etcd`), which needs
        /// protoc and libprotobuf-dev; or give the masters' own addresses.
        EtcdNotBuilt {
            /// The address given.
            address: String,
        } = -4012, "EtcdNotBuilt", retryable: false,
            "master address {address:?}: finding the elected master through etcd needs a build \
             with the `etcd` feature (`cargo build --release --features etcd`; needs protoc and \
             libprotobuf-dev)";
    }
    codes_only {
        // The C ABI's boundary errors (see `crate::ffi::error`), which no variant carries.
        InvalidHandle = -4009, "InvalidHandle", retryable: false;
        InvalidArgument = -4010, "InvalidArgument", retryable: false;
        TooManyHandles = -4011, "TooManyHandles", retryable: false;
    }
    wrapped {
        /// etcd failed: a malformed `etcd://` address, refused credentials, etcd unreachable
        /// while authenticating; its code (−5000 … −5999) is kept.
        #[cfg(feature = "etcd")]
        #[error(transparent)]
        Etcd(#[from] yuebing_etcd::Error)
            => #[cfg(feature = "etcd")] Error::Etcd(e) => e.code(), e.name(), e.is_retryable();
        /// The store failed the call; its code is kept, and its name is the code's (also the
        /// name of an etcd code, which the store does not know).
        #[error(transparent)]
        Store(#[from] yuebing_store::Error)
            => Error::Store(e) => e.code(), code_name(e.code()), e.is_retryable();
        /// The engine failed the call; its code is kept, and its name is the code's.
        #[error(transparent)]
        Engine(#[from] yuebing_engine::Error)
            => Error::Engine(e) => e.code(), code_name(e.code()), e.is_retryable();
    }
}

impl From<yuebing_rpc::Error> for Error {
    /// An rpc error (a bad endpoint or token, a lost connection) keeps its code.
    fn from(e: yuebing_rpc::Error) -> Error {
        Error::Store(e.into())
    }
}

/// Success: the row of code 0 (named "Ok" by the C ABI's `yuebing_error_name`).
const OK: ErrorCode = ErrorCode::new(0, "Ok", "Ok\0", false);

/// Every crate's table of codes, in the order of the code ranges (the store's, the rpc
/// layer's, the engine's, the bridge's, etcd's): the one source of the names that
/// [`code_name`], the C ABI's `yuebing_error_name` and the Python package's classes give.
const TABLES: [&[ErrorCode]; 5] = [
    yuebing_store::Error::CODES,
    yuebing_rpc::Error::CODES,
    yuebing_engine::Error::CODES,
    Error::CODES,
    crate::etcd_codes::ETCD_CODES,
];

/// Every named code of every layer with its name and whether retrying can help (success, 0,
/// is not among them), in the order of the code ranges: for bindings that give each code a
/// name of their own (the C header's constants, the Python package's exception classes, both
/// checked against it by `bridge/tests/error_names.rs`), so that they cannot drift.
pub fn code_rows() -> impl Iterator<Item = &'static ErrorCode> {
    TABLES.into_iter().flatten()
}

/// The row of a code of any layer, or of success (0).
pub(crate) fn code_row(code: i32) -> Option<&'static ErrorCode> {
    if code == 0 {
        return Some(&OK);
    }
    code_rows().find(|row| row.code == code)
}

/// The name of an error code of any layer ("ObjectNotFound" for −704, "RpcTimeout" for −2001,
/// …; "Ok" for 0), or "Unknown": the names that the C ABI's `yuebing_error_name` gives.
pub fn code_name(code: i32) -> &'static str {
    code_row(code).map_or("Unknown", |row| row.name)
}

/// Every named error code with its name (success, 0, is not among them), in the order of the
/// code ranges: [`code_rows`] without retryability, for the Python package's classes.
pub fn code_names() -> impl Iterator<Item = (i32, &'static str)> {
    code_rows().map(|row| (row.code, row.name))
}

/// Result alias for yuebing-bridge.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
