//! Error codes and names, the `yuebing_error` out-parameter, the per-thread last message, and
//! the wrapper every exported function runs its body in (panics caught, outcome reported).

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const YUEBING_OK: i32 = 0;
/// The store's internal error.
pub const YUEBING_ERR_INTERNAL: i32 = -1;
/// The store space overlaps space already mounted on that node.
pub const YUEBING_ERR_SEGMENT_ALREADY_EXISTS: i32 = -102;
/// No room for the object on any node.
pub const YUEBING_ERR_NO_AVAILABLE_HANDLE: i32 = -200;
/// A persisted file or log entry is of another format version.
pub const YUEBING_ERR_INVALID_VERSION: i32 = -300;
/// Invalid parameters of a store call.
pub const YUEBING_ERR_INVALID_PARAMS: i32 = -600;
/// Another client started this write; only it may end or revoke it.
pub const YUEBING_ERR_ILLEGAL_CLIENT: i32 = -601;
/// The write cannot be revoked or ended in its state.
pub const YUEBING_ERR_INVALID_WRITE: i32 = -700;
/// The object's replicas are not ready yet.
pub const YUEBING_ERR_REPLICA_NOT_READY: i32 = -703;
/// No object under the key.
pub const YUEBING_ERR_OBJECT_NOT_FOUND: i32 = -704;
/// An object already exists under the key.
pub const YUEBING_ERR_OBJECT_ALREADY_EXISTS: i32 = -705;
/// The object is leased to a reader (remove it with `force`).
pub const YUEBING_ERR_OBJECT_HAS_LEASE: i32 = -706;
/// A read outlived its lease.
pub const YUEBING_ERR_LEASE_EXPIRED: i32 = -707;
/// A copy or move task is copying the object (remove it with force, or wait).
pub const YUEBING_ERR_OBJECT_HAS_REPLICATION_TASK: i32 = -708;
/// A write of the key is under way.
pub const YUEBING_ERR_WRITE_IN_PROGRESS: i32 = -714;
/// This master is not its cluster's leader (a standby, or a leader that lost its lease).
pub const YUEBING_ERR_NOT_LEADER: i32 = -1010;
/// Reading or writing the master's data directory or a node's disk tier failed.
pub const YUEBING_ERR_IO: i32 = -1103;
/// No copy or move task has that id (or the master forgot it: it keeps the newest finished).
pub const YUEBING_ERR_TASK_NOT_FOUND: i32 = -1400;
/// The master has as many tasks waiting as it takes; nothing was created.
pub const YUEBING_ERR_TASK_PENDING_LIMIT_EXCEEDED: i32 = -1401;
/// A snapshot or log file of the master, or a disk tier record, is damaged.
pub const YUEBING_ERR_CORRUPT: i32 = -1500;
/// The store call ran out of time.
pub const YUEBING_ERR_STORE_TIMEOUT: i32 = -1501;
/// A node's disk tier has no room for a record, even after compacting.
pub const YUEBING_ERR_DISK_TIER_FULL: i32 = -1502;
/// An rpc call ran out of time.
pub const YUEBING_ERR_RPC_TIMEOUT: i32 = -2001;
/// A request or response is larger than the receiver accepts.
pub const YUEBING_ERR_FRAME_TOO_LARGE: i32 = -2002;
/// The server is at one of its caps; nothing was executed (retry later).
pub const YUEBING_ERR_RPC_OVERLOADED: i32 = -2003;
/// The peer refused the cluster token.
pub const YUEBING_ERR_UNAUTHENTICATED: i32 = -2004;
/// Client and server speak different protocol versions.
pub const YUEBING_ERR_RPC_VERSION_MISMATCH: i32 = -2005;
/// The server serves no service of that name.
pub const YUEBING_ERR_UNKNOWN_SERVICE: i32 = -2006;
/// A connection could not be made.
pub const YUEBING_ERR_CONNECT: i32 = -2007;
/// A connection was lost mid-call.
pub const YUEBING_ERR_CONNECTION_LOST: i32 = -2008;
/// The server is shutting down.
pub const YUEBING_ERR_SHUTTING_DOWN: i32 = -2009;
/// The peer sent bytes that are not yuebing-rpc.
pub const YUEBING_ERR_PROTOCOL: i32 = -2010;
/// The server's handler failed with an error that carries no code.
pub const YUEBING_ERR_SERVER: i32 = -2011;
/// An endpoint (`host:port`) could not be parsed.
pub const YUEBING_ERR_INVALID_ENDPOINT: i32 = -2012;
/// A listener could not be bound.
pub const YUEBING_ERR_BIND: i32 = -2013;
/// No endpoint is available.
pub const YUEBING_ERR_NO_ENDPOINT: i32 = -2014;
/// A token is empty, too long or not visible ASCII.
pub const YUEBING_ERR_INVALID_TOKEN: i32 = -2015;
/// An engine argument is invalid.
pub const YUEBING_ERR_ENGINE_INVALID_ARGUMENT: i32 = -3001;
/// More requests than the batch has room for.
pub const YUEBING_ERR_TOO_MANY_REQUESTS: i32 = -3002;
/// The address is not registered with the engine.
pub const YUEBING_ERR_ADDRESS_NOT_REGISTERED: i32 = -3003;
/// The batch still has unfinished tasks.
pub const YUEBING_ERR_BUSY: i32 = -3004;
/// The range overlaps a registered one.
pub const YUEBING_ERR_ADDRESS_OVERLAPPED: i32 = -3007;
/// No segment of that name.
pub const YUEBING_ERR_ENGINE_SEGMENT_NOT_FOUND: i32 = -3203;
/// The former name of [`YUEBING_ERR_ENGINE_SEGMENT_NOT_FOUND`], kept for source compatibility (not
/// the store's `SegmentNotFound`, −101, which has no constant: this name is taken).
pub const YUEBING_ERR_SEGMENT_NOT_FOUND: i32 = -3203;
/// The request was meant for an earlier instance of the segment (the peer restarted).
pub const YUEBING_ERR_STALE_SEGMENT: i32 = -3204;
/// Memory could not be allocated or mapped.
pub const YUEBING_ERR_OUT_OF_MEMORY: i32 = -3302;
/// A transfer ran out of time.
pub const YUEBING_ERR_TRANSFER_TIMEOUT: i32 = -3500;
/// A transfer was cancelled.
pub const YUEBING_ERR_TRANSFER_CANCELED: i32 = -3501;
/// No batch of that id (freed, or never allocated).
pub const YUEBING_ERR_UNKNOWN_BATCH: i32 = -3502;
/// Too many bytes are queued for one peer (retry later).
pub const YUEBING_ERR_ENGINE_OVERLOADED: i32 = -3503;
/// The range lies outside the target's registered memory.
pub const YUEBING_ERR_OUT_OF_BOUNDS: i32 = -3504;
/// The peer failed or went away.
pub const YUEBING_ERR_PEER_FAILED: i32 = -3505;
/// The receiver's notification queue is full.
pub const YUEBING_ERR_NOTIFICATION_QUEUE_FULL: i32 = -3506;
/// GPU memory was named, but the library was built without GPU support.
pub const YUEBING_ERR_GPU_NOT_BUILT: i32 = -3507;
/// A segment descriptor of another format version.
pub const YUEBING_ERR_ENGINE_VERSION_MISMATCH: i32 = -3508;
/// An operating-system call of the engine failed.
pub const YUEBING_ERR_ENGINE_IO: i32 = -3509;
/// An unregistered engine buffer was offered for registration again.
pub const YUEBING_ERR_BUFFER_RETIRED: i32 = -3510;
/// The peer does not grant this access to the range.
pub const YUEBING_ERR_ACCESS_DENIED: i32 = -3511;
/// No RDMA device can be used (rdma-core missing, no NIC); the engine goes on with tcp.
pub const YUEBING_ERR_NO_RDMA_DEVICE: i32 = -3512;
/// GPU memory was named but no CUDA driver can be used.
pub const YUEBING_ERR_NO_CUDA_DRIVER: i32 = -3513;
/// A blocking call (or a destroy) from a bridge thread, e.g. inside a callback.
pub const YUEBING_ERR_WOULD_BLOCK_BRIDGE: i32 = -4001;
/// The bridge is shut down.
pub const YUEBING_ERR_SHUTDOWN: i32 = -4002;
/// The call was cancelled; nothing of it touches the caller's memory any more.
pub const YUEBING_ERR_CANCELED: i32 = -4003;
/// A wait ran out of time; the call was cancelled.
pub const YUEBING_ERR_TIMEOUT: i32 = -4004;
/// The bridge was made by the parent of this forked process.
pub const YUEBING_ERR_FORKED: i32 = -4005;
/// A supplied runtime is a current-thread one; the bridge needs a multi-thread runtime.
pub const YUEBING_ERR_CURRENT_THREAD_RUNTIME: i32 = -4006;
/// The bridge could not start its threads.
pub const YUEBING_ERR_START: i32 = -4007;
/// An operation panicked (a bug in yuebing); the bridge goes on.
pub const YUEBING_ERR_PANICKED: i32 = -4008;
/// A handle is null, destroyed, or of another kind.
pub const YUEBING_ERR_INVALID_HANDLE: i32 = -4009;
/// An argument is invalid: a null pointer where one is needed, a null buffer with a non-zero
/// length, a length that overflows, an unknown flag or enum value, text that is not UTF-8.
pub const YUEBING_ERR_INVALID_ARGUMENT: i32 = -4010;
/// Too many handles are live at once (about four billion).
pub const YUEBING_ERR_TOO_MANY_HANDLES: i32 = -4011;
/// A master address names an etcd cluster (`etcd://…`) but the library was built without its `etcd`
/// feature.
pub const YUEBING_ERR_ETCD_NOT_BUILT: i32 = -4012;
/// A malformed `etcd://` master address (or other unusable etcd settings).
pub const YUEBING_ERR_ETCD_INVALID_CONFIG: i32 = -5001;
/// etcd could not be reached or dropped the connection.
pub const YUEBING_ERR_ETCD_UNAVAILABLE: i32 = -5002;
/// An etcd request got no answer within its deadline.
pub const YUEBING_ERR_ETCD_TIMEOUT: i32 = -5003;
/// etcd refused the credentials or the permission.
pub const YUEBING_ERR_ETCD_UNAUTHENTICATED: i32 = -5004;
/// etcd refused the request.
pub const YUEBING_ERR_ETCD_REJECTED: i32 = -5005;
/// An etcd lease expired or was revoked.
pub const YUEBING_ERR_ETCD_LEASE_NOT_FOUND: i32 = -5006;
/// A watch asked for history etcd has compacted away.
pub const YUEBING_ERR_ETCD_COMPACTED: i32 = -5007;
/// etcd ended a watch.
pub const YUEBING_ERR_ETCD_WATCH_CANCELED: i32 = -5008;
/// A value under yuebing's etcd keys does not decode.
pub const YUEBING_ERR_ETCD_BAD_VALUE: i32 = -5009;
/// The etcd client failed otherwise.
pub const YUEBING_ERR_ETCD_CLIENT: i32 = -5011;
/// This master is no longer the leader.
pub const YUEBING_ERR_ETCD_DEPOSED: i32 = -5012;
/// Another appender wrote the operation log's group first.
pub const YUEBING_ERR_ETCD_LOG_CONFLICT: i32 = -5013;
/// An operation log group does not follow the last one.
pub const YUEBING_ERR_ETCD_LOG_GAP: i32 = -5014;
/// The operation log no longer holds that sequence number.
pub const YUEBING_ERR_ETCD_LOG_TRUNCATED: i32 = -5015;
/// The election lease of a candidate or leader is gone.
pub const YUEBING_ERR_ETCD_LEASE_LOST: i32 = -5016;

