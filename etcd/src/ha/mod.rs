//! An elected store master (issue 16): [`HaMaster`] runs a `RunningMaster` whose state comes
//! from the operation log in etcd and whose durable records go there, serving only while it
//! leads the election.
//!
//! # Life of a master
//! 1. **Start**: it reads the whole log from etcd into a fresh state (the etcd log is
//!    authoritative; a local snapshot is used only when the log's start is gone), and starts
//!    its rpc server with its gate closed: every call gets `NotLeader`, naming the leader it
//!    sees.
//! 2. **Standby**: it tails the log (a watch from the revision it read at; a broken or
//!    compacted watch falls back to reading by key range) and applies each group in order
//!    through a [`Tail`], failing closed on a gap or damage, while it campaigns.
//! 3. **Leader**: once it wins, it reads what is left of the log, checks it applied all of it
//!    ([`EtcdLog::resume`]), takes the new epoch (the election key's create revision) with
//!    `RunningMaster::promote` — client TTLs restart, no freed space is reused for a read-lease
//!    TTL — starts appending under the epoch's guard, waits out its margin, and opens its gate.
//! 4. **Deposed**: when its leadership is lost (lease gone or past its deadline) or an append
//!    fails, the gate closes for good and [`HaMaster::stopped`] resolves with the reason. Its
//!    state may hold entries the log lacks, so it does not become a standby again: restart it
//!    (`yuebing master --etcd` exits, for its supervisor to restart).
//!
//! # Snapshots and truncation
//! The leader offers a snapshot at promotion and after each `snapshot_every` durable entries,
//! and after each periodic one truncates the log up to min(the snapshot, the lowest position
//! the standbys published) and compacts etcd's history (`snapshots`). Standbys publish their
//! applied position on a lease of their own (`applied`). A master whose position the log no
//! longer holds (started after a truncation, or fell behind one) fetches the leader's snapshot
//! over rpc in chunks and tails the log after it (`bootstrap`).
//!
//! A master with a data directory ([`MasterServerConfig::data_dir`]) also writes each periodic
//! snapshot there before truncating, and restarts from it when the log's start is gone and no
//! leader offers one: without it, a cluster that loses every master at once after a
//! truncation loses the state before the snapshot (the objects' bytes stay on the nodes).
//!
//! [`Tail`]: yuebing_store::master::ha::Tail

mod applied;
mod bootstrap;
mod follow;
mod gate;
mod rules;
mod sink;
mod snapshots;
mod stalls;
mod start;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::FutureExt;
use futures::StreamExt;
use tokio::runtime::Handle;
use tokio::sync::watch;
use yuebing_rpc::Endpoint;
use yuebing_store::master::ha::{LogGroup, SnapshotDir, Tail};
use yuebing_store::master::{MasterServerConfig, RunningMaster};

use self::applied::Publisher;
use self::bootstrap::Bootstrap;
use self::snapshots::Snapshots;
use self::start::{check_advertised, open_dir, rebuild};

pub use self::follow::LeaderWatch;
pub use self::gate::HaGate;
pub use self::sink::{Accepted, EtcdSink};
use crate::config::EtcdConfig;
use crate::election::{Election, Leadership};
use crate::error::{Error, Result};
use crate::log::{Epoch, EtcdLog, Revision};

/// The pause before the log is read again after its watch broke.
const REREAD_PAUSE: Duration = Duration::from_millis(200);
/// How often a start or a promotion reads the log again after a passing error (etcd busy, a
/// read overtaken by compaction) before it gives up.
const REBUILD_TRIES: u32 = 25;

/// Settings of an elected master.
#[derive(Debug, Clone)]
pub struct HaConfig {
    /// Where etcd is and the cluster's name.
    pub etcd: EtcdConfig,
    /// TTL of the election lease: a dead leader is replaced about this long after it died
    /// (plus the margin and the catch-up). Default 5 s.
    pub ttl: Duration,
    /// The master's own settings (`data_dir`, if set, keeps only its snapshots: the etcd log
    /// is authoritative).
    pub master: MasterServerConfig,
    /// The rpc address other processes reach this master at, published when it leads.
    /// Default: the address it bound.
    pub advertise: Option<String>,
    /// How long a standby's published position may stand still behind the leader's snapshots
    /// before the leader truncates the log past it anyway (a standby alive but wedged would
    /// otherwise hold the log, and etcd's space, forever); should it resume, it bootstraps
    /// from a snapshot. While one is left out, the leader truncates no further than its
    /// previous snapshot, so that such a bootstrap can tail the log after it. Zero: never.
    /// Otherwise at least [`STALL_TTLS`] election TTLs (a standby publishes three times per
    /// TTL). Default 5 min.
    pub standby_stall: Duration,
}

