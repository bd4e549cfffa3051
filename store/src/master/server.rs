//! A running master: the core behind one lock, the operation log (with `data_dir`), the rpc
//! server, and a driver task that feeds timeouts and performs effects.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::runtime::Handle;
use tokio_util::sync::{CancellationToken, DropGuard};
use yuebing_rpc::{
    handler, Endpoint, Metrics, RunningServer, Server, ServerConfig, ShutdownReport,
    LATENCY_BUCKETS_US,
};

use super::disk::{DataDir, Recovery};
use super::ha::{Offered, SnapshotChunk};
use super::log::{Effect, LogEntry};
use super::oplog::{LogSink, OpLog};
use super::presence::Presence;
use super::service::{Health, MasterHandler, MasterService, SERVICE};
use super::telemetry::{self, MasterMetrics};
use super::types::{CallStats, MethodCalls, Millis};
use super::{Master, MasterConfig, Snapshot};
use crate::error::{Error, Result};
use crate::metrics_registry::MetricsRegistry;

/// Everything `yuebing master` can be told.
#[derive(Debug, Clone)]
pub struct MasterServerConfig {
    /// The core's rules.
    pub core: MasterConfig,
    /// Where the operation log and snapshots live; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Write a snapshot after this many log entries. Default 1,000,000.
    pub snapshot_every: u64,
    /// The rpc server's limits. Its `metrics` sink is replaced by `metrics`'s.
    pub rpc: ServerConfig,
    /// Where the master's metrics go, its rpc server's and its log's included: by default a
    /// Prometheus registry of its own, which the admin server's `/metrics` renders.
    pub metrics: MetricsRegistry,
}

impl Default for MasterServerConfig {
    fn default() -> Self {
        MasterServerConfig {
            core: MasterConfig::default(),
            data_dir: None,
            snapshot_every: 1_000_000,
            rpc: ServerConfig::default(),
            metrics: MetricsRegistry::default(),
        }
    }
}

/// The master's clock: milliseconds since the Unix epoch (the core never lets it go back).
pub fn wall_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether a master may serve now. A single master always may; an elected one only while it
/// leads (its etcd lease valid by its own clock, the log caught up), which the HA driver that
/// runs it tells through this.
pub trait ServeGate: Send + Sync + 'static {
    /// `Ok` while this master may serve reads and writes; otherwise the error each call gets
    /// (`NotLeader`, naming the leader when known).
    fn check(&self) -> Result<()>;

    /// What the master is, for its health report: `leader` while it serves, else `standby`.
    fn role(&self) -> &'static str {
        match self.check() {
            Ok(()) => "leader",
            Err(_) => "standby",
        }
    }
}

/// A closure is a gate: each call's [`ServeGate::check`] calls it (a flag an embedder or a test
/// flips, as `yuebing_testkit::Switch`).
impl<F> ServeGate for F
where
    F: Fn() -> Result<()> + Send + Sync + 'static,
{
    fn check(&self) -> Result<()> {
        self()
    }
}

/// State shared by the service handlers and the driver.
pub(crate) struct Shared {
    core: Mutex<Master>,
    /// The core's keys, which existence checks read without its lock (see
    /// [`presence`](super::presence)).
    presence: Arc<Presence>,
    log: Option<OpLog>,
    data: Option<Arc<DataDir>>,
    snapshot_every: u64,
    last_snapshot: AtomicU64,
    snapshotting: Arc<AtomicBool>,
    /// What this master did and holds, on its registry.
    metrics: MasterMetrics,
    ready: AtomicBool,
    closed: AtomicBool,
    /// Cancelled when a panic poisoned the core's lock: the master stops serving for good,
    /// and calls waiting for the log (for entries the panic kept from it) stop waiting.
    poisoned: CancellationToken,
    /// Asked before every call: `None` serves always.
    gate: Option<Arc<dyn ServeGate>>,
    /// The snapshots offered to standbys that bootstrap (an elected leader's): the newest and
    /// the one before, so that a fetch under way is not overtaken by the next offer.
    offered: Mutex<[Option<Arc<Offered>>; 2]>,
    /// The rpc server's statistics of the calls it served, once it is bound (the server is
    /// made after this state, which its handlers hold).
    calls: OnceLock<Arc<Metrics>>,
    /// When this master started: [`CallStats::started_ms`], and the origin of its uptime.
    started: (Millis, Instant),
    handle: Handle,
}