/// The ABI version: bumped on every incompatible change of `yuebing.h`.
pub const YUEBING_ABI_VERSION: u32 = 1;

/// Longest message kept in a [`yuebing_error`], terminating NUL included.
pub const YUEBING_ERROR_MESSAGE_LEN: usize = 256;

/// Why a call failed, filled by every fallible function when the caller passes one (it may
/// pass NULL). `code` is the function's return value; `message` a NUL-terminated text, cut to
/// fit. On success `code` is 0 and `message` empty.
#[repr(C)]
pub struct yuebing_error {
    /// The error code (0: success).
    pub code: i32,
    /// What went wrong, NUL-terminated.
    pub message: [c_char; YUEBING_ERROR_MESSAGE_LEN],
}

/// A failure on its way to the C caller.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

/// Result of an exported function's body.
pub(crate) type FfiResult<T> = Result<T, Failure>;

impl Failure {
    /// [`YUEBING_ERR_INVALID_ARGUMENT`] with a message.
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            code: YUEBING_ERR_INVALID_ARGUMENT,
            message: message.into(),
        }
    }

    /// [`YUEBING_ERR_INVALID_HANDLE`] with a message.
    pub(crate) fn handle(message: impl Into<String>) -> Failure {
        Failure {
            code: YUEBING_ERR_INVALID_HANDLE,
            message: message.into(),
        }
    }
}

