//! The one error type of yuebing-engine and its stable codes.
//!
//! Codes live in −3000 … −3999: −3000 plus Mooncake's engine code where the meaning matches
//! (ERR_INVALID_ARGUMENT −1 → −3001, ERR_ADDRESS_OVERLAPPED −7 → −3007, ERR_ENDPOINT_ID_MISMATCH
//! −204 → −3204, …), yuebing's own from −3500. An rpc error wrapped here keeps its rpc code.
//! One row per code in the table below; `code()`, `name()`, `is_retryable()` and the decoding of
//! a target's status (`Error::from_target_status`) come from it.

use yuebing_rpc::error_table as crate_error_table;

crate_error_table! {
    wire: u64;
    /// Everything that can go wrong in the Transfer Engine.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// An argument is out of its domain (zero length, a request naming an unknown segment, a
        /// local range that is not registered, …). Nothing was changed. Remedy: fix the call.
        InvalidArgument {
            /// What was wrong.
            reason: String,
        } = -3001, "EngineInvalidArgument", retryable: false,
            "invalid argument: {reason}"
            => wire |_extra| Some(Error::invalid("refused by the target"));
        /// A submit would put more requests into a batch than its capacity. Nothing was submitted.
        /// Remedy: allocate a larger batch or submit in parts.
        TooManyRequests {
            /// Requests in the refused submit.
            requested: usize,
            /// Free slots left in the batch.
            room: usize,
        } = -3002, "TooManyRequests", retryable: false,
            "too many requests: {requested} more into a batch with room for {room}";
        /// No registered range starts at (or contains) this address. Remedy: register the memory
        /// first, or unregister the address that was registered.
        AddressNotRegistered {
            /// The address.
            addr: u64,
        } = -3003, "AddressNotRegistered", retryable: false,
            "address {addr:#x} is not registered";
        /// The batch still has unfinished tasks. Remedy: `wait` or `cancel` it first.
        Busy {
            /// The batch, as printed by its id.
            batch: String,
            /// Tasks not yet in a final state.
            unfinished: usize,
        } = -3004, "Busy", retryable: false,
            "batch {batch} is busy: {unfinished} task(s) unfinished";
        /// The range overlaps one already registered (or being registered at this moment). Adjacent
        /// ranges are fine. Remedy: register disjoint ranges.
        AddressOverlapped {
            /// Start of the refused range.
            addr: u64,
            /// Its length.
            len: u64,
        } = -3007, "AddressOverlapped", retryable: false,
            "range {addr:#x}+{len} overlaps a registered range";
        /// No segment of that name is known to the metadata service. Remedy: check the name (with
        /// the embedded metadata it is the peer's `host:port`) and that the peer runs.
        SegmentNotFound {
            /// The segment name.
            name: String,
        } = -3203, "EngineSegmentNotFound", retryable: false,
            "segment {name:?} not found";
        /// The request was meant for an earlier instance of the segment (the peer restarted). Its
        /// offsets belonged to the old memory, so it was rejected before touching anything and is
        /// never resent. Remedy: submit again; the initiator has refreshed the descriptor.
        StaleSegment {
            /// The segment name.
            segment: String,
            /// The instance the request was built for.
            expected: u64,
            /// The instance that runs now.
            actual: u64,
        } = -3204, "StaleSegment", retryable: true,
            "segment {segment:?} restarted: request for instance {expected:#x}, now {actual:#x}"
            => wire |extra| Some(Error::StaleSegment {
                segment: String::new(),
                expected: 0,
                actual: *extra,
            });
        /// Memory could not be allocated or mapped. Remedy: free memory or ask for less.
        OutOfMemory {
            /// What failed.
            reason: String,
        } = -3302, "OutOfMemory", retryable: false,
            "out of memory: {reason}";
        /// A request did not finish within its deadline. Remedy: raise the deadline or check the
        /// peer; the data may be partially written.
        Timeout = -3500, "TransferTimeout", retryable: true,
            "transfer timed out";
        /// The task was canceled before it finished.
        Canceled = -3501, "TransferCanceled", retryable: false,
            "transfer canceled";
        /// A batch id that is unknown, freed, or from an earlier use of its slot. Remedy: use the
        /// id `allocate_batch` returned, before `free_batch`.
        UnknownBatch {
            /// The id, as printed.
            id: String,
        } = -3502, "UnknownBatch", retryable: false,
            "unknown batch {id}";
        /// Too many bytes are queued for one peer and the wait queue is full. Remedy: retry later.
        Overloaded {
            /// Which bound was hit.
            reason: String,
        } = -3503, "EngineOverloaded", retryable: true,
            "overloaded: {reason}";
        /// A remote range is not inside one buffer the target exported (out of bounds, partial
        /// overlap, spanning two buffers, or overflowing; memory the target registered local-only
        /// is invisible to peers, as if unregistered). Checked where the data is served, before any
        /// byte is copied; fails only that task. Remedy: address ranges inside one exported buffer.
        OutOfBounds {
            /// Start of the refused range.
            addr: u64,
            /// Its length.
            len: u64,
        } = -3504, "OutOfBounds", retryable: false,
            "range {addr:#x}+{len} is outside the target's exported buffers"
            => wire |_extra| Some(Error::OutOfBounds { addr: 0, len: 0 });
        /// The peer failed during the transfer (connection lost, process gone). Remedy: check the
        /// peer; the data may be partially written.
        PeerFailed {
            /// What happened.
            reason: String,
        } = -3505, "PeerFailed", retryable: true,
            "peer failed: {reason}";
        /// The receiver's notification queue is full. Remedy: the receiver must drain it with
        /// `take_notifications`.
        NotificationQueueFull = -3506, "NotificationQueueFull", retryable: true,
            "the peer's notification queue is full";
        /// Memory on a GPU was named but this build has no GPU support. Remedy: build with the
        /// `cuda` feature.
        GpuNotBuilt {
            /// The location asked for.
            location: String,
        } = -3507, "GpuNotBuilt", retryable: false,
            "location {location} needs GPU support, which this build lacks (feature `cuda`)";
        /// A descriptor or on-disk record of another format version. Remedy: run the same yuebing
        /// version on both sides.
        VersionMismatch {
            /// The version found.
            found: u32,
            /// The version this build reads.
            supported: u32,
        } = -3508, "EngineVersionMismatch", retryable: false,
            "unsupported descriptor version {found} (this build reads {supported})";
        /// An engine buffer that was unregistered was offered for registration again. Same-host
        /// peers may still map its memory, so it is retired for good. Remedy: allocate a new
        /// buffer.
        BufferRetired {
            /// The buffer's address.
            addr: u64,
        } = -3510, "BufferRetired", retryable: false,
            "engine buffer {addr:#x} was unregistered and is retired";
        /// A peer's request for a region the target exported, but without the right for the
        /// request's direction: a write into a region exported read-only, or a read of one exported
        /// write-only (see `RemoteAccess`). Checked where the data is served (the initiator, for
        /// shm), before any byte is copied; fails only that task. A region registered local-only is
        /// not exported at all and is refused as [`Error::OutOfBounds`]. Remedy: address memory the
        /// target exported for this access, or have the target register it with that right.
        AccessDenied {
            /// Start of the refused range (0 when the refusal came over the wire).
            addr: u64,
            /// Its length.
            len: u64,
        } = -3511, "AccessDenied", retryable: false,
            "range {addr:#x}+{len} is exported without the right for this access"
            => wire |_extra| Some(Error::AccessDenied { addr: 0, len: 0 });
        /// No RDMA device can be used: rdma-core (libibverbs) is not installed, no device
        /// exists, or none of the NICs asked for is active. The engine goes on with tcp and shm.
        /// Remedy: install rdma-core and check `ibv_devices`, or name active NICs.
        NoRdmaDevice {
            /// What was missing.
            reason: String,
        } = -3512, "NoRdmaDevice", retryable: false,
            "no RDMA device: {reason}";
        /// GPU memory was named but no CUDA driver can be used: the driver library is not
        /// installed, or it failed to start. The engine goes on with host memory. Remedy:
        /// install the NVIDIA driver, or register host memory.
        NoCudaDriver {
            /// What was missing.
            reason: String,
        } = -3513, "NoCudaDriver", retryable: false,
            "no CUDA driver: {reason}";
        /// An operating-system call failed. Remedy: read the message.
        Io {
            /// What failed.
            reason: String,
        } = -3509, "EngineIo", retryable: false,
            "i/o error: {reason}"
            => wire |_extra| Some(Error::Io {
                reason: "the target's memory for the range is gone (its file was truncated)"
                    .into(),
            });
    }
    wrapped {
        /// The metadata service failed: etcd unreachable, a request past its deadline, a stored
        /// value that does not decode, a watch cut short. The service's own code is kept (etcd's
        /// are −5000 … −5999, see `yuebing_etcd::Error`), and so is whether retrying can help.
        /// The engine does not know the service's names: it names the error `Metadata` (the
        /// service's crate names its codes). Remedy: read the message and check the service.
        #[error("metadata service: {reason}")]
        Metadata {
            /// The service's stable code.
            code: i32,
            /// What failed.
            reason: String,
            /// Whether trying again later can succeed.
            retryable: bool,
        } => Error::Metadata { code, retryable, .. } => *code, "Metadata", *retryable;
        /// The control plane failed; the rpc code is kept.
        #[error(transparent)]
        Rpc(#[from] yuebing_rpc::Error) => Error::Rpc(e) => e.code(), e.name(), e.is_retryable();
    }
}

