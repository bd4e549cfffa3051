//! The one error type of yuebing-store and its stable codes.
//!
//! Codes live in −1 … −1999 and are Mooncake's store codes where the meaning matches
//! (`OBJECT_NOT_FOUND` −704, `OBJECT_ALREADY_EXISTS` −705, `OBJECT_HAS_LEASE` −706, …); yuebing's
//! own start at −1500. An rpc error wrapped here keeps its rpc code.

use yuebing_rpc::error_table as crate_error_table;

crate_error_table! {
    wire: WireError;
    /// Everything that can go wrong in the store.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// A bug or broken invariant inside the store. Remedy: report it with the message.
        Internal {
            /// What went wrong.
            reason: String,
        } = -1, "Internal", retryable: false,
            "internal error: {reason}"
            => wire |w| Some(Error::Internal { reason: w.detail.clone() });
        /// No mounted store space has that id. Remedy: mount it first, or use the id `mount`
        /// returned.
        SegmentNotFound {
            /// The mount id.
            mount: u32,
        } = -101, "SegmentNotFound", retryable: false,
            "store space {mount} not found"
            => wire |w| Some(Error::SegmentNotFound { mount: w.detail.parse().ok()? });
        /// The store space overlaps space already mounted on that node. Remedy: mount disjoint
        /// ranges.
        SegmentAlreadyExists {
            /// The node.
            node: String,
            /// Start of the refused range.
            base: u64,
            /// Its length.
            len: u64,
        } = -102, "SegmentAlreadyExists", retryable: false,
            "store space {node}@{base:#x}+{len} overlaps a mounted range";
        /// No node has room for a replica, even after evicting. Remedy: add store space, remove
        /// objects, or put smaller values.
        NoAvailableHandle {
            /// Bytes asked for.
            size: u64,
        } = -200, "NoAvailableHandle", retryable: true,
            "no store space for {size} bytes"
            => wire |w| Some(Error::NoAvailableHandle {
                size: w.detail.parse().unwrap_or(0),
            });
        /// A persisted file or log entry is of another format version. Remedy: run a yuebing that
        /// reads it, or start with an empty `--data-dir`.
        InvalidVersion {
            /// The version found.
            found: u32,
            /// The version this build reads.
            supported: u32,
        } = -300, "InvalidVersion", retryable: false,
            "unsupported format version {found} (this build reads {supported})";
        /// A parameter is out of its domain (size 0, empty or oversized key, replica count 0, …).
        /// Nothing was changed. Remedy: fix the call.
        InvalidParams {
            /// What was wrong.
            reason: String,
        } = -600, "InvalidParams", retryable: false,
            "invalid parameters: {reason}"
            => wire |w| Some(Error::InvalidParams { reason: w.detail.clone() });
        /// Another client started this write; only it may end or revoke it.
        IllegalClient {
            /// The key.
            key: String,
        } = -601, "IllegalClient", retryable: false,
            "client is not the writer of {key:?}"
            => wire |w| Some(Error::IllegalClient { key: w.detail.clone() });
        /// The write cannot be revoked or ended in its state (e.g. revoking a completed object).
        InvalidWrite {
            /// The key.
            key: String,
            /// Why.
            reason: String,
        } = -700, "InvalidWrite", retryable: false,
            "invalid write on {key:?}: {reason}"
            => wire |w| Some(Error::InvalidWrite {
                key: w.detail.clone(),
                reason: w.message.clone(),
            });
        /// The object exists but has no readable replica yet (its put has not ended, or its nodes
        /// have not remounted after a master restart). Remedy: retry later.
        ReplicaNotReady {
            /// The key.
            key: String,
        } = -703, "ReplicaNotReady", retryable: true,
            "replica of {key:?} is not ready"
            => wire |w| Some(Error::ReplicaNotReady { key: w.detail.clone() });
        /// No object has that key. Remedy: check the key; it may have been removed or evicted.
        ObjectNotFound {
            /// The key.
            key: String,
        } = -704, "ObjectNotFound", retryable: false,
            "object {key:?} not found"
            => wire |w| Some(Error::ObjectNotFound { key: w.detail.clone() });
        /// The key is taken by a completed object or by a put younger than the discard timeout.
        /// The existing value is unchanged. Remedy: `remove` or `upsert` it, or use another key.
        ObjectAlreadyExists {
            /// The key.
            key: String,
        } = -705, "ObjectAlreadyExists", retryable: false,
            "object {key:?} already exists"
            => wire |w| Some(Error::ObjectAlreadyExists { key: w.detail.clone() });
        /// A reader holds a lease on the object, so it may not be removed without force.
        /// Remedy: retry after the lease, or remove with force.
        ObjectHasLease {
            /// The key.
            key: String,
        } = -706, "ObjectHasLease", retryable: true,
            "object {key:?} has a read lease"
            => wire |w| Some(Error::ObjectHasLease { key: w.detail.clone() });
        /// The read lease ran out before the transfer finished; the bytes read may belong to a
        /// newer object. Remedy: read again.
        LeaseExpired {
            /// The key.
            key: String,
        } = -707, "LeaseExpired", retryable: true,
            "lease on {key:?} expired before the transfer completed"
            => wire |w| Some(Error::LeaseExpired { key: w.detail.clone() });
        /// A copy or move task is copying the object (Mooncake's
        /// `OBJECT_HAS_REPLICATION_TASK`). Remedy: wait for the task to end (`query_task`), or
        /// remove with force (the task then fails).
        ObjectHasReplicationTask {
            /// The key.
            key: String,
        } = -708, "ObjectHasReplicationTask", retryable: true,
            "a copy or move task is copying {key:?}"
            => wire |w| Some(Error::ObjectHasReplicationTask { key: w.detail.clone() });
        /// A write (put or upsert) of the object is in progress. Remedy: wait for it to end, or
        /// force the removal.
        WriteInProgress {
            /// The key.
            key: String,
        } = -714, "WriteInProgress", retryable: true,
            "a write of {key:?} is in progress"
            => wire |w| Some(Error::WriteInProgress { key: w.detail.clone() });
        /// Reading or writing the master's data directory or a node's disk tier failed. Remedy:
        /// read the message (disk full, permissions).
        Io {
            /// The file.
            path: String,
            /// What failed.
            reason: String,
        } = -1103, "Io", retryable: false,
            "i/o error on {path}: {reason}";
        /// No copy or move task has that id: it never existed, or it finished long enough ago
        /// that the master forgot it (it keeps `max_finished_tasks`). Remedy: check the id.
        TaskNotFound {
            /// The id, as `high-low`.
            task: String,
        } = -1400, "TaskNotFound", retryable: false,
            "task {task} not found"
            => wire |w| Some(Error::TaskNotFound { task: w.detail.clone() });
        /// The master already has `max_pending_tasks` tasks waiting for their clients; nothing
        /// was created. Remedy: retry when some have been taken, or raise the limit.
        TaskPendingLimitExceeded {
            /// The limit.
            limit: u64,
        } = -1401, "TaskPendingLimitExceeded", retryable: true,
            "{limit} tasks are pending already"
            => wire |w| Some(Error::TaskPendingLimitExceeded {
                limit: w.detail.parse().unwrap_or(0),
            });
        /// A snapshot or log file is damaged beyond its last complete entry, or a disk tier
        /// record failed its checksums (it is then forgotten). Remedy: restore the data
        /// directory from a backup or move it aside; a disk tier's damaged object is read from
        /// another replica, or is lost.
        Corrupt {
            /// The file.
            path: String,
            /// What was found.
            reason: String,
        } = -1500, "Corrupt", retryable: false,
            "corrupt {path}: {reason}";
        /// This master is not its cluster's leader (a standby, a leader that lost or may have lost
        /// its etcd lease, or one still catching up after it won): it serves neither reads nor
        /// writes. Mooncake's UNAVAILABLE_IN_CURRENT_STATUS. Remedy: call the leader (`leader`
        /// names it when this master knows it; clients that follow etcd re-target by themselves).
        NotLeader {
            /// The leader's rpc address, if known.
            leader: Option<String>,
        } = -1010, "NotLeader", retryable: true,
            "this master is not the leader{}",
            leader.as_deref().map(|l| format!(" (the leader is {l})")).unwrap_or_default()
            => wire |w| Some(Error::NotLeader {
                leader: Some(w.detail.clone()).filter(|l| !l.is_empty()),
            });
        /// A node's disk tier has no room for a record, even after compacting. Remedy: give the
        /// tier more space (`--disk-size`), or let its eviction free some.
        DiskTierFull {
            /// Bytes the record needs.
            need: u64,
            /// Bytes free.
            free: u64,
        } = -1502, "DiskTierFull", retryable: true,
            "the disk tier has {free} bytes free, {need} needed";
        /// The call's deadline passed before it finished. Remedy: raise the deadline, or check the
        /// master and the nodes holding the object.
        Timeout = -1501, "StoreTimeout", retryable: true,
            "the call's deadline passed";
    }
    wrapped {
        /// A transfer failed in the Transfer Engine; the engine's code is kept.
        #[error(transparent)]
        Engine(#[from] yuebing_engine::Error)
            => Error::Engine(e) => e.code(), e.name(), e.is_retryable();
        /// An error the master reported that this side cannot rebuild field by field; its code
        /// and message are kept, and its name and retryability are its code's.
        #[error("{message}")]
        Remote {
            /// The code the master sent.
            code: i32,
            /// Its message.
            message: String,
        } => Error::Remote { code, .. } => *code, code_name(*code), code_retryable(*code);
        /// The control plane failed; the rpc code is kept. (An rpc deadline is
        /// [`Error::Timeout`].)
        #[error(transparent)]
        Rpc(yuebing_rpc::Error) => Error::Rpc(e) => e.code(), e.name(), e.is_retryable();
    }
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

/// The name of a code of the store, the engine or the rpc layer ("ObjectNotFound"), or
/// "Unknown".
fn code_name(code: i32) -> &'static str {
    Error::own_code_row(code)
        .or_else(|| yuebing_rpc::ErrorCode::find(yuebing_engine::Error::CODES, code))
        .or_else(|| yuebing_rpc::ErrorCode::find(yuebing_rpc::Error::CODES, code))
        .map_or("Unknown", |row| row.name)
}