/// The shortest non-zero [`HaConfig::standby_stall`], in election TTLs.
pub const STALL_TTLS: u32 = 3;

impl HaConfig {
    /// Settings with the defaults for `etcd`.
    pub fn new(etcd: EtcdConfig) -> HaConfig {
        HaConfig {
            etcd,
            ttl: Duration::from_secs(5),
            master: MasterServerConfig::default(),
            advertise: None,
            standby_stall: Duration::from_secs(300),
        }
    }
}

/// What an elected master is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Applying the log and campaigning.
    Standby,
    /// Won the election, catching up and waiting out its margin.
    Promoting,
    /// Leading and serving.
    Leader,
    /// Stopped serving for good (deposed, the log failed, or shut down): why.
    Stopped(String),
}

/// An elected master's position, as [`HaMaster::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// What it is doing.
    pub role: Role,
    /// The epoch it leads in (0 while it has not led).
    pub epoch: i64,
    /// The last log entry its state holds (a standby: applied; a leader: made durable).
    pub applied: u64,
}

/// An elected master (see the module docs). Dropping it stops its driver and its server.
pub struct HaMaster {
    master: Option<Arc<RunningMaster>>,
    sink: Arc<EtcdSink>,
    gate: Arc<HaGate>,
    status: watch::Receiver<Status>,
    driver: tokio::task::JoinHandle<()>,
}

/// What the driver works with.
struct Ctx {
    master: Arc<RunningMaster>,
    gate: Arc<HaGate>,
    sink: Arc<EtcdSink>,
    log: Arc<EtcdLog>,
    election: Election,
    advertise: String,
    status: watch::Sender<Status>,
    /// The master's settings (rules for a bootstrap, snapshot interval, rpc token).
    cfg: MasterServerConfig,
    /// Where the leader keeps the snapshots it offers, if anywhere.
    dir: Option<Arc<SnapshotDir>>,
    /// How long a standby's position may stand still before it stops holding the log back.
    standby_stall: Duration,
    /// Publishes the standby's applied position (for the leader's truncation).
    client: etcd_client::Client,
    request_timeout: Duration,
    handle: Handle,
}