/// Result alias for yuebing-engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error a target's status code stands for (`extra`: the target's instance id), as
    /// its row rebuilds it; `None` for a code no row rebuilds.
    pub(crate) fn from_target_status(status: i32, extra: u64) -> Option<Error> {
        Error::decode_wire(status, &extra).flatten()
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_mooncake_where_they_match_and_stay_in_range() {
        assert_eq!(Error::invalid("x").code(), -3001);
        assert_eq!(Error::AddressOverlapped { addr: 0, len: 1 }.code(), -3007);
        assert_eq!(Error::AddressNotRegistered { addr: 0 }.code(), -3003);
        let rpc = Error::Rpc(yuebing_rpc::Error::Timeout);
        assert_eq!(rpc.code(), -2001, "a wrapped rpc error keeps its code");
        let etcd = Error::Metadata {
            code: -5002,
            reason: "x".into(),
            retryable: true,
        };
        assert_eq!(etcd.code(), -5002, "a metadata service's code is kept");
        assert!(etcd.is_retryable());
        for e in [
            Error::Timeout,
            Error::Canceled,
            Error::NotificationQueueFull,
            Error::Io { reason: "x".into() },
        ] {
            assert!((-3999..=-3000).contains(&e.code()));
        }
    }

    #[test]
    fn the_table_gives_one_code_and_one_name_per_row() {
        yuebing_rpc::ErrorCode::check_table(Error::CODES, -3999..=-3000).unwrap();
        assert_eq!(
            (Error::Timeout.code(), Error::Timeout.name()),
            (-3500, "TransferTimeout")
        );
        assert_eq!(Error::invalid("x").name(), "EngineInvalidArgument");
        let rpc = Error::Rpc(yuebing_rpc::Error::Timeout);
        assert_eq!(
            rpc.name(),
            "RpcTimeout",
            "a wrapped rpc error keeps its name"
        );
        let etcd = Error::Metadata {
            code: -5002,
            reason: "x".into(),
            retryable: true,
        };
        assert_eq!(etcd.name(), "Metadata");
    }

    #[test]
    fn a_targets_status_is_rebuilt_from_its_row() {
        let stale = Error::from_target_status(-3204, 7).unwrap();
        assert!(
            matches!(stale, Error::StaleSegment { actual: 7, .. }),
            "{stale:?}"
        );
        assert_eq!(
            Error::from_target_status(-3504, 0).map(|e| e.code()),
            Some(-3504)
        );
        assert_eq!(
            Error::from_target_status(-3511, 0).map(|e| e.code()),
            Some(-3511)
        );
        assert_eq!(
            Error::from_target_status(-3001, 0).map(|e| e.code()),
            Some(-3001)
        );
        assert_eq!(Error::from_target_status(-3505, 0), None);
    }
}