/// Stops the master ([`Shared::stopped`]) when dropped by a panic: held while the core's lock
/// is, so that calls waiting for the log hear of the panic at once, not at the next lock.
struct StopOnUnwind<'a>(&'a Shared);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stopped();
        }
    }
}

/// Why a master whose core lock was poisoned answers every call with an error.
const POISONED: &str = "a panic interrupted a change to the master's state, which may be half \
    applied; this master stopped serving (restart it: the operation log holds every \
    acknowledged change)";

impl Shared {
    /// The core, or the error that stops this master for good: a panic while the lock was
    /// held may have left the core half changed, so a poisoned core is never used again.
    fn core(&self) -> Result<MutexGuard<'_, Master>> {
        self.core.lock().map_err(|_| self.stopped())
    }

    /// Marks this master stopped by a panic under the core's lock; the error calls get.
    fn stopped(&self) -> Error {
        if !self.poisoned.is_cancelled() {
            tracing::error!("{POISONED}");
            self.poisoned.cancel();
        }
        Error::Internal {
            reason: POISONED.into(),
        }
    }

    /// Runs `f` on the core at the current time, hands its effects to the log, and returns once
    /// every entry made so far is durable.
    pub(crate) async fn run<T>(&self, f: impl FnOnce(&mut Master, Millis) -> T) -> Result<T> {
        self.admit()?;
        let (out, seq, own) = {
            let mut core = self.core()?;
            let _unwinding = StopOnUnwind(self);
            let before = core.last_seq();
            let out = f(&mut core, wall_ms());
            self.perform_effects(&mut core);
            self.maybe_snapshot(&core);
            let after = core.last_seq();
            (out, after, (after > before).then(|| before + 1))
        };
        if let Some(log) = &self.log {
            log.wait(seq, own).await?;
        }
        if let (None, Some(gate)) = (own, &self.gate) {
            // A read answers as of when it ran: it must still lead now (it may have waited for
            // the core's lock or the log past its lease).
            gate.check()?;
        }
        Ok(out)
    }

    /// Whether this master takes calls on its store now: not shut down, leading (if it is
    /// elected), its log working.
    fn admit(&self) -> Result<()> {
        if self.poisoned.is_cancelled() || self.core.is_poisoned() {
            return Err(self.stopped());
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Internal {
                reason: "the master is shut down".into(),
            });
        }
        if let Some(gate) = &self.gate {
            gate.check()?;
        }
        match self.log.as_ref().and_then(OpLog::failure) {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }

    /// Answers `f` from the core's [`Presence`] without the core's lock, as [`Shared::run`]
    /// answers a read: admitted alike, and only once the log is durable up to every change `f`
    /// saw, and while this master still leads.
    pub(crate) async fn present<T>(&self, f: impl FnOnce(&Presence, Millis) -> T) -> Result<T> {
        self.admit()?;
        let out = f(&self.presence, wall_ms());
        // Loaded after `f` read the keys: at least the number of every change it saw.
        let seq = self.presence.seq();
        if let Some(log) = &self.log {
            // A panic under the core's lock may have kept that change from the log for good.
            tokio::select! {
                waited = log.wait(seq, None) => waited?,
                () = self.poisoned.cancelled() => return Err(self.stopped()),
            }
        }
        if let Some(gate) = &self.gate {
            gate.check()?;
        }
        Ok(out)
    }

    fn perform_effects(&self, core: &mut Master) {
        let mut entries = Vec::new();
        while let Some(effect) = core.poll_effect() {
            match effect {
                Effect::Append(e) => entries.push(e),
                Effect::ClientExpired {
                    client,
                    mounts,
                    writes,
                } => tracing::info!(%client, mounts, writes, "client expired"),
                Effect::Evicted { objects, bytes } => tracing::info!(objects, bytes, "evicted"),
                Effect::MountRemoved {
                    mount,
                    objects_lost,
                } => tracing::info!(mount = mount.0, objects_lost, "store space removed"),
            }
        }
        self.metrics.tally(core.take_tally());
        if let (Some(log), false) = (&self.log, entries.is_empty()) {
            self.metrics.appended(entries.len());
            log.append(entries);
        }
    }

    /// The master's metrics.
    pub(crate) fn metrics(&self) -> &MasterMetrics {
        &self.metrics
    }

    /// Starts writing a snapshot when enough entries have accumulated (one at a time).
    fn maybe_snapshot(&self, core: &Master) {
        let (Some(data), Some(log)) = (&self.data, self.log.as_ref().and_then(OpLog::disk)) else {
            return;
        };
        let seq = core.last_seq();
        if seq < self.last_snapshot.load(Ordering::Relaxed) + self.snapshot_every
            || self.snapshotting.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.last_snapshot.store(seq, Ordering::Relaxed);
        let snapshot = core.snapshot();
        log.rotate(seq + 1);
        let (data, busy) = (data.clone(), self.snapshotting.clone());
        self.handle.spawn_blocking(move || {
            match data.write_snapshot(&snapshot) {
                Ok(()) => tracing::info!(seq, "snapshot written"),
                Err(e) => tracing::error!(error = %e, "snapshot failed; the log keeps everything"),
            }
            busy.store(false, Ordering::Release);
        });
    }

    /// A piece of the offered snapshot (see [`Offered::chunk`]).
    pub(crate) fn snapshot_chunk(
        &self,
        seq: u64,
        offset: u64,
        max_len: u64,
    ) -> Result<SnapshotChunk> {
        let offered = self
            .offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let [newest, older] = offered;
        let Some(newest) = newest else {
            return Err(Error::params(
                "this master offers no snapshot (only an elected leader does, once it took one)",
            ));
        };
        match older {
            Some(older) if seq != 0 && seq == older.seq => older.chunk(seq, offset, max_len),
            _ => newest.chunk(seq, offset, max_len),
        }
    }

    /// Runs `f` on this state but not on the core, at the current time: no lock, no gate (a
    /// standby answers too), nothing logged. For the calls that describe the process rather
    /// than the store (`call_stats`).
    pub(crate) fn outside_core<T>(&self, f: impl FnOnce(&Shared, Millis) -> T) -> Result<T> {
        Ok(f(self, wall_ms()))
    }

    /// What the rpc server counted of the calls it served (none before it is bound), each
    /// method by its own name (`exist`; the server's counters say `master.exist`).
    pub(crate) fn call_stats(&self) -> CallStats {
        let (started_ms, started) = self.started;
        let method = |m: yuebing_rpc::MethodMetrics| {
            let mut calls = MethodCalls::from(m);
            if let Some((_, name)) = calls.method.rsplit_once('.') {
                calls.method = name.to_string();
            }
            calls
        };
        let mut methods: Vec<MethodCalls> = self
            .calls
            .get()
            .map(|m| m.snapshot().into_iter().map(method).collect())
            .unwrap_or_default();
        methods.sort_by(|a, b| a.method.cmp(&b.method));
        CallStats {
            started_ms,
            uptime_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            bucket_bounds_us: LATENCY_BUCKETS_US.to_vec(),
            methods,
        }
    }

    pub(crate) fn health(&self) -> Health {
        let core = self.core().map(|c| (c.last_seq(), c.epoch()));
        let (last_seq, epoch) = core.as_ref().map_or((0, 0), |&(seq, epoch)| (seq, epoch));
        let role = match &self.gate {
            None => "single",
            Some(gate) => gate.role(),
        };
        let (durable_seq, failure) = match &self.log {
            None => (last_seq, None),
            Some(log) => (log.durable_seq(), log.failure().map(|e| e.to_string())),
        };
        let failure = core.err().map(|e| e.to_string()).or(failure);
        Health {
            ready: self.ready.load(Ordering::Acquire) && failure.is_none(),
            persistent: self.log.is_some(),
            last_seq,
            durable_seq,
            failure,
            role: role.to_string(),
            epoch,
        }
    }

    /// Feeds timeouts to the core until `stop`.
    async fn drive(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let Ok(due) = self.core().map(|c| c.poll_timeout()) else {
                return;
            };
            let now = wall_ms();
            // Wake at the next deadline, and at least every 250 ms (new clients and puts add
            // deadlines without waking the driver).
            let wait = due.map_or(250, |t| t.saturating_sub(now).min(250));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            }
            if self.gate.as_ref().is_some_and(|g| g.check().is_err()) {
                // Not serving (a standby): its state changes only by replaying the log.
                continue;
            }
            if let Err(e) = self.run(|m, now| m.handle_timeout(now)).await {
                tracing::error!(error = %e, "timeouts could not be made durable");
            }
        }
    }
}