impl HaMaster {
    /// Reads the log from etcd, starts serving on `endpoint` as a standby, and campaigns; all
    /// on `handle`'s runtime.
    pub async fn start(cfg: HaConfig, endpoint: &Endpoint, handle: Handle) -> Result<HaMaster> {
        cfg.master.core.validate().map_err(Error::config)?;
        let floor = cfg.ttl.saturating_mul(STALL_TTLS);
        if !cfg.standby_stall.is_zero() && cfg.standby_stall < floor {
            return Err(Error::config(format!(
                "standby_stall {:?} is shorter than {STALL_TTLS} election TTLs ({floor:?}): a \
                 healthy standby, which publishes its position three times per TTL, could be \
                 truncated past (0 turns the rule off)",
                cfg.standby_stall
            )));
        }
        check_advertised(cfg.advertise.as_deref(), endpoint)?;
        let client = cfg.etcd.connect_on(&handle).await?;
        let keys = cfg.etcd.keys()?;
        rules::agree(&client, &keys, &cfg.master.core, cfg.etcd.request_timeout).await?;
        let identity = rules::identity(&client, &keys, cfg.etcd.request_timeout).await?;
        let dir = open_dir(&cfg.master, identity, &handle).await?;
        let log = Arc::new(EtcdLog::with_client(client.clone(), &cfg.etcd)?);
        let election = Election::with_client(
            client.clone(),
            &keys,
            cfg.ttl,
            cfg.etcd.request_timeout,
            handle.clone(),
        )?;
        let boot = Bootstrap {
            election: &election,
            // Not bound yet, and not a candidate: no leader can be this master.
            own_address: cfg.advertise.as_deref().unwrap_or_default(),
            token: cfg.master.rpc.token.clone(),
            core: &cfg.master.core,
            handle: handle.clone(),
        };
        let (core, tail, revision) = rebuild(&log, &cfg.master, dir.as_ref(), &boot).await?;
        let sink = EtcdSink::new(tail.applied());
        let gate = Arc::new(HaGate::new());
        let started = {
            let (cfg, endpoint) = (cfg.master.clone(), endpoint.clone());
            let (sink, gate) = (sink.clone(), gate.clone());
            handle.spawn(async move {
                RunningMaster::start_replicated(cfg, &endpoint, core, sink, gate).await
            })
        };
        let master = started
            .await
            .map_err(|e| Error::Client {
                reason: format!("the master's start task ended: {e}"),
            })?
            .map_err(Error::Log)?;
        let advertise = cfg
            .advertise
            .clone()
            .unwrap_or_else(|| master.local_endpoint().to_string());
        let master = Arc::new(master);
        let (status_tx, status) = watch::channel(Status {
            role: Role::Standby,
            epoch: 0,
            applied: tail.applied(),
        });
        let sink_kept = sink.clone();
        let ctx = Ctx {
            master: master.clone(),
            gate: gate.clone(),
            sink,
            log,
            election,
            advertise,
            status: status_tx,
            cfg: cfg.master.clone(),
            dir,
            standby_stall: cfg.standby_stall,
            client,
            request_timeout: cfg.etcd.request_timeout,
            handle: handle.clone(),
        };
        let driver = handle.spawn(async move {
            let why = ctx.run(tail, revision).await;
            tracing::error!(error = %why, "this master stopped serving");
            ctx.gate.close();
            ctx.sink.fail(why.clone());
            ctx.status
                .send_modify(|s| s.role = Role::Stopped(why.to_string()));
        });
        Ok(HaMaster {
            master: Some(master),
            sink: sink_kept,
            gate,
            status,
            driver,
        })
    }

    /// The address the rpc server is bound to.
    pub fn local_endpoint(&self) -> Option<&Endpoint> {
        self.master.as_deref().map(RunningMaster::local_endpoint)
    }

    /// Where this master stands now. A leader's `applied` is what its log made durable.
    pub fn status(&self) -> Status {
        let mut status = self.status.borrow().clone();
        if let (Role::Leader, Some(m)) = (&status.role, &self.master) {
            status.applied = status.applied.max(m.health().durable_seq);
        }
        status
    }

    /// Serves the admin HTTP paths (Mooncake's `/metrics`, `/role`, `/ready`, …; see
    /// [`RunningMaster::serve_admin`]) on `bind` (`host:port`; port 0 picks one) until the
    /// returned server is dropped. `/role`, `/ha_status` and `/ready` follow this master's
    /// election: a standby answers `standby` and 503, a leader `leader` once it serves.
    pub async fn serve_admin(
        &self,
        bind: &str,
    ) -> yuebing_store::Result<yuebing_store::master::admin::AdminServer> {
        match &self.master {
            Some(master) => master.serve_admin(bind).await,
            None => Err(yuebing_store::Error::Internal {
                reason: "the master was shut down".into(),
            }),
        }
    }

    /// What this master made durable while it led (`None` if it never led).
    pub fn accepted(&self) -> Option<Accepted> {
        self.sink.accepted()
    }

    /// A receiver of the status as it changes.
    pub fn watch_status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Whether this master leads and serves now.
    pub fn serving(&self) -> bool {
        self.gate.serving()
    }

    /// Resolves once this master stopped serving for good, with the reason.
    pub async fn stopped(&self) -> String {
        let mut rx = self.status.clone();
        let state = rx
            .wait_for(|s| matches!(s.role, Role::Stopped(_)))
            .await
            .map(|s| s.role.clone());
        match state {
            Ok(Role::Stopped(why)) => why,
            _ => "the master's driver is gone".into(),
        }
    }