impl<E: Into<crate::Error>> From<E> for Failure {
    fn from(e: E) -> Failure {
        let e: crate::Error = e.into();
        Failure {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// Text as a C string: interior NULs (never expected in our messages) become spaces.
pub(crate) fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs an exported function's body: a panic becomes [`YUEBING_ERR_PANICKED`]; the outcome
/// fills `err` (when not NULL) and this thread's last message; returns the code.
pub(crate) fn entry(err: *mut yuebing_error, body: impl FnOnce() -> FfiResult<()>) -> i32 {
    let _foreign = crate::callbacks::ForeignCall::enter();
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        Err(Failure {
            code: YUEBING_ERR_PANICKED,
            message: crate::call::panic_message(&*panic),
        })
    });
    let (code, message) = match outcome {
        Ok(()) => (YUEBING_OK, String::new()),
        Err(f) => (f.code, f.message),
    };
    // During a thread's teardown (a call from a thread-local destructor) the message is not
    // kept: `err` still says it.
    let _ = LAST.try_with(|last| *last.borrow_mut() = c_string(&message));
    if !err.is_null() {
        // SAFETY: the caller passes NULL or a pointer to a writable `yuebing_error`.
        unsafe { err.write(error_value(code, &message)) };
    }
    code
}

/// A `yuebing_error` holding `code` and as much of `message` as fits.
fn error_value(code: i32, message: &str) -> yuebing_error {
    let mut out = yuebing_error {
        code,
        message: [0; YUEBING_ERROR_MESSAGE_LEN],
    };
    // Cut at a character boundary, leaving room for the NUL.
    let mut end = message.len().min(YUEBING_ERROR_MESSAGE_LEN - 1);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, &b) in out.message.iter_mut().zip(message.as_bytes()[..end].iter()) {
        *dst = if b == 0 { b' ' as c_char } else { b as c_char };
    }
    out
}

