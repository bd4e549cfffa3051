//! What an elected master does before it serves: checks the address it publishes, opens its
//! snapshot directory, and rebuilds its state from the etcd log (or, when the log's start was
//! truncated, from a local snapshot or the leader's).

use std::sync::Arc;

use tokio::runtime::Handle;
use yuebing_rpc::Endpoint;
use yuebing_store::master::ha::{LogGroup, SnapshotDir, Tail};
use yuebing_store::master::{Master, MasterServerConfig};

use super::bootstrap::{self, Bootstrap};
use super::{passing, REBUILD_TRIES, REREAD_PAUSE};
use crate::error::{Error, Result};
use crate::log::{EtcdLog, Revision};

/// The master's snapshot directory (its `data_dir`), opened, locked and claimed for the
/// cluster `identity` (snapshots of another are set aside); without one, a warning that
/// snapshots live only in memory.
pub(super) async fn open_dir(
    cfg: &MasterServerConfig,
    identity: String,
    handle: &Handle,
) -> Result<Option<Arc<SnapshotDir>>> {
    let Some(path) = cfg.data_dir.clone() else {
        tracing::warn!(
            "no data directory: snapshots live only in the masters' memory, so losing every \
             master at once after the log was truncated loses the state before the snapshot"
        );
        return Ok(None);
    };
    let dir = handle
        .spawn_blocking(move || {
            let dir = SnapshotDir::open(&path)?;
            dir.claim(&identity)?;
            Ok(dir)
        })
        .await
        .map_err(|e| Error::Client {
            reason: format!("opening the snapshot directory panicked: {e}"),
        })?
        .map_err(Error::Log)?;
    Ok(Some(Arc::new(dir)))
}

/// Refuses an address other processes cannot reach this master at: a wildcard one
/// (`0.0.0.0`, `[::]`) advertised, or bound without `advertise`. Every master would then
/// publish the same address as leader and as standby.
pub(super) fn check_advertised(advertise: Option<&str>, bind: &Endpoint) -> Result<()> {
    let (what, address) = match (advertise, bind) {
        (Some(a), _) => ("advertised", a.to_string()),
        (None, Endpoint::Tcp(a)) => ("bound without an advertised address", a.clone()),
        (None, Endpoint::Unix(_)) => return Ok(()),
    };
    let host = address
        .strip_prefix("tcp://")
        .unwrap_or(&address)
        .rsplit_once(':')
        .map_or(address.as_str(), |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => Err(Error::config(format!(
            "an elected master {what} {address}, which no other process can reach: give \
             --advertise host:port"
        ))),
        _ => Ok(()),
    }
}

/// The state the etcd log holds, read from its start; when that start was truncated, from the
/// newest local snapshot the log continues after, else from the leader's snapshot. Returns the
/// master's core, the tail after it, and the revision the read saw (to watch from).
pub(super) async fn rebuild(
    log: &EtcdLog,
    cfg: &MasterServerConfig,
    dir: Option<&Arc<SnapshotDir>>,
    boot: &Bootstrap<'_>,
) -> Result<(Master, Tail, Revision)> {
    let mut core = Master::new(cfg.core.clone(), true);
    let mut tail = Tail::after(0, 0);
    // Used only if the log's start was truncated (reading it sets aside one beyond the log).
    let mut local = match dir {
        Some(dir) => bootstrap::from_disk(dir, log).await?,
        None => None,
    };
    let mut failures = 0u32;
    loop {
        let (groups, revision) = match log.read_from(tail.next()).await {
            Ok(read) => read,
            Err(Error::LogTruncated { seq, first }) => {
                tracing::info!(
                    seq,
                    first,
                    "the etcd log was truncated before this position"
                );
                (core, tail) = match local.take() {
                    Some(snapshot) => bootstrap::restore_local(&cfg.core, snapshot).await?,
                    None => boot.fetch_state().await?,
                };
                continue;
            }
            // etcd busy or compacting under a long read: read again, a while.
            Err(e) if passing(&e) && failures < REBUILD_TRIES => {
                failures += 1;
                tracing::warn!(error = %e, "reading the etcd log failed; reading it again");
                tokio::time::sleep(REREAD_PAUSE).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        apply_groups(log, &mut tail, groups, |entry| core.replay(entry))?;
        return Ok((core, tail, revision));
    }
}

/// Applies the groups that continue `tail`, entry by entry, through `replay`; groups it
/// already holds are skipped, a gap or damage is an error.
fn apply_groups(
    log: &EtcdLog,
    tail: &mut Tail,
    groups: Vec<LogGroup>,
    mut replay: impl FnMut(yuebing_store::master::LogEntry) -> yuebing_store::Result<()>,
) -> Result<()> {
    for group in groups {
        if group.last() <= tail.applied() {
            continue;
        }
        let key = log.group_key(group.first());
        for entry in tail.accept(&key, group).map_err(Error::Log)? {
            replay(entry).map_err(Error::Log)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_address_is_refused_unless_another_is_advertised() {
        let any: Endpoint = "0.0.0.0:5000".parse().unwrap();
        let any6: Endpoint = "[::]:5000".parse().unwrap();
        let local: Endpoint = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(check_advertised(None, &any).unwrap_err().code(), -5001);
        assert!(check_advertised(None, &any6).is_err());
        assert!(check_advertised(Some("tcp://0.0.0.0:5000"), &local).is_err());
        assert!(check_advertised(Some("10.0.0.7:5000"), &any).is_ok());
        assert!(check_advertised(None, &local).is_ok());
        assert!(check_advertised(Some("master-1.example:5000"), &any).is_ok());
    }
}