    /// Stops: resigns if it leads (the next candidate wins at once), stops the server after
    /// letting calls in flight finish within `grace`.
    pub async fn shutdown(mut self, grace: Duration) {
        self.driver.abort();
        let _ = (&mut self.driver).await;
        if let Some(leadership) = self.gate.close() {
            if let Err(e) = leadership.resign().await {
                tracing::warn!(error = %e, "resigning the leadership failed; it expires by itself");
            }
        }
        if let Some(master) = self.master.take() {
            match Arc::try_unwrap(master) {
                Ok(master) => {
                    master.shutdown(grace).await;
                }
                Err(_) => tracing::warn!("the master is still shared; it stops when dropped"),
            }
        }
    }
}

impl Drop for HaMaster {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Whether a standby outlives `e`: etcd was briefly unreachable or busy, a watch fell
/// behind compaction, or a candidate's lease was lost in an outage (it campaigns anew).
fn passing(e: &Error) -> bool {
    e.is_retryable() || matches!(e, Error::Compacted { .. } | Error::LeaseLost { .. })
}

impl Ctx {
    /// The standby, then the leader; returns why it stopped.
    async fn run(&self, mut tail: Tail, revision: Revision) -> Error {
        let watcher = LeaderWatch::start(self.election.clone(), &self.handle);
        let names = self.name_leader(watcher.receiver());
        tokio::pin!(names);
        let leading = async {
            let leadership = self.standby(&mut tail, revision).await?;
            self.lead(&mut tail, leadership).await
        };
        tokio::select! {
            e = leading => e.err().unwrap_or_else(|| Error::Client { reason: "the leadership ended".into() }),
            () = &mut names => Error::Client { reason: "the leader watch ended".into() },
        }
    }