/// The message of the last failed call on this thread ("" after a success). Valid until the
/// next yuebing call on this thread. A thread-local alone is unreliable where successive calls
/// may run on different OS threads (Go's cgo): pass a `yuebing_error` there.
#[no_mangle]
pub extern "C" fn yuebing_last_error_message() -> *const c_char {
    LAST.try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The ABI version of the library ([`YUEBING_ABI_VERSION`] of the header it was built with):
/// compare it with the header's at start-up.
#[no_mangle]
pub extern "C" fn yuebing_abi_version() -> u32 {
    YUEBING_ABI_VERSION
}

/// The name of an error code ("ObjectNotFound", …), or "Unknown"; a static string, never
/// freed.
#[no_mangle]
pub extern "C" fn yuebing_error_name(code: i32) -> *const c_char {
    name_of(code).as_ptr()
}

/// The name of `code` as a C string: its row's in the crates' tables of codes (see
/// [`crate::error::code_rows`]), or "Unknown".
fn name_of(code: i32) -> &'static std::ffi::CStr {
    crate::error::code_row(code).map_or(c"Unknown", |row| row.c_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn constants_are_the_rust_codes() {
        use yuebing_engine::Error as E;
        use yuebing_store::Error as S;
        let pairs = [
            (
                S::ObjectNotFound { key: "k".into() }.code(),
                YUEBING_ERR_OBJECT_NOT_FOUND,
            ),
            (
                S::ObjectAlreadyExists { key: "k".into() }.code(),
                YUEBING_ERR_OBJECT_ALREADY_EXISTS,
            ),
            (
                S::ObjectHasLease { key: "k".into() }.code(),
                YUEBING_ERR_OBJECT_HAS_LEASE,
            ),
            (S::Timeout.code(), YUEBING_ERR_STORE_TIMEOUT),
            (
                E::UnknownBatch { id: "b".into() }.code(),
                YUEBING_ERR_UNKNOWN_BATCH,
            ),
            (
                E::AddressNotRegistered { addr: 0 }.code(),
                YUEBING_ERR_ADDRESS_NOT_REGISTERED,
            ),
            (
                E::OutOfBounds { addr: 0, len: 0 }.code(),
                YUEBING_ERR_OUT_OF_BOUNDS,
            ),
            (
                yuebing_rpc::Error::Unauthenticated.code(),
                YUEBING_ERR_UNAUTHENTICATED,
            ),
            (
                Error::WouldBlockBridge.code(),
                YUEBING_ERR_WOULD_BLOCK_BRIDGE,
            ),
            (Error::Shutdown.code(), YUEBING_ERR_SHUTDOWN),
            (Error::Canceled.code(), YUEBING_ERR_CANCELED),
            (Error::Timeout.code(), YUEBING_ERR_TIMEOUT),
            (Error::Forked { parent: 1 }.code(), YUEBING_ERR_FORKED),
            (
                Error::Panicked {
                    message: String::new(),
                }
                .code(),
                YUEBING_ERR_PANICKED,
            ),
        ];
        for (rust, c) in pairs {
            assert_eq!(rust, c);
            assert_ne!(name_of(c).to_bytes(), b"Unknown", "{c}");
        }
    }

    #[test]
    fn names_are_distinct_and_unknown_codes_named_so() {
        let mut seen = std::collections::HashMap::new();
        for code in -5999..=0 {
            let name = name_of(code);
            if name.to_bytes() != b"Unknown" {
                assert!(seen.insert(name, code).is_none(), "{name:?} twice");
            }
        }
        assert!(seen.len() > 60, "{}", seen.len());
        assert_eq!(name_of(12345).to_bytes(), b"Unknown");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_names_are_yuebing_etcds() {
        use std::time::Duration;
        use yuebing_etcd::Error as E;
        let s = String::new;
        for e in [
            E::InvalidConfig { reason: s() },
            E::Unavailable { reason: s() },
            E::Timeout {
                op: s(),
                after: Duration::ZERO,
            },
            E::Unauthenticated { reason: s() },
            E::Rejected { reason: s() },
            E::LeaseNotFound { lease: 1 },
            E::Compacted {
                requested: 1,
                compacted: 2,
            },
            E::WatchCanceled { reason: s() },
            E::BadValue {
                key: s(),
                reason: s(),
            },
            E::Client { reason: s() },
            E::Deposed {
                key: s(),
                epoch: 1,
                current: None,
            },
            E::LogConflict { seq: 1 },
            E::LogGap {
                expected: 1,
                found: 2,
            },
            E::LogTruncated { seq: 1, first: 2 },
            E::LeaseLost {
                lease: 1,
                reason: s(),
            },
        ] {
            assert_eq!(name_of(e.code()).to_str(), Ok(e.name()), "{e}");
            assert_eq!(Error::from(e.clone()).code(), e.code());
        }
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_and_terminated() {
        let long = "é".repeat(300);
        let e = error_value(-1, &long);
        assert_eq!(e.message[YUEBING_ERROR_MESSAGE_LEN - 1], 0);
        let text: Vec<u8> = e
            .message
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert!(std::str::from_utf8(&text).is_ok());
        assert!(text.len() >= YUEBING_ERROR_MESSAGE_LEN - 3);
    }
}
