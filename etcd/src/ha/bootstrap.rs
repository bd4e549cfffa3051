//! A standby whose log position etcd no longer holds (a new master after the leader truncated
//! the log, or one that fell behind the truncation) bootstraps: it fetches the snapshot the
//! leader offers, over rpc in chunks, makes its state from it, and then tails the log after
//! it. Until a leader offers a snapshot it waits, saying so; a snapshot that does not restore
//! under this master's rules is an error that stops it.
//!
//! A master with a snapshot directory looks there first ([`from_disk`]): its newest snapshot
//! serves if the log continues right after it (every master lost at once after a truncation:
//! the last leader's disk still has the state). One beyond the end of etcd's log is set aside,
//! never applied.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::ha::bootstrap::{fetch, Fetched};
use yuebing_store::master::ha::{SnapshotDir, Tail};
use yuebing_store::master::{wall_ms, ClientId, Master, MasterClient, MasterConfig, Snapshot};

use crate::election::Election;
use crate::error::{Error, Result};
use crate::log::EtcdLog;

/// Bytes asked per chunk.
const CHUNK: u64 = 1 << 20;
/// Longest one fetch of a whole snapshot may take.
const FETCH_WITHIN: Duration = Duration::from_secs(300);
/// The pause between attempts.
const RETRY: Duration = Duration::from_secs(1);

/// Where a standby bootstraps from, and with what rules.
pub(super) struct Bootstrap<'a> {
    pub(super) election: &'a Election,
    /// This master's own advertised address: a leader there offers it nothing.
    pub(super) own_address: &'a str,
    /// The cluster token the masters' rpc asks for.
    pub(super) token: Option<Token>,
    pub(super) core: &'a MasterConfig,
    pub(super) handle: Handle,
}

impl Bootstrap<'_> {
    /// The state from the leader's snapshot, and the tail after it; waits (retrying) until a
    /// leader offers one.
    pub(super) async fn fetch_state(&self) -> Result<(Master, Tail)> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.attempt().await {
                Ok(Found::Snapshot(fetched)) => return self.restore(fetched).await,
                Ok(Found::NoLeader) => {
                    if attempts == 1 || attempts.is_multiple_of(10) {
                        tracing::warn!("the etcd log was truncated and no other master leads to offer a snapshot yet; waiting for one (this master campaigns only once it has the state)");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fetching the leader's snapshot failed; trying again")
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    async fn attempt(&self) -> Result<Found> {
        let leader = match self.election.leader().await? {
            Some(leader) if leader.address != self.own_address => leader,
            _ => return Ok(Found::NoLeader),
        };
        let endpoint: Endpoint = leader.address.parse().map_err(|e| Error::BadValue {
            key: self.election.name().to_string(),
            reason: format!("the leader's address {:?}: {e}", leader.address),
        })?;
        // The call is not made for a client: any id does.
        let client = MasterClient::with_token(
            endpoint,
            ClientId(0),
            self.token.clone(),
            self.handle.clone(),
        );
        tracing::info!(leader = %leader.address, epoch = leader.epoch, "bootstrapping from the leader's snapshot");
        let mut shown = 0u64;
        let snapshot = fetch(&client, CHUNK, FETCH_WITHIN, |got, total| {
            // Progress each tenth of the way.
            let tenth = got.saturating_mul(10) / total.max(1);
            if tenth > shown {
                shown = tenth;
                tracing::info!(got, total, "fetching the leader's snapshot");
            }
        })
        .await
        .map_err(Error::Log)?;
        Ok(Found::Snapshot(snapshot))
    }

    /// Decodes and restores the fetched snapshot off the runtime's workers.
    async fn restore(&self, fetched: Fetched) -> Result<(Master, Tail)> {
        let core = self.core.clone();
        blocking("restoring the leader's snapshot", move || {
            let snapshot = fetched.decode().map_err(Error::Log)?;
            restore(&core, snapshot, "the leader's snapshot")
        })
        .await
    }
}

/// `f` on a blocking thread; a panic there is an error naming `what`.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Client {
            reason: format!("{what} panicked: {e}"),
        })?
}

/// The state from `snapshot`, and the tail after it. Blocking.
fn restore(core: &MasterConfig, snapshot: Snapshot, from: &str) -> Result<(Master, Tail)> {
    let (seq, epoch, objects) = (snapshot.seq, snapshot.epoch, snapshot.object_count());
    let master =
        Master::restore(core.clone(), true, Some(snapshot), [], wall_ms()).map_err(Error::Log)?;
    tracing::info!(seq, objects, from, "bootstrapped from a snapshot");
    Ok((master, Tail::after(seq, epoch)))
}

/// `dir`'s newest snapshot, to start from if the log's start is gone (the caller reads the log
/// after it and falls back to the leader when that was truncated too). A snapshot beyond the
/// log's end is set aside and `None` returned.
pub(super) async fn from_disk(dir: &Arc<SnapshotDir>, log: &EtcdLog) -> Result<Option<Snapshot>> {
    let newest = {
        let dir = dir.clone();
        blocking("reading the snapshot directory", move || {
            dir.newest().map_err(Error::Log)
        })
        .await?
    };
    let Some(snapshot) = newest else {
        return Ok(None);
    };
    let end = log.last_seq().await?;
    if snapshot.seq > end {
        tracing::warn!(seq = snapshot.seq, end, dir = %dir.path().display(),
            "a local snapshot beyond the end of etcd's log is set aside, not applied");
        let (dir, seq) = (dir.clone(), snapshot.seq);
        blocking("setting a snapshot aside", move || {
            dir.discard(seq).map_err(Error::Log)
        })
        .await?;
        return Ok(None);
    }
    Ok(Some(snapshot))
}

/// The state from a local snapshot, off the runtime's workers.
pub(super) async fn restore_local(
    core: &MasterConfig,
    snapshot: Snapshot,
) -> Result<(Master, Tail)> {
    let core = core.clone();
    blocking("restoring the local snapshot", move || {
        restore(&core, snapshot, "the local snapshot")
    })
    .await
}

/// What one attempt found.
enum Found {
    Snapshot(Fetched),
    NoLeader,
}
