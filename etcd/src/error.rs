//! The one error type of yuebing-etcd and its stable codes.
//!
//! Codes live in −5000 … −5999, a range of their own (store −1 … −1999, rpc −2000 … −2999,
//! engine −3000 … −3999, bridge −4000 … −4999); a log group's framing error ([`Error::Log`])
//! keeps the store's code. Through the engine's `MetadataStore` they
//! travel as [`yuebing_engine::Error::Metadata`] with the same code; a missing segment is the
//! engine's own `SegmentNotFound` (−3203), not an etcd error.

use std::time::Duration;

use yuebing_rpc::error_table as crate_error_table;

crate_error_table! {
    /// Everything that can go wrong talking to etcd. (−5010 was the test harness's, which
    /// moved to yuebing-testkit: retired, never to mean anything else.)
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The settings are unusable: no endpoints, a malformed endpoint, an empty cluster name, a
        /// TLS file that cannot be read, TLS asked of a build without it. Nothing was contacted.
        /// Remedy: fix the settings (see [`crate::EtcdConfig`]).
        InvalidConfig {
            /// What is wrong.
            reason: String,
        } = -5001, "EtcdInvalidConfig", retryable: false,
            "invalid etcd settings: {reason}";
        /// etcd could not be reached or dropped the connection (refused, reset, no leader, the
        /// keep-alive or watch stream broken). Remedy: retry; check that etcd runs and has quorum.
        Unavailable {
            /// What failed.
            reason: String,
        } = -5002, "EtcdUnavailable", retryable: true,
            "etcd unavailable: {reason}";
        /// A request got no answer within its deadline. Remedy: retry; check etcd's load and the
        /// network, or raise `request_timeout`.
        Timeout {
            /// The request.
            op: String,
            /// The deadline it had.
            after: Duration,
        } = -5003, "EtcdTimeout", retryable: true,
            "etcd request {op} timed out after {after:?}";
        /// etcd refused the credentials or the permission. Remedy: check the user, password and
        /// its roles.
        Unauthenticated {
            /// etcd's message.
            reason: String,
        } = -5004, "EtcdUnauthenticated", retryable: false,
            "etcd refused access: {reason}";
        /// etcd refused the request for another reason (invalid argument, too large, a failed
        /// precondition). Remedy: read the message.
        Rejected {
            /// etcd's status and message.
            reason: String,
        } = -5005, "EtcdRejected", retryable: false,
            "etcd rejected the request: {reason}";
        /// The lease expired or was revoked, and the keys attached to it are gone. Remedy: grant a
        /// new lease and put again (the metadata store does so by itself).
        LeaseNotFound {
            /// The lease id.
            lease: i64,
        } = -5006, "EtcdLeaseNotFound", retryable: false,
            "etcd lease {lease:#x} not found (expired or revoked)";
        /// A watch asked for history etcd has compacted away. Remedy: read the current value and
        /// watch again from there.
        Compacted {
            /// The revision asked for.
            requested: i64,
            /// The oldest revision etcd still has.
            compacted: i64,
        } = -5007, "EtcdCompacted", retryable: true,
            "etcd history compacted: watch from revision {requested}, compacted up to {compacted}";
        /// etcd ended a watch (for a reason other than compaction). Remedy: watch again.
        WatchCanceled {
            /// etcd's reason.
            reason: String,
        } = -5008, "EtcdWatchCanceled", retryable: true,
            "etcd canceled the watch: {reason}";
        /// A value or event under yuebing's keys does not decode (not a segment descriptor, another
        /// format version, an unknown event type). Nothing was changed. Remedy: check what wrote
        /// that key; run the same yuebing version everywhere.
        BadValue {
            /// The key.
            key: String,
            /// Why it does not decode.
            reason: String,
        } = -5009, "EtcdBadValue", retryable: false,
            "undecodable etcd value at {key:?}: {reason}";
        /// etcd-client failed in a way none of the above describes. Remedy: read the message.
        Client {
            /// What failed.
            reason: String,
        } = -5011, "EtcdClient", retryable: false,
            "etcd client: {reason}";
        /// This master is no longer the leader: its election key is gone or was created again
        /// (another create revision), so the epoch it appended under is over, and the append did
        /// not happen. Remedy: stop accepting writes at once and campaign again as a standby.
        Deposed {
            /// The election key the leader held.
            key: String,
            /// Its create revision, the leader's epoch.
            epoch: i64,
            /// The key's create revision now (`None`: the key is gone).
            current: Option<i64>,
        } = -5012, "EtcdDeposed", retryable: false,
            "deposed: election key {key:?} no longer has create revision {epoch} (now {current:?})";
        /// The log already holds a group starting at `seq`: another appender wrote it first, and
        /// this append did not happen. Remedy: stop appending; re-read the log (a leader that meets
        /// this has been replaced or has a second writer).
        LogConflict {
            /// The first sequence number of the refused group.
            seq: u64,
        } = -5013, "EtcdLogConflict", retryable: false,
            "operation log conflict: a group starting at seq {seq} already exists";
        /// A group does not start right after the last one appended: refused before anything was
        /// sent. Remedy: a bug in the caller; append groups in order, without gaps.
        LogGap {
            /// The sequence number the next group must start at.
            expected: u64,
            /// The one it starts at.
            found: u64,
        } = -5014, "EtcdLogGap", retryable: false,
            "operation log gap: the next group must start at seq {expected}, not {found}";
        /// The log no longer holds `seq`: it was truncated after a snapshot, and the oldest group
        /// kept starts at `first`. Remedy: bootstrap from the leader's snapshot, then tail.
        LogTruncated {
            /// The sequence number asked for.
            seq: u64,
            /// The first sequence number still in the log.
            first: u64,
        } = -5015, "EtcdLogTruncated", retryable: false,
            "operation log truncated: seq {seq} is gone, the log starts at {first}";
        /// The election lease of a candidate or leader is gone: etcd reported it expired or
        /// revoked, or its deadline (counted from the send time of the last answered keep-alive)
        /// passed without a renewal, so etcd may have expired it. A leader that meets this has
        /// stepped down; a candidate did not win. The lease is never replaced. Remedy: stop serving
        /// at once; campaign again from scratch (a new lease, a new key, a new epoch).
        LeaseLost {
            /// The lease id.
            lease: i64,
            /// How it was lost.
            reason: String,
        } = -5016, "EtcdLeaseLost", retryable: false,
            "election lease {lease:#x} lost: {reason}";
    }
    wrapped {
        /// A log group could not be framed or read back (damage is the store's `Corrupt`,
        /// another format version its `InvalidVersion`, an entry too large its
        /// `InvalidParams`). It keeps the store's code (and name); nothing was applied. Remedy:
        /// see the store error; a damaged log needs the standby to bootstrap from a snapshot.
        #[error("operation log: {0}")]
        Log(yuebing_store::Error) => Error::Log(e) => e.code(), e.name(), e.is_retryable();
    }
}

