//! The one error type of yuebing-store and its stable codes.
//!
//! Codes live in −1 … −1999 and are Mooncake's store codes where the meaning matches
//! (`OBJECT_NOT_FOUND` −704, `OBJECT_ALREADY_EXISTS` −705, `OBJECT_HAS_LEASE` −706, …); yuebing's
//! own start at −1500. An rpc error wrapped here keeps its rpc code.

/// Everything that can go wrong in the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bug or broken invariant inside the store. Remedy: report it with the message.
    #[error("internal error: {reason}")]
    Internal {
        /// What went wrong.
        reason: String,
    },
    /// No mounted store space has that id. Remedy: mount it first, or use the id `mount` returned.
    #[error("store space {mount} not found")]
    SegmentNotFound {
        /// The mount id.
        mount: u32,
    },
    /// The store space overlaps space already mounted on that node. Remedy: mount disjoint ranges.
    #[error("store space {node}@{base:#x}+{len} overlaps a mounted range")]
    SegmentAlreadyExists {
        /// The node.
        node: String,
        /// Start of the refused range.
        base: u64,
        /// Its length.
        len: u64,
    },
    /// No node has room for a replica, even after evicting. Remedy: add store space, remove
    /// objects, or put smaller values.
    #[error("no store space for {size} bytes")]
    NoAvailableHandle {
        /// Bytes asked for.
        size: u64,
    },
    /// A persisted file or log entry is of another format version. Remedy: run a yuebing that
    /// reads it, or start with an empty `--data-dir`.
    #[error("unsupported format version {found} (this build reads {supported})")]
    InvalidVersion {
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A parameter is out of its domain (size 0, empty or oversized key, replica count 0, …).
    /// Nothing was changed. Remedy: fix the call.
    #[error("invalid parameters: {reason}")]
    InvalidParams {
        /// What was wrong.
        reason: String,
    },
    /// Another client started this write; only it may end or revoke it.
    #[error("client is not the writer of {key:?}")]
    IllegalClient {
        /// The key.
        key: String,
    },
    /// The write cannot be revoked or ended in its state (e.g. revoking a completed object).
    #[error("invalid write on {key:?}: {reason}")]
    InvalidWrite {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The object exists but has no readable replica yet (its put has not ended, or its nodes
    /// have not remounted after a master restart). Remedy: retry later.
    #[error("replica of {key:?} is not ready")]
    ReplicaNotReady {
        /// The key.
        key: String,
    },
    /// No object has that key. Remedy: check the key; it may have been removed or evicted.
    #[error("object {key:?} not found")]
    ObjectNotFound {
        /// The key.
        key: String,
    },
    /// The key is taken by a completed object or by a put younger than the discard timeout.
    /// The existing value is unchanged. Remedy: `remove` or `upsert` it, or use another key.
    #[error("object {key:?} already exists")]
    ObjectAlreadyExists {
        /// The key.
        key: String,
    },
    /// A reader holds a lease on the object, so it may not be removed without force.
    /// Remedy: retry after the lease, or remove with force.
    #[error("object {key:?} has a read lease")]
    ObjectHasLease {
        /// The key.
        key: String,
    },
    /// The read lease ran out before the transfer finished; the bytes read may belong to a newer
    /// object. Remedy: read again.
    #[error("lease on {key:?} expired before the transfer completed")]
    LeaseExpired {
        /// The key.
        key: String,
    },
    /// A write (put or upsert) of the object is in progress. Remedy: wait for it to end, or
    /// force the removal.
    #[error("a write of {key:?} is in progress")]
    WriteInProgress {
        /// The key.
        key: String,
    },
    /// Reading or writing the master's data directory failed. Remedy: read the message (disk
    /// full, permissions).
    #[error("i/o error on {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// A snapshot or log file is damaged beyond its last complete entry. Remedy: restore the
    /// data directory from a backup or move it aside.
    #[error("corrupt {path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What was found.
        reason: String,
    },
    /// This master is not its cluster's leader (a standby, a leader that lost or may have lost
    /// its etcd lease, or one still catching up after it won): it serves neither reads nor
    /// writes. Mooncake's UNAVAILABLE_IN_CURRENT_STATUS. Remedy: call the leader (`leader`
    /// names it when this master knows it; clients that follow etcd re-target by themselves).
    #[error("this master is not the leader{}", leader.as_deref().map(|l| format!(" (the leader is {l})")).unwrap_or_default())]
    NotLeader {
        /// The leader's rpc address, if known.
        leader: Option<String>,
    },
    /// The call's deadline passed before it finished. Remedy: raise the deadline, or check the
    /// master and the nodes holding the object.
    #[error("the call's deadline passed")]
    Timeout,
    /// A transfer failed in the Transfer Engine; the engine's code is kept.
    #[error(transparent)]
    Engine(#[from] yuebing_engine::Error),
    /// An error the master reported that this side cannot rebuild field by field; its code and
    /// message are kept.
    #[error("{message}")]
    Remote {
        /// The code the master sent.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The control plane failed; the rpc code is kept. (An rpc deadline is [`Error::Timeout`].)
    #[error(transparent)]
    Rpc(yuebing_rpc::Error),
}

impl From<yuebing_rpc::Error> for Error {
    fn from(e: yuebing_rpc::Error) -> Self {
        match e {
            yuebing_rpc::Error::Timeout => Error::Timeout,
            other => Error::Rpc(other),
        }
    }
}

/// An error as it crosses the wire: its numeric code, its message, and its main field (the key,
/// or the reason) so the receiver can rebuild the variant. Never a serde enum index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WireError {
    /// [`Error::code`].
    pub code: i32,
    /// The error's message.
    pub message: String,
    /// The key (or reason) it names.
    pub detail: String,
}

/// Result alias for yuebing-store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable numeric code (store range, or the rpc code of a wrapped rpc error).
    pub fn code(&self) -> i32 {
        match self {
            Error::Internal { .. } => -1,
            Error::SegmentNotFound { .. } => -101,
            Error::SegmentAlreadyExists { .. } => -102,
            Error::NoAvailableHandle { .. } => -200,
            Error::InvalidVersion { .. } => -300,
            Error::InvalidParams { .. } => -600,
            Error::IllegalClient { .. } => -601,
            Error::InvalidWrite { .. } => -700,
            Error::ReplicaNotReady { .. } => -703,
            Error::ObjectNotFound { .. } => -704,
            Error::ObjectAlreadyExists { .. } => -705,
            Error::ObjectHasLease { .. } => -706,
            Error::LeaseExpired { .. } => -707,
            Error::WriteInProgress { .. } => -714,
            Error::Io { .. } => -1103,
            Error::NotLeader { .. } => -1010,
            Error::Corrupt { .. } => -1500,
            Error::Timeout => -1501,
            Error::Engine(e) => e.code(),
            Error::Remote { code, .. } => *code,
            Error::Rpc(e) => e.code(),
        }
    }

    /// Whether trying the same call again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::NoAvailableHandle { .. }
            | Error::ReplicaNotReady { .. }
            | Error::ObjectHasLease { .. }
            | Error::LeaseExpired { .. }
            | Error::WriteInProgress { .. }
            | Error::NotLeader { .. }
            | Error::Timeout => true,
            Error::Engine(e) => e.is_retryable(),
            Error::Remote { code, .. } => matches!(code, -200 | -703 | -706 | -707 | -714 | -1010),
            Error::Rpc(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// The error's name as printed by the command line (`error[Name code]`).
    pub fn name(&self) -> &'static str {
        match self {
            Error::Internal { .. } => "Internal",
            Error::SegmentNotFound { .. } => "SegmentNotFound",
            Error::SegmentAlreadyExists { .. } => "SegmentAlreadyExists",
            Error::NoAvailableHandle { .. } => "NoAvailableHandle",
            Error::InvalidVersion { .. } => "InvalidVersion",
            Error::InvalidParams { .. } => "InvalidParams",
            Error::IllegalClient { .. } => "IllegalClient",
            Error::InvalidWrite { .. } => "InvalidWrite",
            Error::ReplicaNotReady { .. } => "ReplicaNotReady",
            Error::ObjectNotFound { .. } => "ObjectNotFound",
            Error::ObjectAlreadyExists { .. } => "ObjectAlreadyExists",
            Error::ObjectHasLease { .. } => "ObjectHasLease",
            Error::LeaseExpired { .. } => "LeaseExpired",
            Error::WriteInProgress { .. } => "WriteInProgress",
            Error::Io { .. } => "Io",
            Error::NotLeader { .. } => "NotLeader",
            Error::Corrupt { .. } => "Corrupt",
            Error::Timeout => "Timeout",
            Error::Engine(_) => "Transfer",
            Error::Remote { .. } => "Remote",
            Error::Rpc(_) => "Rpc",
        }
    }

    /// Encodes this error for the wire.
    pub fn to_wire(&self) -> WireError {
        let detail = match self {
            Error::Internal { reason } | Error::InvalidParams { reason } => reason.clone(),
            Error::SegmentNotFound { mount } => mount.to_string(),
            Error::NoAvailableHandle { size } => size.to_string(),
            Error::IllegalClient { key }
            | Error::ReplicaNotReady { key }
            | Error::ObjectNotFound { key }
            | Error::ObjectAlreadyExists { key }
            | Error::ObjectHasLease { key }
            | Error::LeaseExpired { key }
            | Error::WriteInProgress { key }
            | Error::InvalidWrite { key, .. } => key.clone(),
            Error::NotLeader { leader } => leader.clone().unwrap_or_default(),
            _ => String::new(),
        };
        WireError {
            code: self.code(),
            message: self.to_string(),
            detail,
        }
    }

    /// Rebuilds an error from the wire: the same variant where its fields travel, else
    /// [`Error::Remote`] with the same code.
    pub fn from_wire(w: WireError) -> Error {
        let key = || w.detail.clone();
        match w.code {
            -1 => Error::Internal { reason: key() },
            -101 => match w.detail.parse() {
                Ok(mount) => Error::SegmentNotFound { mount },
                Err(_) => Error::Remote {
                    code: w.code,
                    message: w.message,
                },
            },
            -200 => Error::NoAvailableHandle {
                size: w.detail.parse().unwrap_or(0),
            },
            -600 => Error::InvalidParams { reason: key() },
            -601 => Error::IllegalClient { key: key() },
            -700 => Error::InvalidWrite {
                key: key(),
                reason: w.message,
            },
            -703 => Error::ReplicaNotReady { key: key() },
            -704 => Error::ObjectNotFound { key: key() },
            -705 => Error::ObjectAlreadyExists { key: key() },
            -706 => Error::ObjectHasLease { key: key() },
            -707 => Error::LeaseExpired { key: key() },
            -714 => Error::WriteInProgress { key: key() },
            -1010 => Error::NotLeader {
                leader: Some(key()).filter(|l| !l.is_empty()),
            },
            code => Error::Remote {
                code,
                message: w.message,
            },
        }
    }

    pub(crate) fn params(reason: impl Into<String>) -> Self {
        Error::InvalidParams {
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_mooncake_and_stay_in_the_store_range() {
        let k = || "k".to_string();
        assert_eq!(Error::ObjectNotFound { key: k() }.code(), -704);
        assert_eq!(Error::ObjectAlreadyExists { key: k() }.code(), -705);
        assert_eq!(Error::ObjectHasLease { key: k() }.code(), -706);
        assert_eq!(Error::LeaseExpired { key: k() }.code(), -707);
        assert_eq!(Error::NoAvailableHandle { size: 1 }.code(), -200);
        for e in [
            Error::params("x"),
            Error::WriteInProgress { key: k() },
            Error::Corrupt {
                path: k(),
                reason: k(),
            },
        ] {
            assert!((-1999..=-1).contains(&e.code()), "{e}");
        }
    }

    #[test]
    fn wire_round_trip_keeps_code_and_key() {
        for e in [
            Error::ObjectNotFound { key: "a/b".into() },
            Error::ObjectHasLease { key: "k".into() },
            Error::params("size 0"),
            Error::SegmentNotFound { mount: 7 },
            Error::NoAvailableHandle { size: 42 },
            Error::NotLeader { leader: None },
            Error::NotLeader {
                leader: Some("127.0.0.1:50051".into()),
            },
        ] {
            assert_eq!(Error::from_wire(e.to_wire()), e);
        }
        let e = Error::NotLeader { leader: None };
        assert_eq!((e.code(), e.is_retryable()), (-1010, true));
        let io = Error::Io {
            path: "p".into(),
            reason: "r".into(),
        };
        let back = Error::from_wire(io.to_wire());
        assert_eq!((back.code(), back.to_string()), (io.code(), io.to_string()));
    }
}
