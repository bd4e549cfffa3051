//! One set of rules per cluster. Standbys replay the leader's records with their own
//! settings (how long a revoked write's space is held, the alignment of offsets), and a new
//! leader goes on with its own: masters started with different settings would hold space for
//! different times, refuse a record ("overlaps used space") or reuse space too early. The first
//! master of a cluster stores its rules under `<prefix>/<cluster>/master/rules`; every other
//! one must start with the same, or is refused.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use yuebing_store::master::MasterConfig;

use crate::config::Keys;
use crate::error::{Error, Result};
use crate::metadata::timed;

/// Which incarnation of which cluster a master belongs to: the cluster's key prefix and a
/// random id stored once, by the first master, under `<prefix>/<cluster>/master/incarnation`.
/// It survives restarts of masters and of etcd, compaction, and etcd restored from a backup
/// (the key comes back with it); a cluster created again, or a wiped etcd, gets another. A
/// snapshot directory keeps the identity of the cluster its snapshots came from.
pub(crate) async fn identity(client: &Client, keys: &Keys, timeout: Duration) -> Result<String> {
    let key = format!("{}/incarnation", keys.master());
    let ours = format!("{:016x}", random());
    let txn = Txn::new()
        .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.as_str(), ours.as_str(), None)])
        .or_else([TxnOp::get(key.as_str(), None)]);
    let mut kv = client.kv_client();
    let resp = timed(timeout, "the cluster's incarnation", kv.txn(txn)).await?;
    let incarnation = if resp.succeeded() {
        ours
    } else {
        resp.op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(get) => get
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                _ => None,
            })
            .ok_or_else(|| Error::BadValue {
                key: key.clone(),
                reason: "the cluster's incarnation vanished while being read".into(),
            })?
    };
    Ok(format!("{}, incarnation {incarnation}", keys.master()))
}

/// 64 random bits (the standard library's per-process random hash keys, and the time).
pub(super) fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Stores `rules` as the cluster's if it has none yet; otherwise checks they are the same.
pub(crate) async fn agree(
    client: &Client,
    keys: &Keys,
    rules: &MasterConfig,
    timeout: Duration,
) -> Result<()> {
    let key = format!("{}/rules", keys.master());
    let ours = serde_json::to_string(rules).map_err(|e| Error::Client {
        reason: format!("the master's rules do not encode: {e}"),
    })?;
    let txn = Txn::new()
        .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.as_str(), ours.as_str(), None)])
        .or_else([TxnOp::get(key.as_str(), None)]);
    let mut kv = client.kv_client();
    let resp = timed(timeout, "store the cluster's rules", kv.txn(txn)).await?;
    if resp.succeeded() {
        return Ok(());
    }
    let theirs = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        })
        .ok_or_else(|| Error::BadValue {
            key: key.clone(),
            reason: "the cluster's rules vanished while being read".into(),
        })?;
    let theirs_rules: MasterConfig =
        serde_json::from_slice(&theirs).map_err(|e| Error::BadValue {
            key: key.clone(),
            reason: format!("not a master's rules: {e}"),
        })?;
    if &theirs_rules == rules {
        return Ok(());
    }
    Err(Error::config(format!(
        "this master's rules differ from those of the cluster's other masters ({key}): \
         theirs {}, ours {ours}; start every master of a cluster with the same settings \
         (--lease-ttl-ms, --put-release-ms, --alignment, …)",
        String::from_utf8_lossy(&theirs)
    )))
}