/// Result alias for yuebing-etcd.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// Whether etcd said the lease does not exist (any call that names a lease).
    pub(crate) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
        match e {
            etcd_client::Error::GRpcStatus(s) => {
                s.code() == tonic::Code::NotFound && s.message().contains("lease not found")
            }
            etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
            _ => false,
        }
    }
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        use etcd_client::Error as E;
        match e {
            E::InvalidArgs(m) | E::EndpointError(m) => Error::InvalidConfig { reason: m },
            E::InvalidUri(u) => Error::config(format!("invalid endpoint: {u}")),
            E::InvalidMetadataValue(v) => Error::config(format!("invalid credentials: {v}")),
            E::IoError(e) => Error::Unavailable {
                reason: e.to_string(),
            },
            E::TransportError(e) => Error::Unavailable {
                reason: transport_reason(&e),
            },
            E::WatchError(m) | E::LeaseKeepAliveError(m) => Error::Unavailable { reason: m },
            E::GRpcStatus(s) => from_status(s.code(), s.message()),
            other => Error::Client {
                reason: other.to_string(),
            },
        }
    }
}

/// A transport error with its causes (tonic's own message is only "transport error").
fn transport_reason(e: &dyn std::error::Error) -> String {
    let mut reason = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    reason
}

/// Maps a gRPC status to an error.
fn from_status(code: tonic::Code, message: &str) -> Error {
    use tonic::Code as C;
    let reason = format!("{message} ({code:?})");
    match code {
        // A broken connection surfaces as Unknown or Cancelled; no leader as Unavailable.
        C::Cancelled | C::Unknown | C::DeadlineExceeded | C::Aborted | C::Unavailable => {
            Error::Unavailable { reason }
        }
        C::PermissionDenied | C::Unauthenticated => Error::Unauthenticated { reason },
        _ => Error::Rejected { reason },
    }
}