impl Drop for Shared {
    /// Closing the operation log joins its writer thread, which finishes its last `fdatasync`
    /// first: on a runtime worker that is handed to a thread of its own (with the data
    /// directory, whose lock is released only after the log is closed), so that dropping a
    /// master never stalls the runtime. The directory is then free a little later than the
    /// drop; [`RunningMaster::shutdown`] returns only once it is.
    fn drop(&mut self) {
        let closing = (self.log.take(), self.data.take());
        if closing.0.is_none() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let close = move || {
            let (log, data) = closing;
            drop(log);
            drop(data);
        };
        // If no thread can be started, the closure is dropped here: the log closes inline.
        let _ = std::thread::Builder::new()
            .name("yuebing-log-close".into())
            .spawn(close);
    }
}

/// What a master serves: its state, its log, its data directory and its gate.
struct Parts {
    core: Master,
    log: Option<OpLog>,
    data: Option<Arc<DataDir>>,
    gate: Option<Arc<dyn ServeGate>>,
}

/// A master serving on an endpoint. Dropping it stops the driver; call
/// [`RunningMaster::shutdown`] for a graceful stop.
pub struct RunningMaster {
    server: RunningServer,
    shared: Arc<Shared>,
    recovery: Recovery,
    driver: tokio::task::JoinHandle<()>,
    stop: DropGuard,
}