    /// Keeps the gate's idea of the leader current (for `NotLeader`).
    async fn name_leader(&self, mut rx: watch::Receiver<Option<Endpoint>>) {
        loop {
            let leader = rx.borrow_and_update().as_ref().map(ToString::to_string);
            self.gate.set_leader(leader);
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Applies the log as it grows while campaigning; returns the won leadership. A campaign
    /// whose lease was lost (etcd unreachable for a TTL) or broken by a passing etcd error is
    /// made again, and a log read that failed so is read again: a standby outlives etcd
    /// outages. Only damage to the log (or an error that cannot pass) stops it.
    async fn standby(&self, tail: &mut Tail, revision: Revision) -> Result<Leadership> {
        let mut campaign: BoxFuture<'_, Result<Leadership>> =
            self.election.campaign(self.advertise.clone()).boxed();
        let mut follow: BoxStream<'static, Result<LogGroup>> = self.log.watch_from(revision);
        // Held while this master is a standby: dropping it withdraws the publication.
        let _publishing = Publisher::new(
            self.client.clone(),
            self.log.clone(),
            &self.advertise,
            self.election.ttl(),
            self.request_timeout,
        )
        .spawn(self.status.subscribe(), &self.handle);
        loop {
            tokio::select! {
                won = &mut campaign => match won {
                    // A leader holds nothing back: its publication goes with `_publishing`.
                    Ok(leadership) => return Ok(leadership),
                    Err(e) if passing(&e) => {
                        tracing::warn!(error = %e, "campaign failed; campaigning again");
                        tokio::time::sleep(REREAD_PAUSE).await;
                        campaign = self.election.campaign(self.advertise.clone()).boxed();
                    }
                    Err(e) => return Err(e),
                },
                item = follow.next() => match item {
                    Some(Ok(group)) => self.apply(tail, group)?,
                    Some(Err(e)) if !passing(&e) => return Err(e),
                    broken => {
                        if let Some(Err(e)) = broken {
                            tracing::debug!(error = %e, "the log watch broke; reading the log again");
                        }
                        tokio::time::sleep(REREAD_PAUSE).await;
                        follow = match self.catch_up(tail).await {
                            Ok(revision) => self.log.watch_from(revision),
                            Err(Error::LogTruncated { seq, first }) => {
                                tracing::warn!(seq, first, "this standby fell behind the log's truncation; candidacy withdrawn while it bootstraps again");
                                // No candidacy while it cannot lead: were it to win now, it
                                // would wait for a snapshot from itself.
                                drop(std::mem::replace(&mut campaign, futures::future::pending().boxed()));
                                self.rebootstrap(tail).await?;
                                campaign = self.election.campaign(self.advertise.clone()).boxed();
                                futures::stream::empty().boxed()
                            }
                            Err(e) if passing(&e) => {
                                tracing::warn!(error = %e, "reading the log failed; trying again");
                                futures::stream::empty().boxed()
                            }
                            Err(e) => return Err(e),
                        };
                    }
                },
            }
        }
    }

    /// Makes a standby's state the leader's snapshot (its position was truncated away).
    async fn rebootstrap(&self, tail: &mut Tail) -> Result<()> {
        let (core, fresh) = self.bootstrap().fetch_state().await?;
        self.master.reset_standby(core).map_err(Error::Log)?;
        *tail = fresh;
        self.sink.replayed(tail.applied());
        self.status.send_modify(|s| s.applied = tail.applied());
        Ok(())
    }

    /// Reads and applies the log from where `tail` ends; returns the revision read at.
    /// [`Error::LogTruncated`] when the log no longer holds that position (a standby then
    /// bootstraps; a master promoting stops: it cannot lead without the entries).
    async fn catch_up(&self, tail: &mut Tail) -> Result<Revision> {
        let (groups, revision) = self.log.read_from(tail.next()).await?;
        for group in groups {
            self.apply(tail, group)?;
        }
        Ok(revision)
    }

    /// [`Ctx::catch_up`], read again after a passing error (etcd busy, the read overtaken by
    /// a compaction) a bounded number of times: a promotion does not give up on a blip.
    async fn catch_up_retrying(&self, tail: &mut Tail) -> Result<Revision> {
        let mut failures = 0u32;
        loop {
            match self.catch_up(tail).await {
                Err(e) if passing(&e) && failures < REBUILD_TRIES => {
                    failures += 1;
                    tracing::warn!(error = %e, "catching up with the etcd log failed; reading it again");
                    tokio::time::sleep(REREAD_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    /// Where a bootstrap fetches from.
    fn bootstrap(&self) -> Bootstrap<'_> {
        Bootstrap {
            election: &self.election,
            own_address: &self.advertise,
            token: self.cfg.rpc.token.clone(),
            core: &self.cfg.core,
            handle: self.handle.clone(),
        }
    }

    /// Applies one group to the standby's state.
    fn apply(&self, tail: &mut Tail, group: LogGroup) -> Result<()> {
        if group.last() <= tail.applied() {
            return Ok(());
        }
        let key = self.log.group_key(group.first());
        let entries = tail.accept(&key, group).map_err(Error::Log)?;
        self.master.replay(entries).map_err(Error::Log)?;
        self.sink.replayed(tail.applied());
        self.status.send_modify(|s| s.applied = tail.applied());
        Ok(())
    }

    /// Leads: catches up, takes the epoch, starts appending, serves after the margin, and
    /// returns once the leadership or the log fails.
    async fn lead(&self, tail: &mut Tail, leadership: Leadership) -> Result<()> {
        let epoch = Epoch::from(&leadership);
        self.status.send_modify(|s| {
            s.role = Role::Promoting;
            s.epoch = epoch.create_revision;
        });
        self.catch_up_retrying(tail).await?;
        let end = self.log.resume(&epoch).await?;
        if end != tail.applied() {
            return Err(Error::LogGap {
                expected: tail.applied().saturating_add(1),
                found: end.saturating_add(1),
            });
        }
        let number = u64::try_from(epoch.create_revision).map_err(|_| Error::Client {
            reason: format!("epoch {} is not positive", epoch.create_revision),
        })?;
        self.master.promote(number).map_err(Error::Log)?;
        let give_up = leadership.granted_ttl();
        self.sink
            .lead(self.log.clone(), epoch.clone(), give_up, &self.handle);
        leadership.ready().await?;
        let lost = leadership.lost();
        self.gate.open(leadership);
        self.status.send_modify(|s| s.role = Role::Leader);
        tracing::info!(
            epoch = epoch.create_revision,
            applied = tail.applied(),
            "leading"
        );
        let snapshots = Snapshots {
            master: self.master.clone(),
            sink: self.sink.clone(),
            log: self.log.clone(),
            epoch: epoch.clone(),
            every: self.cfg.snapshot_every,
            stall: self.standby_stall,
            dir: self.dir.clone(),
            handle: self.handle.clone(),
        };
        tokio::select! {
            e = lost => Err(e),
            e = self.sink.failed() => Err(e),
            e = snapshots.run() => Err(e),
        }
    }
}
