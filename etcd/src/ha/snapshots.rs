//! The leader's snapshots, which bound the etcd log (issue 16, item 5).
//!
//! At promotion, and then each time `snapshot_every` more entries are durable, the leader takes
//! a snapshot of its state (under the core's lock), encodes it off the runtime's workers, waits
//! until its log has made every entry in it durable, and offers it to standbys that bootstrap
//! (`RunningMaster::offer_snapshot`; the previous offer stays servable too, so that a slow
//! fetch is not overtaken). With a snapshot directory, a periodic snapshot is then written
//! there; one that could not be written truncates nothing. The leader then truncates the log up
//! to min(its sequence number, the lowest position the registered standbys published; a
//! standby whose position stood still behind the snapshots for `standby_stall` no longer counts,
//! and while one is left out the leader truncates no further than its previous snapshot, see
//! [`super::stalls`]), in a transaction that commits only while it leads and no standby
//! registered since it read those positions, and compacts etcd's history up to the revision of
//! the *previous* truncation (one interval behind, so watches and paged reads in flight are not
//! cut short).
//!
//! Failures other than the sink's (etcd busy, a snapshot too large to encode, a full disk) are
//! logged and the work is tried again at the next interval; only the log sink failing ends the
//! loop, and with it the leadership.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use yuebing_store::master::ha::{Offered, SnapshotDir};
use yuebing_store::master::{LogSink, RunningMaster};

use super::sink::EtcdSink;
use super::stalls::Stalls;
use crate::error::{Error, Result};
use crate::log::{Epoch, EtcdLog, Revision};

/// How often the leader looks whether a snapshot is due.
const CHECK: Duration = Duration::from_millis(500);

/// What the snapshot loop works with.
pub(super) struct Snapshots {
    pub(super) master: Arc<RunningMaster>,
    pub(super) sink: Arc<EtcdSink>,
    pub(super) log: Arc<EtcdLog>,
    /// The leader's epoch (truncation is guarded by it).
    pub(super) epoch: Epoch,
    /// Durable entries between snapshots (at least 1).
    pub(super) every: u64,
    /// How long a standby's position may stand still behind a snapshot and still hold the log
    /// back (zero: forever).
    pub(super) stall: Duration,
    /// Where offered snapshots are kept, if anywhere.
    pub(super) dir: Option<Arc<SnapshotDir>>,
    pub(super) handle: Handle,
}

/// What the loop remembers from one truncation round to the next.
struct Between {
    /// The revision of the previous truncation: etcd's history is compacted up to it.
    compact_next: Option<Revision>,
    /// The standbys' positions, and since when each stood still.
    stalls: Stalls,
    /// The sequence number of the newest snapshot offered so far (0: none yet).
    offered: u64,
}

/// Why one round of snapshot work stopped.
enum Stop {
    /// The log sink failed: the leadership ends.
    Sink(Error),
    /// Something else failed: log it, try again later.
    Passing(Error),
}

impl Snapshots {
    /// Offers a snapshot at once, then one each `every` durable entries, truncating the log
    /// after each of those; returns only once the sink failed, with why.
    pub(super) async fn run(self) -> Error {
        let mut between = Between {
            compact_next: None,
            stalls: Stalls::new(self.stall),
            offered: 0,
        };
        // The offer at promotion: a standby that must bootstrap finds one at once.
        let mut last = match self.offer(&mut between).await {
            Ok(offered) => offered.seq,
            Err(Stop::Sink(e)) => return e,
            Err(Stop::Passing(e)) => {
                tracing::error!(error = %e, "the snapshot at promotion failed; trying again later");
                0
            }
        };
        loop {
            tokio::time::sleep(CHECK).await;
            if self.sink.durable_seq() < last.saturating_add(self.every.max(1)) {
                continue;
            }
            match self.round(&mut between).await {
                Ok(seq) => last = seq,
                Err(Stop::Sink(e)) => return e,
                Err(Stop::Passing(e)) => {
                    tracing::error!(error = %e, "snapshot, keep or truncation failed; trying again at the next interval");
                    // Not again at once: wait out another interval.
                    last = self.sink.durable_seq();
                }
            }
        }
    }

    /// One periodic snapshot: offer, keep, truncate, compact. Returns its sequence number.
    async fn round(&self, between: &mut Between) -> Result<u64, Stop> {
        let previous = between.offered;
        let offered = self.offer(between).await?;
        let seq = offered.seq;
        self.keep(offered).await.map_err(Stop::Passing)?;
        self.truncate(seq, previous, between)
            .await
            .map_err(Stop::Passing)?;
        Ok(seq)
    }

    /// Takes, encodes and (once durable) offers a snapshot, and returns it (and remembers its
    /// sequence number in `between`).
    async fn offer(&self, between: &mut Between) -> Result<Offered, Stop> {
        let snapshot = self
            .master
            .snapshot()
            .map_err(|e| Stop::Passing(Error::Log(e)))?;
        let (seq, objects) = (snapshot.seq, snapshot.object_count());
        let offered = self
            .handle
            .spawn_blocking(move || Offered::encode(&snapshot))
            .await
            .map_err(|e| {
                Stop::Passing(Error::Client {
                    reason: format!("encoding the snapshot panicked: {e}"),
                })
            })?
            .map_err(|e| Stop::Passing(Error::Log(e)))?;
        let bytes = offered.bytes.len();
        self.sink.durable_reached(seq).await.map_err(Stop::Sink)?;
        self.master.offer_snapshot(offered.clone());
        between.offered = seq;
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

    /// Truncates the log up to min(`seq`, the lowest position a standby that still counts
    /// published), and no further than `previous` (the snapshot offered before `seq`'s) while
    /// a standby is left out; then compacts etcd's history up to the previous truncation's
    /// revision and remembers the revision now for the next time.
    async fn truncate(&self, seq: u64, previous: u64, between: &mut Between) -> Result<()> {
        let (positions, read_at) = self.log.applied_positions_at().await?;
        let upto = between
            .stalls
            .round(&positions, seq, Instant::now())
            .upto(seq, previous);
        match self
            .log
            .truncate_as_leader(upto, &self.epoch, read_at)
            .await?
        {
            Some(deleted) => tracing::info!(upto, deleted, "etcd log truncated"),
            None => {
                tracing::info!(
                    upto,
                    "a standby registered or the leadership moved; not truncated"
                );
                return Ok(());
            }
        }
        if let Some(revision) = between.compact_next {
            self.log.compact(revision).await?;
            tracing::info!(revision, "etcd history compacted");
        }
        between.compact_next = Some(self.log.revision().await?);
        Ok(())
    }
}
