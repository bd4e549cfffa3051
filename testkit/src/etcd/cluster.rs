//! [`EtcdCluster`] (several members) and [`EtcdServer`] (one): started, waited for, killed.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use tempfile::TempDir;

use super::etcd_binary;
use super::member::{Member, Peers};
use crate::error::{Error, Result};
use crate::ports;

/// Starts tried before giving up when ports turn out to be taken.
const START_ATTEMPTS: usize = 5;
/// How long a member may take to become healthy (measured here: 0.2–0.9 s for one member,
/// 1.2–2.4 s for three; generous for a loaded machine).
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);
/// How long a SIGTERM'd member may take to exit before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// etcd members on 127.0.0.1, each with its own ports and data directory in one temp
/// directory. Dropping it kills every member (SIGKILL), reaps them and removes the directory.
#[derive(Debug)]
pub struct EtcdCluster {
    // Declared before `dir`: the members are killed before their directory is removed.
    members: Vec<Member>,
    peers: Peers,
    dir: TempDir,
}

impl EtcdCluster {
    /// Starts `n` members (one token, each in `--initial-cluster`, fast elections:
    /// `--heartbeat-interval 50 --election-timeout 500`) and waits until every one answers a
    /// linearizable read. The clients that probe them run on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start(n: usize) -> Result<EtcdCluster> {
        Self::start_with(n, true).await
    }

    /// Starts `n` members with etcd's default or fast timing.
    async fn start_with(n: usize, fast: bool) -> Result<EtcdCluster> {
        if n == 0 {
            return Err(Error::process("a cluster needs at least one member"));
        }
        let binary = etcd_binary()?;
        let mut dir = tempfile::Builder::new()
            .prefix("yuebing-etcd-")
            .tempdir()
            .map_err(|e| Error::process(format!("no temp directory: {e}")))?;
        let mut last = None;
        for attempt in 0..START_ATTEMPTS {
            let ports = ports::pick(2 * n)?;
            let members: Vec<Member> = (0..n)
                .map(|i| {
                    let name = format!("m{i}");
                    let member_dir = dir.path().join(format!("{name}-{attempt}"));
                    Member::new(name, ports[2 * i], ports[2 * i + 1], member_dir)
                })
                .collect();
            let initial_cluster = members
                .iter()
                .map(Member::initial_cluster_entry)
                .collect::<Vec<_>>()
                .join(",");
            let peers = Peers {
                binary: binary.clone(),
                initial_cluster,
                token: format!("yb-{}-{}", std::process::id(), fastrand::u64(..)),
                fast,
            };
            let mut cluster = EtcdCluster {
                members,
                peers,
                dir,
            };
            match cluster.launch().await {
                Ok(()) => return Ok(cluster),
                Err(Launch::PortTaken(e)) => {
                    tracing::debug!(attempt, error = %e, "an etcd port was taken; retrying");
                    last = Some(e);
                    let EtcdCluster {
                        members, dir: d, ..
                    } = cluster;
                    drop(members);
                    dir = d;
                }
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::process("etcd did not start")))
    }

    /// Spawns every member and waits until each answers a linearizable read.
    async fn launch(&mut self) -> Result<(), Launch> {
        for m in &mut self.members {
            m.spawn(&self.peers).map_err(Launch::Failed)?;
        }
        let deadline = Instant::now() + HEALTHY_WITHIN;
        for i in 0..self.members.len() {
            self.wait_for(i, true, deadline).await?;
        }
        Ok(())
    }

    /// Waits until member `i` answers (a linearizable read if `quorum`, else a status
    /// request), failing if it exits or `deadline` passes.
    async fn wait_for(&mut self, i: usize, quorum: bool, deadline: Instant) -> Result<(), Launch> {
        let options = ConnectOptions::new().with_connect_timeout(Duration::from_millis(500));
        let endpoint = self.members[i].endpoint();
        let mut client = Client::connect([endpoint.as_str()], Some(options))
            .await
            .map_err(|e| Launch::Failed(Error::process(format!("a client of {endpoint}: {e}"))))?;
        loop {
            let member = &mut self.members[i];
            if let Some(status) = member.exited() {
                let e = Error::process(format!(
                    "etcd member {} exited ({status}); its log: {}",
                    member.name,
                    member.log_tail()
                ));
                return Err(if member.port_was_taken() {
                    Launch::PortTaken(e)
                } else {
                    Launch::Failed(e)
                });
            }
            let probe = async {
                if quorum {
                    client.get("yuebing-health-probe", None).await.map(|_| ())
                } else {
                    client.status().await.map(|_| ())
                }
            };
            if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(1), probe).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Launch::Failed(Error::process(format!(
                    "etcd member {} not healthy within {HEALTHY_WITHIN:?}; its log: {}",
                    member.name,
                    member.log_tail()
                ))));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many members it has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no members (never: [`EtcdCluster::start`] refuses zero).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member's client endpoint, `127.0.0.1:<port>`, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Member `i`'s client endpoint.
    ///
    /// # Panics
    /// If there is no member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    /// Member `i`'s process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].pid()
    }

    /// Whether member `i` runs.
    pub fn is_running(&mut self, i: usize) -> bool {
        self.members[i].is_running()
    }

    /// Member `i`'s log file.
    pub fn log_path(&self, i: usize) -> std::path::PathBuf {
        self.members[i].log_path()
    }

    /// Kills member `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Stops member `i` (SIGTERM; SIGKILL after 10 s) and reaps it.
    pub fn stop(&mut self, i: usize) {
        self.members[i].stop(STOP_GRACE);
    }

    /// Freezes member `i` (SIGSTOP; returns once it is stopped): its connections stay open and
    /// silent.
    pub fn pause(&mut self, i: usize) -> Result<()> {
        self.members[i].signal(libc::SIGSTOP)
    }

    /// Thaws member `i` (SIGCONT) after [`EtcdCluster::pause`].
    pub fn resume(&mut self, i: usize) -> Result<()> {
        self.members[i].signal(libc::SIGCONT)
    }

    /// Starts member `i` again on its ports and data (after [`kill`](Self::kill) or
    /// [`stop`](Self::stop)) and waits until it answers: a linearizable read where a majority of
    /// members runs, else a status request.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        if self.members[i].is_running() {
            return Err(Error::process(format!("etcd member {i} is running")));
        }
        self.members[i].spawn(&self.peers)?;
        let running = (0..self.members.len())
            .filter(|&j| self.members[j].is_running())
            .count();
        let quorum = 2 * running > self.members.len();
        let deadline = Instant::now() + HEALTHY_WITHIN;
        self.wait_for(i, quorum, deadline)
            .await
            .map_err(Launch::into_error)
    }

    /// Waits until every running member answers a linearizable read (the cluster has a leader
    /// and they follow it).
    pub async fn wait_healthy(&mut self) -> Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        for i in 0..self.members.len() {
            if self.members[i].is_running() {
                self.wait_for(i, true, deadline)
                    .await
                    .map_err(Launch::into_error)?;
            }
        }
        Ok(())
    }

    /// The temp directory holding every member's data and log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Why a start failed.
