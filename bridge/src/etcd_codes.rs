//! etcd's codes (−5000 … −5999) for the bridge's table of names: yuebing-etcd's own table in a
//! build with the `etcd` feature, and a copy of it without, since even a build that cannot talk
//! to etcd may be handed an etcd code (a master on etcd reports one) and must name it as C and
//! Python do. The copy is checked against yuebing-etcd's table by a test.

use yuebing_rpc::ErrorCode;

/// etcd's table: `yuebing_etcd::Error::CODES`.
#[cfg(feature = "etcd")]
pub(crate) const ETCD_CODES: &[ErrorCode] = yuebing_etcd::Error::CODES;

/// etcd's table: a copy of `yuebing_etcd::Error::CODES` (this build lacks the `etcd` feature).
#[cfg(not(feature = "etcd"))]
pub(crate) const ETCD_CODES: &[ErrorCode] = COPY;

/// A row of the copy.
#[cfg(any(test, not(feature = "etcd")))]
macro_rules! row {
    ($code:literal, $name:literal, $retryable:literal) => {
        ErrorCode::new($code, $name, concat!($name, "\0"), $retryable)
    };
}

/// The copy of `yuebing_etcd::Error::CODES`, row for row.
#[cfg(any(test, not(feature = "etcd")))]
const COPY: &[ErrorCode] = &[
    row!(-5001, "EtcdInvalidConfig", false),
    row!(-5002, "EtcdUnavailable", true),
    row!(-5003, "EtcdTimeout", true),
    row!(-5004, "EtcdUnauthenticated", false),
    row!(-5005, "EtcdRejected", false),
    row!(-5006, "EtcdLeaseNotFound", false),
    row!(-5007, "EtcdCompacted", true),
    row!(-5008, "EtcdWatchCanceled", true),
    row!(-5009, "EtcdBadValue", false),
    row!(-5011, "EtcdClient", false),
    row!(-5012, "EtcdDeposed", false),
    row!(-5013, "EtcdLogConflict", false),
    row!(-5014, "EtcdLogGap", false),
    row!(-5015, "EtcdLogTruncated", false),
    row!(-5016, "EtcdLeaseLost", false),
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_copy_is_yuebing_etcds_table() {
        assert_eq!(super::COPY, yuebing_etcd::Error::CODES);
    }
}
