//! Truncating the log and compacting etcd's history (see the module docs of [`super`]).

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use yuebing_store::master::ha::LogGroup;

use super::{inclusive_end, is_compacted, revision_of, EtcdLog, Revision};
use crate::error::{Error, Result};
use crate::log::Epoch;

impl EtcdLog {
    /// Deletes the groups whose last entry is at or below `upto`, returning how many keys were
    /// deleted. A group that also holds entries after `upto` is kept, and so is the newest
    /// group (the log's end must stay known: an empty log would start again at 1). Deleted keys
    /// stay in etcd's history until [`EtcdLog::compact`]. A leader uses
    /// [`EtcdLog::truncate_as_leader`].
    pub async fn truncate(&self, upto: u64) -> Result<u64> {
        let Some(kept) = self.first_kept(upto).await? else {
            return Ok(0);
        };
        let mut kv = self.client.kv_client();
        let delete = DeleteOptions::new().with_range(kept);
        let resp = self
            .call("log truncate", kv.delete(self.log_start(), Some(delete)))
            .await?;
        Ok(u64::try_from(resp.deleted()).unwrap_or(0))
    }

    /// [`EtcdLog::truncate`] in one transaction that commits only while `epoch` still leads and
    /// no standby registered after `standbys_read_at` (the revision at which the leader read the
    /// standbys' positions that bounded `upto`, [`EtcdLog::applied_positions_at`]). `Ok(None)`
    /// when a guard failed and nothing was deleted: a deposed leader deletes nothing, and a
    /// standby that registered meanwhile is not truncated past.
    pub async fn truncate_as_leader(
        &self,
        upto: u64,
        epoch: &Epoch,
        standbys_read_at: Revision,
    ) -> Result<Option<u64>> {
        let Some(kept) = self.first_kept(upto).await? else {
            return Ok(Some(0));
        };
        let standbys = self.keys.standbys();
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    epoch.election_key.as_str(),
                    CompareOp::Equal,
                    epoch.create_revision,
                ),
                // Every standby key (re)created no later than the read; an empty range passes.
                Compare::create_revision(
                    standbys.as_str(),
                    CompareOp::Less,
                    standbys_read_at.saturating_add(1),
                )
                .with_prefix(),
            ])
            .and_then([TxnOp::delete(
                self.log_start(),
                Some(DeleteOptions::new().with_range(kept)),
            )]);
        let mut kv = self.client.kv_client();
        let resp = self.call("log truncate", kv.txn(txn)).await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let deleted = resp
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                etcd_client::TxnOpResponse::Delete(d) => Some(d.deleted()),
                _ => None,
            })
            .unwrap_or(0);
        Ok(Some(u64::try_from(deleted).unwrap_or(0)))
    }

    /// The key of the first group a truncation up to `upto` keeps: the newest group that
    /// starts at or before `upto + 1` (it holds `upto + 1`, or it is the newest of all).
    /// `None` when the log is empty.
    async fn first_kept(&self, upto: u64) -> Result<Option<Vec<u8>>> {
        let keep_from = LogGroup::key(&self.prefix, upto.saturating_add(1));
        let options = GetOptions::new()
            .with_range(inclusive_end(keep_from.as_bytes()))
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_keys_only()
            .with_limit(1);
        let mut kv = self.client.kv_client();
        let resp = self
            .call("log truncate", kv.get(self.log_start(), Some(options)))
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.key().to_vec()))
    }

    /// etcd's current revision (to compact up to, after a truncation).
    pub async fn revision(&self) -> Result<Revision> {
        let mut kv = self.client.kv_client();
        let options = GetOptions::new().with_count_only();
        let resp = self
            .call("revision", kv.get(self.log_start(), Some(options)))
            .await?;
        revision_of(&resp, "revision")
    }

    /// Asks etcd to compact its history up to `revision` (not physically: etcd frees the space
    /// in the background). A revision already compacted is no error.
    pub async fn compact(&self, revision: Revision) -> Result<()> {
        let mut kv = self.client.kv_client();
        match tokio::time::timeout(self.timeout, kv.compact(revision, None)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if is_compacted(&e) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(Error::Timeout {
                op: "compact".into(),
                after: self.timeout,
            }),
        }
    }
}
