//! An elected-master cluster on this machine, for `yuebing demo --ha` and `yuebing bench ha`
//! (feature `etcd`): one etcd member, started by the test kit's launcher (ephemeral ports on
//! 127.0.0.1, a temp data directory, killed on drop and when this process dies), and elected
//! `yuebing master --etcd` child processes on ephemeral ports of 127.0.0.1. It answers who
//! leads (each master's health call), SIGKILLs a master, restarts one on its port, waits until
//! the standbys have caught up, and times a failover from the kill to the first put a new
//! leader takes (and to the first call it answers).

use std::time::{Duration, Instant};

use futures::future::join_all;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{ClientId, Health, MasterClient};
use yuebing_store::{Client, Options};
use yuebing_testkit::etcd::{etcd_binary, EtcdServer};

use super::child::ChildProcess;

/// How long a health call may take before its master counts as unreachable.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the waits poll.
const POLL: Duration = Duration::from_millis(10);

/// The etcd binary, or an error that says how to install it.
fn find_etcd() -> Result<(), String> {
    etcd_binary().map(|_| ()).map_err(|_| {
        "no etcd binary (/usr/bin/etcd, `etcd` on the PATH, or $YUEBING_ETCD_BIN): install it \
         with `apt-get install etcd-server`"
            .to_string()
    })
}

/// One elected master: where it listens, a client for its health, its process while it runs.
struct Slot {
    endpoint: Endpoint,
    port: u16,
    health: MasterClient,
    process: Option<ChildProcess>,
}

/// The master that leads, and what it reported.
#[derive(Debug, Clone)]
pub struct Leader {
    /// Its index among [`LocalHa::endpoints`].
    pub index: usize,
    /// Its address.
    pub endpoint: Endpoint,
    /// Its health report (role `leader`, its epoch and positions).
    pub health: Health,
}

/// etcd and elected masters on 127.0.0.1. Dropping it kills the masters, then etcd.
pub struct LocalHa {
    // Declared first: the masters die before etcd does.
    masters: Vec<Slot>,
    etcd: EtcdServer,
    /// Every master's flags but its port.
    flags: Vec<String>,
    token: Option<Token>,
}

impl LocalHa {
    /// Starts etcd and `n` masters of `cluster`, elected with `ttl`, each also given `extra`
    /// flags; every connection presents `token`. Returns once every master accepts calls (as a
    /// standby until one wins: see [`LocalHa::leader`]).
    pub async fn start(
        n: usize,
        cluster: &str,
        ttl: Duration,
        extra: &[&str],
        token: Option<Token>,
    ) -> Result<LocalHa, String> {
        find_etcd()?;
        let etcd = EtcdServer::start()
            .await
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        let mut flags: Vec<String> = [
            "--etcd",
            &etcd.endpoint(),
            "--cluster",
            cluster,
            "--election-ttl-ms",
            &ttl.as_millis().to_string(),
        ]
        .map(String::from)
        .into();
        flags.extend(extra.iter().map(|s| s.to_string()));
        let mut ha = LocalHa {
            masters: Vec::with_capacity(n),
            etcd,
            flags,
            token,
        };
        for _ in 0..n {
            let slot = ha.spawn(0).await?;
            ha.masters.push(slot);
        }
        Ok(ha)
    }

    /// Starts one master on `port` (0: any); its process and address.
    async fn spawn(&self, port: u16) -> Result<Slot, String> {
        let mut args: Vec<String> = ["master", "--bind", "127.0.0.1", "--metrics-port", "off"]
            .map(String::from)
            .into();
        args.extend(["--port".to_string(), port.to_string()]);
        args.extend(self.flags.iter().cloned());
        let child =
            ChildProcess::start(args, "yuebing master ready on ", self.token.as_ref()).await?;
        let bad = || format!("a master announced {:?}, not an address", child.announced);
        let endpoint: Endpoint = child.announced.parse().map_err(|_| bad())?;
        let port = (child.announced.rsplit_once(':'))
            .and_then(|(_, port)| port.parse().ok())
            .ok_or_else(bad)?;
        Ok(Slot {
            health: self.health_client(&endpoint),
            endpoint,
            port,
            process: Some(child),
        })
    }

    fn health_client(&self, endpoint: &Endpoint) -> MasterClient {
        let handle = tokio::runtime::Handle::current();
        MasterClient::with_token(endpoint.clone(), ClientId(0), self.token.clone(), handle)
    }

    /// etcd's client address.
    pub fn etcd_endpoint(&self) -> String {
        self.etcd.endpoint()
    }

