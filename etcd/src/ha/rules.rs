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

/// Which incarnation of which cluster a master belongs to: the etcd cluster's id, the
/// cluster's key prefix, and the revision at which its rules were first stored (a cluster
/// created again, or etcd wiped, gets another). A snapshot directory keeps the identity of the
/// cluster its snapshots came from.
pub(crate) fn identity(etcd_cluster: u64, master_prefix: &str, rules_created: i64) -> String {
    format!("etcd cluster {etcd_cluster:016x}, {master_prefix}, rules created at revision {rules_created}")
}

/// Stores `rules` as the cluster's if it has none yet; otherwise checks they are the same.
/// Returns the cluster's [`identity`].
pub(crate) async fn agree(
    client: &Client,
    keys: &Keys,
    rules: &MasterConfig,
    timeout: Duration,
) -> Result<String> {
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
    let (etcd_cluster, revision) = resp
        .header()
        .map(|h| (h.cluster_id(), h.revision()))
        .ok_or_else(|| Error::BadValue {
            key: key.clone(),
            reason: "a transaction response without a header".into(),
        })?;
    if resp.succeeded() {
        return Ok(identity(etcd_cluster, &keys.master(), revision));
    }
    let (theirs, created) = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(|kv| (kv.value().to_vec(), kv.create_revision())),
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
        return Ok(identity(etcd_cluster, &keys.master(), created));
    }
    Err(Error::config(format!(
        "this master's rules differ from those of the cluster's other masters ({key}): \
         theirs {}, ours {ours}; start every master of a cluster with the same settings \
         (--lease-ttl-ms, --put-release-ms, --alignment, …)",
        String::from_utf8_lossy(&theirs)
    )))
}