impl From<Error> for yuebing_engine::Error {
    fn from(e: Error) -> Self {
        yuebing_engine::Error::Metadata {
            code: e.code(),
            reason: e.to_string(),
            retryable: e.is_retryable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_in_the_etcd_range() {
        let all = [
            Error::config("x"),
            Error::Unavailable { reason: "x".into() },
            Error::Timeout {
                op: "get".into(),
                after: Duration::from_secs(1),
            },
            Error::Unauthenticated { reason: "x".into() },
            Error::Rejected { reason: "x".into() },
            Error::LeaseNotFound { lease: 1 },
            Error::Compacted {
                requested: 1,
                compacted: 2,
            },
            Error::WatchCanceled { reason: "x".into() },
            Error::BadValue {
                key: "k".into(),
                reason: "x".into(),
            },
            Error::Client { reason: "x".into() },
            Error::Deposed {
                key: "k".into(),
                epoch: 1,
                current: None,
            },
            Error::LogConflict { seq: 1 },
            Error::LogGap {
                expected: 1,
                found: 2,
            },
            Error::LogTruncated { seq: 1, first: 2 },
            Error::LeaseLost {
                lease: 1,
                reason: "x".into(),
            },
        ];
        let mut codes: Vec<i32> = all.iter().map(Error::code).collect();
        assert!(codes.iter().all(|c| (-5999..=-5000).contains(c)));
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len(), "one code per variant");
        for e in &all {
            assert!(e.name().starts_with("Etcd"));
        }
    }

    #[test]
    fn a_log_framing_error_keeps_the_stores_code() {
        let corrupt = yuebing_store::Error::Corrupt {
            path: "k".into(),
            reason: "x".into(),
        };
        let e = Error::Log(corrupt.clone());
        assert_eq!(e.code(), corrupt.code());
        assert_eq!(e.name(), "Corrupt");
        assert!(!e.is_retryable());
    }

    #[test]
    fn the_engine_keeps_the_code_and_retryability() {
        let e: yuebing_engine::Error = Error::Unavailable { reason: "x".into() }.into();
        assert_eq!(e.code(), -5002);
        assert!(e.is_retryable());
        let e: yuebing_engine::Error = Error::BadValue {
            key: "k".into(),
            reason: "x".into(),
        }
        .into();
        assert_eq!(e.code(), -5009);
        assert!(!e.is_retryable());
    }

    #[test]
    fn grpc_statuses_map_by_kind() {
        use tonic::{Code, Status};
        let status =
            |code, m: &str| Error::from(etcd_client::Error::GRpcStatus(Status::new(code, m)));
        assert_eq!(status(Code::Unavailable, "no leader").code(), -5002);
        assert_eq!(status(Code::Unauthenticated, "bad token").code(), -5004);
        assert_eq!(status(Code::InvalidArgument, "too large").code(), -5005);
        let lease = etcd_client::Error::GRpcStatus(Status::new(
            Code::NotFound,
            "etcdserver: requested lease not found",
        ));
        assert!(Error::is_lease_not_found(&lease));
        assert!(!Error::is_lease_not_found(&etcd_client::Error::GRpcStatus(
            Status::new(Code::NotFound, "key")
        )));
        let keeper = etcd_client::Error::LeaseKeepAliveError("lease not found".into());
        assert!(Error::is_lease_not_found(&keeper));
    }

    #[test]
    fn the_table_gives_one_code_and_one_name_per_row() {
        yuebing_rpc::ErrorCode::check_table(Error::CODES, -5999..=-5000).unwrap();
        assert!(Error::CODES.iter().all(|r| r.name.starts_with("Etcd")));
        let timeout = Error::Timeout {
            op: "get".into(),
            after: Duration::from_secs(1),
        };
        assert_eq!((timeout.code(), timeout.name()), (-5003, "EtcdTimeout"));
    }
}