enum Launch {
    /// A member's port was taken: retry on others.
    PortTaken(Error),
    /// Anything else.
    Failed(Error),
}

impl Launch {
    fn into_error(self) -> Error {
        match self {
            Launch::PortTaken(e) | Launch::Failed(e) => e,
        }
    }
}

/// One etcd member with etcd's default timing (a lease asked for TTL 1 gets 2 s). Dropping it
/// kills the member and removes its directory.
#[derive(Debug)]
pub struct EtcdServer {
    cluster: EtcdCluster,
}

impl EtcdServer {
    /// Starts one member and waits until it answers a linearizable read (probed from the
    /// current runtime).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start() -> Result<EtcdServer> {
        Ok(EtcdServer {
            cluster: EtcdCluster::start_with(1, false).await?,
        })
    }

    /// Its client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.cluster.endpoint(0)
    }

    /// Its client endpoint, as a list.
    pub fn endpoints(&self) -> Vec<String> {
        self.cluster.endpoints()
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.cluster.pid(0)
    }

    /// Its log file.
    pub fn log_path(&self) -> std::path::PathBuf {
        self.cluster.log_path(0)
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        self.cluster.kill(0);
    }

    /// Stops it (SIGTERM; SIGKILL after 10 s) and reaps it.
    pub fn stop(&mut self) {
        self.cluster.stop(0);
    }

    /// Starts it again on its port and data and waits until it answers.
    pub async fn restart(&mut self) -> Result<()> {
        self.cluster.restart(0).await
    }

    /// Whether it runs.
    pub fn is_running(&mut self) -> bool {
        self.cluster.is_running(0)
    }
}
