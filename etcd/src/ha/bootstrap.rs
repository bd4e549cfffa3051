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
use yuebing_store::master::ha::bootstrap::fetch;
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
                Ok(Fetched::Snapshot(snapshot)) => return self.restore(snapshot),
                Ok(Fetched::NoLeader) => {
                    if attempts == 1 || attempts.is_multiple_of(10) {
                        tracing::warn!("the etcd log was truncated and no leader offers a snapshot yet; waiting for one");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fetching the leader's snapshot failed; trying again")
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    async fn attempt(&self) -> Result<Fetched> {
        let leader = match self.election.leader().await? {
            Some(leader) if leader.address != self.own_address => leader,
            _ => return Ok(Fetched::NoLeader),
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
        Ok(Fetched::Snapshot(snapshot))
    }

    fn restore(&self, snapshot: Snapshot) -> Result<(Master, Tail)> {
        restore(self.core, snapshot, "the leader's snapshot")
    }
}

/// The state from `snapshot`, and the tail after it.
fn restore(core: &MasterConfig, snapshot: Snapshot, from: &str) -> Result<(Master, Tail)> {
    let (seq, epoch, objects) = (snapshot.seq, snapshot.epoch, snapshot.object_count());
    let master =
        Master::restore(core.clone(), true, Some(snapshot), [], wall_ms()).map_err(Error::Log)?;
    tracing::info!(seq, objects, from, "bootstrapped from a snapshot");
    Ok((master, Tail::after(seq, epoch)))
}

/// The state from `dir`'s newest snapshot, if the log continues right after it (`None`: no
/// snapshot, or the log was truncated past it too). A snapshot beyond the log's end is set
/// aside and `None` returned.
pub(super) async fn from_disk(
    dir: &Arc<SnapshotDir>,
    log: &EtcdLog,
    core: &MasterConfig,
) -> Result<Option<(Master, Tail)>> {
    let newest = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || dir.newest())
            .await
            .map_err(|e| Error::Client {
                reason: format!("reading the snapshot directory panicked: {e}"),
            })?
            .map_err(Error::Log)?
    };
    let Some(snapshot) = newest else {
        return Ok(None);
    };
    let end = log.last_seq().await?;
    if snapshot.seq > end {
        tracing::warn!(seq = snapshot.seq, end, dir = %dir.path().display(),
            "a local snapshot beyond the end of etcd's log is set aside, not applied");
        let (dir, seq) = (dir.clone(), snapshot.seq);
        tokio::task::spawn_blocking(move || dir.discard(seq))
            .await
            .map_err(|e| Error::Client {
                reason: format!("setting a snapshot aside panicked: {e}"),
            })?
            .map_err(Error::Log)?;
        return Ok(None);
    }
    match log.read_from(snapshot.seq.saturating_add(1)).await {
        Ok(_) => restore(core, snapshot, "the local snapshot").map(Some),
        Err(Error::LogTruncated { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What one attempt found.
enum Fetched {
    Snapshot(Snapshot),
    NoLeader,
}