    /// Every master's address, in a fixed order (a master restarted keeps its place).
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.masters.iter().map(|m| m.endpoint.clone()).collect()
    }

    /// Each master's health, `None` where it did not answer within a second.
    pub async fn healths(&self) -> Vec<Option<Health>> {
        join_all(self.masters.iter().map(|m| async {
            match tokio::time::timeout(HEALTH_TIMEOUT, m.health.health()).await {
                Ok(Ok(h)) => Some(h),
                _ => None,
            }
        }))
        .await
    }

    /// Master `i`'s health, `None` if it did not answer within a second.
    pub async fn health(&self, i: usize) -> Option<Health> {
        let m = self.masters.get(i)?;
        tokio::time::timeout(HEALTH_TIMEOUT, m.health.health())
            .await
            .ok()?
            .ok()
    }

    /// Waits until exactly one master reports that it leads (serves), at most `within`.
    pub async fn leader(&self, within: Duration) -> Result<Leader, String> {
        let until = Instant::now() + within;
        loop {
            let healths = self.healths().await;
            let mut leaders = healths
                .iter()
                .enumerate()
                .filter_map(|(i, h)| Some((i, h.as_ref()?)))
                .filter(|(_, h)| h.role == "leader");
            if let (Some((index, health)), None) = (leaders.next(), leaders.next()) {
                return Ok(Leader {
                    index,
                    endpoint: self.masters[index].endpoint.clone(),
                    health: health.clone(),
                });
            }
            if Instant::now() >= until {
                return Err(format!(
                    "no single leader among the masters within {within:?}: {}",
                    self.describe().await
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every running master has applied what the leader made durable (as the
    /// leader reported it just before), at most `within`.
    pub async fn caught_up(&self, within: Duration) -> Result<(), String> {
        let until = Instant::now() + within;
        loop {
            let leader = self
                .leader(until.saturating_duration_since(Instant::now()))
                .await?;
            let healths = self.healths().await;
            let behind = self
                .masters
                .iter()
                .zip(&healths)
                .filter(|(m, _)| m.process.is_some())
                .any(|(_, h)| {
                    h.as_ref()
                        .is_none_or(|h| h.last_seq < leader.health.durable_seq)
                });
            if !behind {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "the standbys did not catch up with the leader within {within:?}: {}",
                    self.describe().await
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILLs master `i` (and reaps it).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.masters.get_mut(i).and_then(|m| m.process.take()) {
            p.kill();
        }
    }

    /// Starts master `i` again, on its port (it rejoins as a standby).
    pub async fn restart(&mut self, i: usize) -> Result<(), String> {
        let port = self
            .masters
            .get(i)
            .ok_or_else(|| format!("no master {i}"))?
            .port;
        self.masters[i] = self.spawn(port).await?;
        Ok(())
    }

    /// One line per master, as `yuebing store stats` prints them: address, role, epoch,
    /// applied and durable positions.
    pub async fn describe(&self) -> String {
        let healths = self.healths().await;
        let lines: Vec<String> = self
            .masters
            .iter()
            .zip(healths)
            .map(|(m, h)| match h {
                Some(h) => format!(
                    "master {}: {}, epoch {}, applied {}, durable {}",
                    m.endpoint, h.role, h.epoch, h.last_seq, h.durable_seq
                ),
                None => format!("master {}: not answering", m.endpoint),
            })
            .collect();
        lines.join("\n")
    }
}

/// How long after a leader was killed the cluster served again.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// Until a master answered a call (`exist`): a new leader serves.
    pub serving: Duration,
    /// Until a put succeeded: a new leader serves and a node has remounted its space there
    /// (a promoted master counts a node's space only once the node, at its next heartbeat,
    /// has mounted it again).
    pub put: Duration,
}

/// Polls `client` with `exist` calls and puts of a small object under fresh keys `TAG/N`
/// until each has succeeded once, at most `within` after `since` (the kill).
pub async fn failover(
    client: &Client,
    since: Instant,
    within: Duration,
    tag: &str,
) -> Result<Failover, String> {
    let opts = Options::deadline(Duration::from_secs(2));
    let serving = until_ok(since, within, "no master answered", |_| async {
        client
            .exist(tag, &opts)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let put = until_ok(since, within, "no put succeeded", |attempt| {
        let key = format!("{tag}/{attempt}");
        let opts = &opts;
        async move {
            let put = client.put(&key, b"failover", opts).await;
            put.map_err(|e| e.to_string())
        }
    });
    let (serving, put) = tokio::join!(serving, put);
    Ok(Failover {
        serving: serving?,
        put: put?,
    })
}

/// Waits until `want` clients (nodes and pure clients alike) are mounted at the leader again,
/// as the stats `client` reads count them (a promoted master counts a client only once it has
/// remounted, at its next heartbeat), at most `within` after `since` (the kill); how long
/// after `since`.
pub async fn remounted(
    client: &Client,
    want: u64,
    since: Instant,
    within: Duration,
) -> Result<Duration, String> {
    let opts = Options::deadline(Duration::from_secs(2));
    until_ok(since, within, "the clients did not remount", |_| async {
        match client.stats(&opts).await {
            Ok(s) if s.clients >= want => Ok(()),
            Ok(s) => Err(format!("{} of {want} clients remounted", s.clients)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// Runs `call(attempt)` every 10 ms until it succeeds (how long after `since`), at most
/// `within` after `since`.
async fn until_ok<F, Fut>(
    since: Instant,
    within: Duration,
    what: &str,
    call: F,
) -> Result<Duration, String>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut last = String::new();
    for attempt in 0u64.. {
        match call(attempt).await {
            Ok(()) => return Ok(since.elapsed()),
            Err(e) => last = e,
        }
        if since.elapsed() >= within {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    Err(format!("{what} within {within:?} of the kill: {last}"))
}