impl RunningMaster {
    /// Like [`RunningMaster::start`], with the listener, the driver and every task on
    /// `handle`'s runtime; the caller may be anywhere (another runtime, a plain thread).
    pub async fn start_on(
        cfg: MasterServerConfig,
        endpoint: &Endpoint,
        handle: Handle,
    ) -> Result<RunningMaster> {
        let endpoint = endpoint.clone();
        handle
            .spawn(async move { RunningMaster::start(cfg, &endpoint).await })
            .await
            .map_err(|e| Error::Internal {
                reason: format!("the master's start task ended: {e}"),
            })?
    }

    /// Restores the state (from `data_dir` if set), binds `endpoint` and starts serving, on
    /// the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`RunningMaster::start_on`] there.
    pub async fn start(cfg: MasterServerConfig, endpoint: &Endpoint) -> Result<RunningMaster> {
        RunningMaster::start_gated(cfg, endpoint, None).await
    }

    /// [`RunningMaster::start`], serving each call only when `gate` allows it (see
    /// [`ServeGate`]); the others get the gate's error.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start_gated(
        cfg: MasterServerConfig,
        endpoint: &Endpoint,
        gate: Option<Arc<dyn ServeGate>>,
    ) -> Result<RunningMaster> {
        cfg.core.validate().map_err(Error::params)?;
        let now = wall_ms();
        let (core, log, data, recovery) = match &cfg.data_dir {
            Some(dir) => {
                let dir = dir.clone();
                let core_cfg = cfg.core.clone();
                let fsync = cfg.metrics.sink().histogram(telemetry::FSYNC, vec![]);
                let (data, core, log, recovery) =
                    tokio::task::spawn_blocking(move || DataDir::open(&dir, core_cfg, now, fsync))
                        .await
                        .map_err(|e| Error::Internal {
                            reason: e.to_string(),
                        })??;
                (core, Some(OpLog::Disk(log)), Some(Arc::new(data)), recovery)
            }
            None => {
                let mut core = Master::new(cfg.core.clone(), false);
                core.start_stateless(now);
                (core, None, None, Recovery::default())
            }
        };
        let parts = Parts {
            core,
            log,
            data,
            gate,
        };
        RunningMaster::launch(&cfg, endpoint, parts, recovery).await
    }

    /// Starts an elected master (its HA driver calls this): `core` is the state it rebuilt
    /// from the replicated log (made with logging on, so that its changes reach `sink`),
    /// `sink` that log, and `gate` says when it leads. Not
    /// `data_dir`'s log: the replicated one is authoritative. While the gate is closed the
    /// master serves nothing and runs no timeouts (a standby's state changes only by
    /// [`RunningMaster::replay`]); [`RunningMaster::promote`] makes it the leader's.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start_replicated(
        cfg: MasterServerConfig,
        endpoint: &Endpoint,
        core: Master,
        sink: Arc<dyn LogSink>,
        gate: Arc<dyn ServeGate>,
    ) -> Result<RunningMaster> {
        cfg.core.validate().map_err(Error::params)?;
        let parts = Parts {
            core,
            log: Some(OpLog::Sink(sink)),
            data: None,
            gate: Some(gate),
        };
        RunningMaster::launch(&cfg, endpoint, parts, Recovery::default()).await
    }

    /// Applies entries of the replicated log, in order, to a standby's state (entries at or
    /// before its position are skipped; a gap is `Corrupt` and applies nothing more).
    pub fn replay(&self, entries: Vec<LogEntry>) -> Result<()> {
        let mut core = self.shared.core()?;
        for entry in entries {
            core.replay(entry)?;
        }
        Ok(())
    }

    /// Makes this standby's state the leader's of `epoch` (see [`Master::promote`]); its gate
    /// decides when calls are served. Its log must count every entry replayed so far as
    /// durable (they came from it), or calls wait for them.
    pub fn promote(&self, epoch: u64) -> Result<()> {
        self.shared.core()?.promote(epoch, wall_ms())
    }

    /// The state now, as a snapshot (at [`RunningMaster::last_seq`], which may not be durable
    /// yet: offer it only once its log is durable that far).
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(self.shared.core()?.snapshot())
    }

    /// Offers `offered` to standbys that bootstrap; the previous offer stays servable (for a
    /// fetch under way) until the next. Offer only a snapshot whose entries are all durable in
    /// the replicated log.
    pub fn offer_snapshot(&self, offered: Offered) {
        let mut slots = self
            .shared
            .offered
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let previous = slots[0].replace(Arc::new(offered));
        slots[1] = previous;
    }

    /// Replaces a standby's state by `core` (bootstrapped from the leader's snapshot after it
    /// fell behind the log's truncation). Refused while this master serves.
    pub fn reset_standby(&self, core: Master) -> Result<()> {
        if self.shared.gate.as_ref().is_none_or(|g| g.check().is_ok()) {
            return Err(Error::params(
                "only a standby's state is replaced from a snapshot",
            ));
        }
        let mut core = core;
        let mut current = self.shared.core()?;
        core.attach_presence(self.shared.presence.clone());
        let old = std::mem::replace(&mut *current, core);
        drop(current);
        // Freeing a large state takes a while: not under the lock, not on a runtime worker.
        self.shared.handle.spawn_blocking(move || drop(old));
        Ok(())
    }

    /// Sequence number of the last entry in this master's state.
    pub fn last_seq(&self) -> Result<u64> {
        Ok(self.shared.core()?.last_seq())
    }

    /// Binds `endpoint` and serves `parts` on the current runtime.
    async fn launch(
        cfg: &MasterServerConfig,
        endpoint: &Endpoint,
        parts: Parts,
        recovery: Recovery,
    ) -> Result<RunningMaster> {
        let Parts {
            core,
            log,
            data,
            gate,
        } = parts;
        let last = core.last_seq();
        let shared = Arc::new(Shared {
            presence: core.presence().clone(),
            core: Mutex::new(core),
            log,
            data,
            snapshot_every: cfg.snapshot_every.max(1),
            last_snapshot: AtomicU64::new(last),
            snapshotting: Arc::new(AtomicBool::new(false)),
            metrics: MasterMetrics::new(cfg.metrics.clone()),
            ready: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            poisoned: CancellationToken::new(),
            gate,
            offered: Mutex::new([None, None]),
            calls: OnceLock::new(),
            started: (wall_ms(), Instant::now()),
            handle: Handle::current(),
        });
        let handler = MasterHandler {
            shared: shared.clone(),
        };
        cfg.metrics.keep_up(&shared.handle);
        let rpc = ServerConfig {
            metrics: cfg.metrics.sink().clone(),
            ..cfg.rpc.clone()
        };
        let server = Server::new(rpc)
            .service(SERVICE, move |_conn| handler!(handler.clone().serve()))
            .bind(endpoint)
            .await?;
        // Set once, here, on a state no other server shares.
        let _ = shared.calls.set(server.shared_metrics());
        let stop = CancellationToken::new();
        let driver = tokio::spawn(shared.clone().drive(stop.clone()));
        shared.ready.store(true, Ordering::Release);
        tracing::info!(endpoint = %server.local_endpoint(), snapshot = recovery.snapshot_seq,
            replayed = recovery.replayed, "master ready");
        Ok(RunningMaster {
            server,
            shared,
            recovery,
            driver,
            stop: stop.drop_guard(),
        })
    }

    /// The bound endpoint (with the real port when 0 was asked for).
    pub fn local_endpoint(&self) -> &Endpoint {
        self.server.local_endpoint()
    }

    /// What restoring from the data directory found.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Readiness and log position.
    pub fn health(&self) -> Health {
        self.shared.health()
    }

    /// Serves the admin HTTP paths (see [`admin`](super::admin)) on `bind` (`host:port`; port
    /// 0 picks one) until the returned server is dropped, on the master's runtime.
    pub async fn serve_admin(&self, bind: &str) -> Result<super::admin::AdminServer> {
        let (shared, bind) = (self.shared.clone(), bind.to_string());
        yuebing_rpc::in_runtime(&self.shared.handle, async move {
            super::admin::start(&shared, &bind).await
        })
        .await
    }

    /// Stops accepting, lets calls in flight finish within `grace`, stops the driver, and
    /// releases the data directory (every answered mutation is already durable).
    /// It may be awaited from anywhere: it runs inside the master's runtime.
    pub async fn shutdown(self, grace: Duration) -> ShutdownReport {
        let handle = self.shared.handle.clone();
        yuebing_rpc::in_runtime(&handle, self.shutdown_here(grace)).await
    }

    async fn shutdown_here(self, grace: Duration) -> ShutdownReport {
        self.shared.ready.store(false, Ordering::Release);
        let report = self.server.shutdown(grace).await;
        self.stop.disarm().cancel();
        let _ = self.driver.await;
        self.shared.closed.store(true, Ordering::Release);
        // Nothing may touch the directory once its lock is released (a second master may open
        // it): the log writes what it has queued and stops, and a snapshot under way finishes.
        let shared = self.shared.clone();
        let closed = self.shared.handle.spawn_blocking(move || {
            if let Some(log) = shared.log.as_ref().and_then(OpLog::disk) {
                log.close();
            }
        });
        if let Err(e) = closed.await {
            tracing::error!(error = %e, "closing the operation log failed");
        }
        while self.shared.snapshotting.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(data) = &self.shared.data {
            data.release();
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{ClientId, MasterClient, MountSpec, PutConfig, Write};

    /// Client 7 mounts 1 MiB on node n1 and puts the one-byte object `k` there.
    fn put_k(m: &mut Master, now: Millis) -> Result<()> {
        let a = ClientId(7);
        let spec = MountSpec {
            node: "n1".into(),
            base: 1 << 20,
            len: 1 << 20,
        };
        m.mount(a, now, &[spec])?;
        m.put_start(a, now, "k", 1, &PutConfig::default(), Write::Put)?;
        m.put_end(a, now, "k")
    }

    #[tokio::test]
    async fn a_panic_mid_change_stops_the_master_with_an_error_that_says_why() {
        let master = RunningMaster::start(
            MasterServerConfig::default(),
            &"127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let shared = master.shared.clone();
        assert!(shared.run(|m, _| m.last_seq()).await.is_ok());
        let panicking = shared.clone();
        let died = tokio::spawn(async move {
            panicking
                .run(|m, now| -> u64 {
                    // A change made (the key is in the presence), its entry never logged.
                    put_k(m, now).unwrap();
                    panic!("injected panic while the core is locked")
                })
                .await
        })
        .await;
        assert!(died.unwrap_err().is_panic());
        let e = shared.run(|m, _| m.last_seq()).await.unwrap_err();
        assert!(
            matches!(e, Error::Internal { .. }) && e.to_string().contains("stopped serving"),
            "{e}"
        );
        let health = master.health();
        assert!(!health.ready, "a poisoned master does not report ready");
        assert!(health.failure.is_some_and(|f| f.contains("half")));
        let client = MasterClient::new(master.local_endpoint().clone(), ClientId(7));
        let e = client.exist("k").await.unwrap_err();
        assert_eq!(e.code(), -1, "{e}");
    }

    /// Existence is read from the presence: a call that holds the core's lock (an eviction
    /// scanning every object) does not hold it up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn existence_is_answered_while_the_core_is_locked() {
        let master = RunningMaster::start(
            MasterServerConfig::default(),
            &"127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let shared = master.shared.clone();
        shared.run(put_k).await.unwrap().unwrap();
        let (locked, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let holder = std::thread::spawn({
            let shared = shared.clone();
            move || {
                let _core = shared.core().unwrap();
                locked.0.send(()).unwrap();
                let _ = release.1.recv();
            }
        });
        locked.1.recv().unwrap();
        // Asked from a runtime of its own, waited for on this thread: a handler stuck on the
        // lock holds up neither the asking nor the waiting.
        let (answer, answered) = std::sync::mpsc::channel();
        let endpoint = master.local_endpoint().clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = answer.send(rt.block_on(async {
                let client = MasterClient::new(endpoint, ClientId(7));
                let one = client.exist("k").await;
                let batch = client.batch_exist(vec!["k".into(), "x".into()]).await;
                (one, batch)
            }));
        });
        let answered = answered.recv_timeout(Duration::from_secs(10));
        release.0.send(()).unwrap();
        holder.join().unwrap();
        let (one, batch) = answered.expect("existence waited for the core's lock");
        assert!(one.unwrap());
        let batch: Vec<bool> = batch.unwrap().into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(batch, [true, false]);
    }

    #[tokio::test]
    async fn a_standby_fetches_the_offered_snapshot_in_chunks_over_a_small_max_frame() {
        use crate::master::ha::bootstrap::fetch;
        use crate::master::types::{MountSpec, PutConfig};
        let mut cfg = MasterServerConfig::default();
        // Frames of 8 KiB: the snapshot below is larger, and still crosses in chunks.
        cfg.rpc.max_frame = 8 << 10;
        let master = RunningMaster::start(cfg, &"127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = crate::master::MasterClient::new(
            master.local_endpoint().clone(),
            crate::master::ClientId(7),
        );
        let e = fetch(&client, 1024, Duration::from_secs(5), |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(e.code(), -600, "nothing offered yet: {e}");
        let spec = MountSpec {
            node: "n1".into(),
            base: 1 << 20,
            len: 1 << 30,
        };
        client.mount(vec![spec]).await.unwrap();
        for i in 0..300 {
            let key = format!("object-with-a-longish-name-{i:05}");
            client
                .put_start(&key, 4096, &PutConfig::default(), crate::master::Write::Put)
                .await
                .unwrap();
            client.put_end(&key).await.unwrap();
        }
        let snapshot = master.snapshot().unwrap();
        let offered = Offered::encode(&snapshot).unwrap();
        assert!(offered.bytes.len() > 16 << 10, "{}", offered.bytes.len());
        master.offer_snapshot(offered);
        let mut seen = Vec::new();
        let fetched = fetch(&client, 1024, Duration::from_secs(5), |got, total| {
            seen.push((got, total))
        })
        .await
        .unwrap()
        .decode()
        .unwrap();
        assert_eq!(fetched, snapshot);
        assert_eq!(fetched.object_count(), 300);
        assert!(seen.len() > 16, "{} chunks", seen.len());
        // A chunk of another snapshot is refused with a typed error.
        let e = client
            .snapshot_chunk(snapshot.seq + 5, 0, 10)
            .await
            .unwrap_err();
        assert_eq!(e.code(), -600, "{e}");
        // The previous offer stays servable until the next one replaces it.
        let older = snapshot.seq;
        let offer_now = || {
            let s = master.snapshot().unwrap();
            master.offer_snapshot(Offered::encode(&s).unwrap());
            s.seq
        };
        client
            .put_end("object-with-a-longish-name-00000")
            .await
            .unwrap();
        client
            .remove("object-with-a-longish-name-00001", true)
            .await
            .unwrap();
        let newer = offer_now();
        assert!(newer > older);
        assert_eq!(
            client.snapshot_chunk(older, 0, 10).await.unwrap().seq,
            older
        );
        assert_eq!(client.snapshot_chunk(0, 0, 10).await.unwrap().seq, newer);
        client
            .remove("object-with-a-longish-name-00002", true)
            .await
            .unwrap();
        offer_now();
        let e = client.snapshot_chunk(older, 0, 10).await.unwrap_err();
        assert!(e.to_string().contains("fetch again"), "{e}");
    }

    #[tokio::test]
    async fn call_stats_count_the_calls_served_and_a_standby_answers_them_too() {
        let switch = Arc::new(yuebing_testkit::Switch::new(true));
        let asked = switch.clone();
        let gate = move || asked.check(|| Error::NotLeader { leader: None });
        let master = RunningMaster::start_gated(
            MasterServerConfig::default(),
            &"127.0.0.1:0".parse().unwrap(),
            Some(Arc::new(gate)),
        )
        .await
        .unwrap();
        let client = crate::master::MasterClient::new(
            master.local_endpoint().clone(),
            crate::master::ClientId(7),
        );
        for _ in 0..3 {
            assert!(!client.exist("k").await.unwrap());
        }
        let first = client.call_stats().await.unwrap();
        let method = |s: &CallStats, name: &str| {
            s.methods
                .iter()
                .find(|m| m.method == name)
                .cloned()
                .unwrap_or_default()
        };
        let exist = method(&first, "exist");
        assert_eq!(exist.calls, 3);
        assert_eq!(exist.buckets.len(), first.bucket_bounds_us.len());
        assert_eq!(exist.buckets.last(), Some(&3), "{first:?}");
        assert!(first.started_ms > 0);
        // The call that takes the snapshot is under way, not finished.
        let own = method(&first, "call_stats");
        assert_eq!((own.calls, own.in_flight), (0, 1));

        switch.close();
        assert_eq!(client.exist("k").await.unwrap_err().code(), -1010);
        let second = client.call_stats().await.unwrap();
        assert_eq!(second.started_ms, first.started_ms, "one run");
        assert!(second.uptime_ms >= first.uptime_ms);
        assert_eq!(method(&second, "exist").calls, 4);
        assert_eq!(method(&second, "call_stats").calls, 1);
    }

    #[tokio::test]
    async fn a_closed_gate_refuses_every_call_with_not_leader_and_changes_nothing() {
        let switch = Arc::new(yuebing_testkit::Switch::new(true));
        let asked = switch.clone();
        let gate = move || {
            asked.check(|| Error::NotLeader {
                leader: Some("127.0.0.1:9".into()),
            })
        };
        let master = RunningMaster::start_gated(
            MasterServerConfig::default(),
            &"127.0.0.1:0".parse().unwrap(),
            Some(Arc::new(gate)),
        )
        .await
        .unwrap();
        let client = crate::master::MasterClient::new(
            master.local_endpoint().clone(),
            crate::master::ClientId(7),
        );
        assert!(!client.exist("k").await.unwrap());
        let before = master.health().last_seq;
        switch.close();
        let e = client.exist("k").await.unwrap_err();
        assert_eq!(e.code(), -1010, "{e}");
        assert!(e.to_string().contains("127.0.0.1:9"), "{e}");
        let e = client.remove_all(true).await.unwrap_err();
        assert!(
            matches!(e, Error::NotLeader { ref leader } if leader.as_deref() == Some("127.0.0.1:9")),
            "{e:?}"
        );
        assert_eq!(master.health().last_seq, before, "nothing was logged");
        switch.open();
        assert_eq!(client.remove_all(true).await.unwrap(), 0);
    }
}