/// Whether a store code sent by the master is one that retrying can help.
fn code_retryable(code: i32) -> bool {
    Error::own_code_row(code).is_some_and(|row| row.retryable)
}

/// Result alias for yuebing-store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Encodes this error for the wire.
    pub fn to_wire(&self) -> WireError {
        let detail = match self {
            Error::Internal { reason } | Error::InvalidParams { reason } => reason.clone(),
            Error::SegmentNotFound { mount } => mount.to_string(),
            Error::NoAvailableHandle { size } => size.to_string(),
            Error::TaskNotFound { task } => task.clone(),
            Error::TaskPendingLimitExceeded { limit } => limit.to_string(),
            Error::IllegalClient { key }
            | Error::ReplicaNotReady { key }
            | Error::ObjectNotFound { key }
            | Error::ObjectAlreadyExists { key }
            | Error::ObjectHasLease { key }
            | Error::LeaseExpired { key }
            | Error::WriteInProgress { key }
            | Error::ObjectHasReplicationTask { key }
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
        match Error::decode_wire(w.code, &w) {
            Some(Some(e)) => e,
            _ => Error::Remote {
                code: w.code,
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

    #[test]
    fn the_table_gives_one_code_and_one_name_per_row() {
        yuebing_rpc::ErrorCode::check_table(Error::CODES, -1999..=-1).unwrap();
    }

    #[test]
    fn a_store_timeout_is_named_store_timeout_as_in_c_and_python() {
        assert_eq!(
            (Error::Timeout.code(), Error::Timeout.name()),
            (-1501, "StoreTimeout")
        );
        assert!(Error::Timeout.is_retryable());
    }

    #[test]
    fn wrapped_and_remote_errors_go_by_their_codes_name() {
        let rpc = Error::Rpc(yuebing_rpc::Error::Unauthenticated);
        assert_eq!((rpc.code(), rpc.name()), (-2004, "Unauthenticated"));
        let engine = Error::Engine(yuebing_engine::Error::Canceled);
        assert_eq!((engine.code(), engine.name()), (-3501, "TransferCanceled"));
        let remote = |code| Error::Remote {
            code,
            message: String::new(),
        };
        assert_eq!(remote(-1103).name(), "Io");
        assert_eq!(remote(-2003).name(), "RpcOverloaded");
        assert_eq!(remote(-3504).name(), "OutOfBounds");
        assert_eq!(remote(-1999).name(), "Unknown");
        for code in [-200, -703, -706, -707, -714, -1010] {
            assert!(remote(code).is_retryable(), "{code}");
        }
        assert!(!remote(-1103).is_retryable());
        assert!(!remote(-2003).is_retryable(), "only store codes say so");
    }
}
