//! The one error type of yuebing-engine and its stable codes.
//!
//! Codes live in −3000 … −3999: −3000 plus Mooncake's engine code where the meaning matches
//! (ERR_INVALID_ARGUMENT −1 → −3001, ERR_ADDRESS_OVERLAPPED −7 → −3007, ERR_ENDPOINT_ID_MISMATCH
//! −204 → −3204, …), yuebing's own from −3500. An rpc error wrapped here keeps its rpc code.

/// Everything that can go wrong in the Transfer Engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is out of its domain (zero length, a request naming an unknown segment, a
    /// local range that is not registered, …). Nothing was changed. Remedy: fix the call.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What was wrong.
        reason: String,
    },
    /// A submit would put more requests into a batch than its capacity. Nothing was submitted.
    /// Remedy: allocate a larger batch or submit in parts.
    #[error("too many requests: {requested} more into a batch with room for {room}")]
    TooManyRequests {
        /// Requests in the refused submit.
        requested: usize,
        /// Free slots left in the batch.
        room: usize,
    },
    /// No registered range starts at (or contains) this address. Remedy: register the memory
    /// first, or unregister the address that was registered.
    #[error("address {addr:#x} is not registered")]
    AddressNotRegistered {
        /// The address.
        addr: u64,
    },
    /// The batch still has unfinished tasks. Remedy: `wait` or `cancel` it first.
    #[error("batch {batch} is busy: {unfinished} task(s) unfinished")]
    Busy {
        /// The batch, as printed by its id.
        batch: String,
        /// Tasks not yet in a final state.
        unfinished: usize,
    },
    /// The range overlaps one already registered (or being registered at this moment). Adjacent
    /// ranges are fine. Remedy: register disjoint ranges.
    #[error("range {addr:#x}+{len} overlaps a registered range")]
    AddressOverlapped {
        /// Start of the refused range.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// No segment of that name is known to the metadata service. Remedy: check the name (with
    /// the embedded metadata it is the peer's `host:port`) and that the peer runs.
    #[error("segment {name:?} not found")]
    SegmentNotFound {
        /// The segment name.
        name: String,
    },
    /// The request was meant for an earlier instance of the segment (the peer restarted). Its
    /// offsets belonged to the old memory, so it was rejected before touching anything and is
    /// never resent. Remedy: submit again; the initiator has refreshed the descriptor.
    #[error("segment {segment:?} restarted: request for instance {expected:#x}, now {actual:#x}")]
    StaleSegment {
        /// The segment name.
        segment: String,
        /// The instance the request was built for.
        expected: u64,
        /// The instance that runs now.
        actual: u64,
    },
    /// Memory could not be allocated or mapped. Remedy: free memory or ask for less.
    #[error("out of memory: {reason}")]
    OutOfMemory {
        /// What failed.
        reason: String,
    },
    /// A request did not finish within its deadline. Remedy: raise the deadline or check the
    /// peer; the data may be partially written.
    #[error("transfer timed out")]
    Timeout,
    /// The task was canceled before it finished.
    #[error("transfer canceled")]
    Canceled,
    /// A batch id that is unknown, freed, or from an earlier use of its slot. Remedy: use the id
    /// `allocate_batch` returned, before `free_batch`.
    #[error("unknown batch {id}")]
    UnknownBatch {
        /// The id, as printed.
        id: String,
    },
    /// Too many bytes are queued for one peer and the wait queue is full. Remedy: retry later.
    #[error("overloaded: {reason}")]
    Overloaded {
        /// Which bound was hit.
        reason: String,
    },
    /// A remote range is not inside one buffer the target exported (out of bounds, partial
    /// overlap, spanning two buffers, or overflowing; memory the target registered local-only is
    /// invisible to peers, as if unregistered). Checked where the data is served, before any byte
    /// is copied; fails only that task. Remedy: address ranges inside one exported buffer.
    #[error("range {addr:#x}+{len} is outside the target's exported buffers")]
    OutOfBounds {
        /// Start of the refused range.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// The peer failed during the transfer (connection lost, process gone). Remedy: check the
    /// peer; the data may be partially written.
    #[error("peer failed: {reason}")]
    PeerFailed {
        /// What happened.
        reason: String,
    },
    /// The receiver's notification queue is full. Remedy: the receiver must drain it with
    /// `take_notifications`.
    #[error("the peer's notification queue is full")]
    NotificationQueueFull,
    /// Memory on a GPU was named but this build has no GPU support. Remedy: build with the `cuda`
    /// feature.
    #[error("location {location} needs GPU support, which this build lacks (feature `cuda`)")]
    GpuNotBuilt {
        /// The location asked for.
        location: String,
    },
    /// A descriptor or on-disk record of another format version. Remedy: run the same yuebing
    /// version on both sides.
    #[error("unsupported descriptor version {found} (this build reads {supported})")]
    VersionMismatch {
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// An engine buffer that was unregistered was offered for registration again. Same-host
    /// peers may still map its memory, so it is retired for good. Remedy: allocate a new buffer.
    #[error("engine buffer {addr:#x} was unregistered and is retired")]
    BufferRetired {
        /// The buffer's address.
        addr: u64,
    },
    /// A peer's request for a region the target exported, but without the right for the
    /// request's direction: a write into a region exported read-only, or a read of one exported
    /// write-only (see `RemoteAccess`). Checked where the data is served (the initiator, for
    /// shm), before any byte is copied; fails only that task. A region registered local-only is
    /// not exported at all and is refused as [`Error::OutOfBounds`]. Remedy: address memory the
    /// target exported for this access, or have the target register it with that right.
    #[error("range {addr:#x}+{len} is exported without the right for this access")]
    AccessDenied {
        /// Start of the refused range (0 when the refusal came over the wire).
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// An operating-system call failed. Remedy: read the message.
    #[error("i/o error: {reason}")]
    Io {
        /// What failed.
        reason: String,
    },
    /// The metadata service failed: etcd unreachable, a request past its deadline, a stored
    /// value that does not decode, a watch cut short. The service's own code is kept (etcd's
    /// are −5000 … −5999, see `yuebing_etcd::Error`), and so is whether retrying can help.
    /// Remedy: read the message and check the service.
    #[error("metadata service: {reason}")]
    Metadata {
        /// The service's stable code.
        code: i32,
        /// What failed.
        reason: String,
        /// Whether trying again later can succeed.
        retryable: bool,
    },
    /// The control plane failed; the rpc code is kept.
    #[error(transparent)]
    Rpc(#[from] yuebing_rpc::Error),
}

/// Result alias for yuebing-engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable numeric code (engine range, or the rpc code of a wrapped rpc error).
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidArgument { .. } => -3001,
            Error::TooManyRequests { .. } => -3002,
            Error::AddressNotRegistered { .. } => -3003,
            Error::Busy { .. } => -3004,
            Error::AddressOverlapped { .. } => -3007,
            Error::SegmentNotFound { .. } => -3203,
            Error::StaleSegment { .. } => -3204,
            Error::OutOfMemory { .. } => -3302,
            Error::Timeout => -3500,
            Error::Canceled => -3501,
            Error::UnknownBatch { .. } => -3502,
            Error::Overloaded { .. } => -3503,
            Error::OutOfBounds { .. } => -3504,
            Error::PeerFailed { .. } => -3505,
            Error::NotificationQueueFull => -3506,
            Error::GpuNotBuilt { .. } => -3507,
            Error::VersionMismatch { .. } => -3508,
            Error::Io { .. } => -3509,
            Error::BufferRetired { .. } => -3510,
            Error::AccessDenied { .. } => -3511,
            Error::Metadata { code, .. } => *code,
            Error::Rpc(e) => e.code(),
        }
    }

    /// Whether trying again later can succeed. A data request is never resent automatically
    /// (see [`Error::StaleSegment`]); this tells the caller whether a new submit may work.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Overloaded { .. }
            | Error::NotificationQueueFull
            | Error::StaleSegment { .. }
            | Error::Timeout
            | Error::PeerFailed { .. } => true,
            Error::Metadata { retryable, .. } => *retryable,
            Error::Rpc(e) => e.is_retryable(),
            _ => false,
        }
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
}
