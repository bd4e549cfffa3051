//! The leader's snapshots, which bound the etcd log (issue 16, item 5).
//!
//! At promotion, and then each time `snapshot_every` more entries are durable, the leader takes
//! a snapshot of its state (under the core's lock), encodes it off the runtime's workers, waits
//! until its log has made every entry in it durable, and offers it to standbys that bootstrap
//! (`RunningMaster::offer_snapshot`). Only a periodic snapshot then truncates the log: up to
//! min(its sequence number, the lowest position the registered standbys published), so that
//! no live standby loses entries it still has to apply, and compacts etcd's history up to the
//! current revision (deleted keys do not free etcd's space until it compacts).
//!
//! With a snapshot directory, each periodic snapshot is written there before the log is
//! truncated, and a snapshot that could not be written truncates nothing.
//!
//! A failed truncation or compaction (etcd busy or briefly unreachable) is logged and made
//! again at the next snapshot; only the log sink failing ends the loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use yuebing_store::master::ha::{Offered, SnapshotDir};
use yuebing_store::master::RunningMaster;

use super::sink::EtcdSink;
use crate::error::{Error, Result};
use crate::log::EtcdLog;
use yuebing_store::master::LogSink;

/// How often the leader looks whether a snapshot is due.
const CHECK: Duration = Duration::from_millis(500);

/// What the snapshot loop works with.
pub(super) struct Snapshots {
    pub(super) master: Arc<RunningMaster>,
    pub(super) sink: Arc<EtcdSink>,
    pub(super) log: Arc<EtcdLog>,
    /// Durable entries between snapshots (at least 1).
    pub(super) every: u64,
    /// Where offered snapshots are kept, if anywhere.
    pub(super) dir: Option<Arc<SnapshotDir>>,
    pub(super) handle: Handle,
}

impl Snapshots {
    /// Offers a snapshot at once, then one each `every` durable entries, truncating the log
    /// after each of those; returns only once the sink failed, with why.
    pub(super) async fn run(self) -> Error {
        let mut last = match self.offer().await {
            Ok(offered) => offered.seq,
            Err(e) => return e,
        };
        loop {
            tokio::time::sleep(CHECK).await;
            if self.sink.durable_seq() < last.saturating_add(self.every.max(1)) {
                continue;
            }
            let offered = match self.offer().await {
                Ok(offered) => offered,
                Err(e) => return e,
            };
            last = offered.seq;
            if let Err(e) = self.keep(offered).await {
                tracing::error!(error = %e, seq = last, "writing the snapshot failed; the log is not truncated");
                continue;
            }
            if let Err(e) = self.truncate(last).await {
                tracing::warn!(error = %e, seq = last, "truncating the etcd log failed; trying again at the next snapshot");
            }
        }
    }

    /// Takes, encodes and (once durable) offers a snapshot, and returns it. An error is the
    /// sink's failure (or a bug), which ends the leadership anyway.
    async fn offer(&self) -> Result<Offered> {
        let snapshot = self.master.snapshot().map_err(Error::Log)?;
        let (seq, objects) = (snapshot.seq, snapshot.object_count());
        let offered = self
            .handle
            .spawn_blocking(move || Offered::encode(&snapshot))
            .await
            .map_err(|e| Error::Client {
                reason: format!("encoding the snapshot panicked: {e}"),
            })?
            .map_err(Error::Log)?;
        let bytes = offered.bytes.len();
        self.sink.durable_reached(seq).await?;
        self.master.offer_snapshot(offered.clone());
        tracing::info!(seq, objects, bytes, "snapshot offered to standbys");
        Ok(offered)
    }

    /// Writes `offered` to the snapshot directory, if there is one.
    async fn keep(&self, offered: Offered) -> Result<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        self.handle
            .spawn_blocking(move || dir.keep(&offered))
            .await
            .map_err(|e| Error::Client {
                reason: format!("writing the snapshot panicked: {e}"),
            })?
            .map_err(Error::Log)
    }

    /// Truncates the log up to min(`seq`, the lowest position a standby published) and
    /// compacts etcd's history.
    async fn truncate(&self, seq: u64) -> Result<()> {
        let upto = match self.log.lowest_applied().await? {
            Some(lowest) => lowest.min(seq),
            None => seq,
        };
        let deleted = self.log.truncate(upto).await?;
        if deleted > 0 {
            let revision = self.log.revision().await?;
            self.log.compact(revision).await?;
            tracing::info!(upto, deleted, revision, "etcd log truncated and compacted");
        }
        Ok(())
    }
}
