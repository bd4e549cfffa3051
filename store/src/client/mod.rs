//! The store client: put a value under a key on some nodes, get it from any of them.
//!
//! A put is `put_start` at the master (which places the replicas), a transfer to each replica,
//! then `put_end` (or `put_revoke` if a transfer failed). A get is `get_replica_list` (which
//! grants a read lease), a transfer from the nearest replica (same process, same host, remote;
//! a failed one makes way for the next within the call's deadline), and a check that the
//! transfer ended inside the lease. Every call has a deadline. Every call checks its arguments
//! (keys, buffers, sizes, replica settings) where it enters, before any round trip: a bad one is
//! `InvalidParams` naming it, as the master would answer, and in a batch for that item only.
//!
//! - `config`: [`ClientConfig`]. `masters`: failover over master addresses, or the leader a
//!   watched source names (HA). `staging`: registered
//!   scratch memory for plain byte slices. `peers`: segment handles, replica order, back-off.
//! - `telemetry`: the client's metrics (put/get latency by size class, its standing).
//! - `ops`: batch operations (`sift`: a batch's bad items answered in their places);
//!   `admin`: removals, listings, counts and health; `heartbeat`: pings and remounts;
//!   `tasks`: copy and move tasks, asked for and run.

mod admin;
mod cache;
mod config;
mod grants;
mod heartbeat;
mod http;
mod located;
mod masters;
mod ops;
mod peers;
mod ranged;
mod replicas;
mod reserved;
mod sift;
mod spaces;
mod staging;
mod tasks;
mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use yuebing_engine::{RemoteAccess, TransferEngine};

pub use self::admin::ClientHealth;
pub use self::config::ClientConfig;
pub use self::located::{Fetched, Located};
use self::masters::Masters;
use self::ops::Source;
use self::peers::Peers;
pub use self::replicas::Fragment;
pub use self::reserved::Reservation;
pub use self::spaces::SpaceId;
use self::spaces::Spaces;
use self::staging::Staging;
use crate::args;
use crate::error::{Error, Result};
use crate::master::{ClientId, MasterClient, MountSpec, PutConfig, ReplicaList, Write};

/// The cluster token of a client configuration: `token`, or `engine.token` (they may not
/// differ).
fn one_token(cfg: &ClientConfig) -> Result<Option<yuebing_rpc::Token>> {
    match (&cfg.token, &cfg.engine.token) {
        (Some(a), Some(b)) if a != b => Err(Error::params(
            "ClientConfig.token and ClientConfig.engine.token differ; set one",
        )),
        (a, b) => Ok(a.clone().or_else(|| b.clone())),
    }
}

impl Inner {
    /// A replica on this client's own node is copied by its engine's `local` transport, which
    /// reaches local-only memory too (staging, users' buffers): the master's address must lie
    /// inside this client's store space, or the copy is refused.
    fn check_own_replica(&self, addr: u64, len: u64) -> Result<()> {
        match self.spaces.contains(addr, len) {
            true => Ok(()),
            false => Err(yuebing_engine::Error::OutOfBounds { addr, len }.into()),
        }
    }
}

/// How long the last handle's drop waits for the master to hear that the client left.
const LEAVE_BOUND: Duration = Duration::from_secs(2);

impl Drop for Inner {
    /// The last handle is gone, and with it the client's store space: tells the master so (in
    /// the background, on the engine's runtime), so that it places no new replica in space
    /// that is about to vanish, instead of doing so until the client's TTL runs out. The
    /// space stays allocated, registered and served until the master answered (or
    /// [`LEAVE_BOUND`] passed), so a replica placed there meanwhile fails at its publication,
    /// not in freed memory. Where the runtime is shutting down the task does not run, and the
    /// master expires the client at its TTL, as for a killed process.
    fn drop(&mut self) {
        let (masters, engine, space) = (
            self.masters.clone(),
            self.engine.clone(),
            self.spaces.take_buffers(),
        );
        let bound = self.cfg.deadline.min(LEAVE_BOUND);
        let id = self.id;
        let grants = self.grants.ids();
        self.engine.handle().spawn(async move {
            let until = Instant::now() + bound;
            // Freed at once, where the leave would hold them for the write release time.
            for (grant, dirty) in grants {
                let ended = masters.call(until, |m| async move { m.until(until).grant_end(grant, dirty).await });
                if let Err(e) = ended.await {
                    tracing::debug!(client = %id, %grant, error = %e, "could not end a grant");
                }
            }
            let left = masters.call(until, |m| async move { m.until(until).leave().await });
            if let Err(e) = left.await {
                tracing::debug!(client = %id, error = %e, "could not tell the master this client left; it expires at its TTL");
            }
            // An engine shared with others goes on: the space must not stay exported there.
            spaces::unregister(&engine, &space);
            drop((space, engine));
        });
    }
}

/// Per-call settings, taken by value (or borrowed: `&Options` converts by cloning).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Deadline of the whole call; default [`ClientConfig::deadline`].
    pub deadline: Option<Duration>,
    /// Replica settings of a put; default [`ClientConfig::put`].
    pub put: Option<PutConfig>,
    /// Whether a put may replace an existing value ([`Write::Upsert`], Mooncake's `upsert`);
    /// default [`Write::Put`].
    pub write: Write,
    /// A read asks the master where the object is, rather than use a location this client
    /// kept from an earlier read while its lease lasts ([`ClientConfig::lease_cache`]); the
    /// answer is kept all the same. Default false.
    pub uncached: bool,
}

impl Options {
    /// Options with this deadline.
    pub fn deadline(d: Duration) -> Self {
        Options {
            deadline: Some(d),
            ..Options::default()
        }
    }

    /// Options with these replica settings.
    pub fn put(cfg: PutConfig) -> Self {
        Options {
            put: Some(cfg),
            ..Options::default()
        }
    }

    /// Options of a put that replaces an existing value (Mooncake's `upsert`).
    pub fn upsert() -> Self {
        Options::default().with_write(Write::Upsert)
    }

    /// These options with `write`.
    pub fn with_write(self, write: Write) -> Self {
        Options { write, ..self }
    }

    /// These options, for a read that asks the master (see [`Options::uncached`]).
    pub fn uncached(self) -> Self {
        Options {
            uncached: true,
            ..self
        }
    }
}

impl From<&Options> for Options {
    fn from(opts: &Options) -> Options {
        opts.clone()
    }
}

pub(crate) struct Inner {
    pub(crate) cfg: ClientConfig,
    pub(crate) id: ClientId,
    pub(crate) engine: TransferEngine,
    pub(crate) masters: Arc<Masters>,
    pub(crate) staging: Staging,
    pub(crate) peers: Peers,
    /// The store space mounted, with the master's ids of its ranges.
    pub(crate) spaces: Spaces,
    /// Set by [`Client::close`].
    pub(crate) closed: std::sync::atomic::AtomicBool,
    /// The copy and move tasks this client runs for the master.
    pub(crate) runner: tasks::Runner,
    /// What the heartbeat's pings found (the admin server's `/ready`).
    pub(crate) standing: heartbeat::Standing,
    /// Its metrics, on `cfg.metrics`.
    pub(crate) metrics: telemetry::ClientMetrics,
    /// Locations of objects read, while their leases last.
    pub(crate) cache: cache::LeaseCache,
    /// Store space the master granted ahead of small puts.
    pub(crate) grants: grants::Grants,
}

/// A store client. Cheap to clone; its heartbeat stops when the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    _heartbeat: Arc<heartbeat::Heartbeat>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("engine", &self.inner.engine.name())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts a client with its own Transfer Engine, mounts its store space and starts its
    /// heartbeat, on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`Client::start_on`] there.
    pub async fn start(cfg: ClientConfig) -> Result<Client> {
        let handle = tokio::runtime::Handle::current();
        Self::start_on(cfg, handle).await
    }

    /// Starts a client whose engine, master connections, timers and heartbeat all live on
    /// `handle`'s runtime. It, and every call of the client, may be awaited from anywhere: a
    /// task of another runtime, or a plain thread with any executor.
    pub async fn start_on(cfg: ClientConfig, handle: tokio::runtime::Handle) -> Result<Client> {
        cfg.check()?;
        let mut engine_cfg = cfg.engine.clone();
        engine_cfg.token = one_token(&cfg)?;
        if !engine_cfg.metrics.is_on() {
            engine_cfg.metrics = cfg.metrics.sink().clone();
        }
        let engine = TransferEngine::start_on(engine_cfg, handle).await?;
        Client::with_engine(cfg, engine).await
    }

    /// Starts a client on an existing engine (shared with other users of it), on the engine's
    /// runtime.
    pub async fn with_engine(cfg: ClientConfig, engine: TransferEngine) -> Result<Client> {
        cfg.check()?;
        let handle = engine.handle().clone();
        yuebing_rpc::in_runtime(&handle, Self::with_engine_here(cfg, engine)).await
    }

    async fn with_engine_here(cfg: ClientConfig, engine: TransferEngine) -> Result<Client> {
        let token = one_token(&cfg)?;
        if engine.token() != token.as_ref() {
            return Err(Error::params(
                "the engine was started with another cluster token than the client's",
            ));
        }
        let id = ClientId(u128::from(fastrand::u64(..)) << 64 | u128::from(fastrand::u64(..)));
        let masters = Arc::new(Masters::new(
            &cfg.masters,
            cfg.leader.clone(),
            id,
            token.as_ref(),
            cfg.metrics.sink(),
            engine.handle(),
        )?);
        cfg.metrics.keep_up(engine.handle());
        // Staging is local-only (peers never reach it); the store space is what other
        // clients write objects into and read them from: exported for both.
        let staging = Staging::new(&engine, cfg.staging_size)?;
        let space = match cfg.store_size {
            0 => None,
            n => Some(engine.allocate_exported(
                n as usize,
                cfg.prefault,
                RemoteAccess::READ_WRITE,
            )?),
        };
        if space.is_some() {
            // Where descriptors are stored (etcd), peers that the master sends here must find
            // the store space in this engine's descriptor: published before it is mounted.
            engine.publish().await?;
        }
        let specs: Vec<MountSpec> = space.iter().map(|b| spaces::spec_of(&engine, b)).collect();
        // A first mount, not a remount: a master within a lease TTL of its start holds the
        // ranges nodes remount (readers may still read them under its previous life's
        // leases), and this space is new.
        let mounts = masters
            .call(
                yuebing_rpc::deadline_after(Instant::now(), cfg.deadline),
                |m| {
                    let specs = specs.clone();
                    async move { m.mount(specs).await }
                },
            )
            .await?;
        if mounts.len() != specs.len() {
            return Err(Error::Internal {
                reason: format!(
                    "the master answered {} mount ids for {} ranges",
                    mounts.len(),
                    specs.len()
                ),
            });
        }
        let first = space
            .zip(specs.into_iter().next())
            .zip(mounts.first().copied())
            .map(|((buffer, spec), mount)| (buffer, spec, mount));
        let inner = Arc::new(Inner {
            peers: Peers::new(engine.clone(), cfg.avoid_failed_for),
            metrics: telemetry::ClientMetrics::new(cfg.metrics.clone()),
            cache: cache::LeaseCache::new(cfg.lease_cache, cfg.lease_margin),
            grants: grants::Grants::new(cfg.grant_size),
            cfg,
            id,
            engine,
            masters,
            staging,
            spaces: Spaces::new(first),
            closed: std::sync::atomic::AtomicBool::new(false),
            runner: tasks::Runner::default(),
            standing: heartbeat::Standing::new(),
        });
        let heartbeat = heartbeat::Heartbeat::start(Arc::downgrade(&inner), inner.engine.handle());
        Ok(Client {
            inner,
            _heartbeat: Arc::new(heartbeat),
        })
    }

    /// Leaves the cluster gracefully: the master places no new replica in this client's store
    /// space from now on (its replicas stay readable while this process serves them, and the
    /// master drops the ranges after its unmount grace, or sooner when the pings stop), and
    /// the heartbeat stops. Calls after it may still read and write through other nodes.
    /// Dropping the last handle without `close` removes the client's space at the master at
    /// once (see `Drop`), its replicas with it.
    pub fn close(
        &self,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let opts = opts.into();
        self.call(move |c| async move {
            c.inner
                .closed
                .store(true, std::sync::atomic::Ordering::Release);
            c._heartbeat.stop().await;
            let until = c.until(&opts);
            let stopped = c.inner.runner.stop_all();
            tasks::report_stopped(&c.inner, stopped, until).await;
            let _turn = c.inner.spaces.turn().await;
            let mounts = c.inner.spaces.mounts();
            for mount in mounts {
                let unmounted = c
                    .master(until, |m, _| async move { m.unmount(mount).await }, "")
                    .await;
                match unmounted {
                    // Gone already (expired, or replaced by a remount the master applied).
                    Ok(()) | Err(Error::SegmentNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    }

    /// The client's id at the master.
    pub fn id(&self) -> ClientId {
        self.inner.id
    }

    /// The client's Transfer Engine (register memory here for `put_from` / `get_into`).
    ///
    /// Register that memory local-only, the default of [`TransferEngine::register`] and
    /// [`TransferEngine::allocate`]: the store's transfers to and from it are initiated by this
    /// client (it writes a `put_from` source into the nodes' store space, and reads objects from
    /// there into a `get_into` destination), so peers never need to reach it, and memory
    /// exported for peers could be written by any of them.
    pub fn engine(&self) -> &TransferEngine {
        &self.inner.engine
    }

    /// The address of the client's staging buffer, when it has one: local-only memory, which
    /// peers cannot reach. For tests that check so.
    #[doc(hidden)]
    pub fn staging_addr(&self) -> Option<u64> {
        self.inner.staging.addr()
    }

    /// Stores `value` under `key`, copied into registered memory when the call is made (the
    /// one copy a value in plain memory needs; the call runs when awaited). With
    /// [`Write::Put`] an existing key is `ObjectAlreadyExists`, its value unchanged; with
    /// [`Write::Upsert`] it is replaced.
    pub fn put(
        &self,
        key: impl Into<String>,
        value: &[u8],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.put_parts(key, &[value], opts)
    }

    /// Stores the concatenation of `parts` under `key` (a value gathered from buffers that are
    /// not contiguous, such as per-layer KV blocks), copied once into registered memory when
    /// the call is made; otherwise as [`Client::put`].
    pub fn put_parts(
        &self,
        key: impl Into<String>,
        parts: &[&[u8]],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        let staged = args::key(&key).and_then(|()| self.stage(parts));
        self.call(move |c| async move {
            let source = Source::Staged(staged?);
            c.put_from_until(&key, source, &opts, c.until(&opts)).await
        })
    }

    /// Stores `len` bytes of registered memory at `addr` under `key`, without a copy (as
    /// [`Client::put`] otherwise). The memory is read until the call ends, only by this
    /// client's engine: register it local-only (see [`Client::engine`]).
    pub fn put_from(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            let source = Source::gathered(&[(addr, len)])?;
            c.put_from_until(&key, source, &opts, c.until(&opts)).await
        })
    }

    /// The value of `key`.
    pub fn get(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<u8>>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            args::key(&key)?;
            let until = c.until(&opts);
            let at = c.location(&key, &opts, until).await?;
            let (c, key) = (&c, &key);
            c.read_at(key, at, until, |at, until| async move {
                c.read_to_vec(key, &at.list, at.sent, until).await
            })
            .await
        })
    }

    /// Reads `key` into registered memory at `addr` (room for `len` bytes), without a copy;
    /// returns the object's size. A buffer smaller than the object is `InvalidParams` and
    /// nothing is written. The memory is written until the call ends, only by this client's
    /// engine: register it local-only (see [`Client::engine`]).
    pub fn get_into(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            args::key(&key)?;
            args::buffer(addr, len)?;
            let until = c.until(&opts);
            let at = c.location(&key, &opts, until).await?;
            let (c, key) = (&c, &key);
            c.read_at(key, at, until, |at, until| async move {
                fits(key, &at.list, len)?;
                let whole = [Fragment::whole(addr, at.list.size)];
                c.inner
                    .read_object(key, &at.list, at.sent, &whole, until, None)
                    .await?;
                Ok(at.list.size)
            })
            .await
        })
    }

    /// Whether `key` exists (completed).
    pub fn exist(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        self.key_call(key, opts, |m, k| async move { m.exist(&k).await })
    }

    /// The size of `key`.
    pub fn get_size(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        self.key_call(key, opts, |m, k| async move { m.get_size(&k).await })
    }

    /// A call of this client: `op` gets a clone of it, and its future runs inside the
    /// client's runtime (its engine's) whoever polls it. The future borrows nothing, so every
    /// caller (a task, a blocking thread, a callback, C, Python) takes this one form.
    pub(crate) fn call<T, Fut>(
        &self,
        op: impl FnOnce(Client) -> Fut,
    ) -> impl Future<Output = T> + Send + 'static
    where
        Fut: Future<Output = T> + Send + 'static,
    {
        yuebing_rpc::in_runtime(self.inner.engine.handle(), op(self.clone()))
    }

    /// Registered scratch memory holding the concatenation of `parts` (checked to be a
    /// storable size), filled now.
    pub(crate) fn stage(&self, parts: &[&[u8]]) -> Result<Arc<staging::Scratch>> {
        let len = parts
            .iter()
            .try_fold(0u64, |n, p| n.checked_add(p.len() as u64))
            .ok_or_else(|| Error::params("the parts' lengths overflow"))?;
        args::size(len)?;
        // Registering a temporary buffer (when staging is full) may need the runtime.
        let _entered = self.inner.engine.handle().enter();
        let scratch = self.inner.staging.get(&self.inner.engine, len)?;
        scratch.fill(parts)?;
        Ok(scratch)
    }

    /// When a call with `opts` must end: at most a year from now (the rpc layer's farthest
    /// deadline), so `Duration::MAX` means "no deadline to speak of".
    pub(crate) fn until(&self, opts: &Options) -> Instant {
        let wanted = opts.deadline.unwrap_or(self.inner.cfg.deadline);
        yuebing_rpc::deadline_after(Instant::now(), wanted)
    }

    /// One master call (with failover) bounded by `until`; `arg` is handed to it owned.
    pub(crate) async fn master<T, F, Fut>(&self, until: Instant, f: F, arg: &str) -> Result<T>
    where
        F: Fn(MasterClient, String) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.inner
            .masters
            .call(until, |m| f(m.until(until), arg.to_string()))
            .await
    }

    /// One master call `f` on `key` (checked first), with failover, bounded by `opts`'
    /// deadline, inside the client's runtime.
    pub(crate) fn key_call<T, F, Fut>(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
        f: F,
    ) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: Fn(MasterClient, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send,
    {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            args::key(&key)?;
            c.master(c.until(&opts), f, &key).await
        })
    }

    /// `get_replica_list` for `key` (checked first; granting its lease), and when it was
    /// sent: the lease counts from then.
    async fn replica_list(&self, key: &str, until: Instant) -> Result<(Instant, ReplicaList)> {
        args::key(key)?;
        let sent = Instant::now();
        let list = self
            .master(
                until,
                |m, k| async move { m.get_replica_list(&k).await },
                key,
            )
            .await?;
        Ok((sent, list))
    }

    /// Reads an object into scratch memory and returns a copy of its bytes.
    pub(crate) async fn read_to_vec(
        &self,
        key: &str,
        list: &ReplicaList,
        sent: Instant,
        until: Instant,
    ) -> Result<Vec<u8>> {
        let scratch = self.inner.staging.get(&self.inner.engine, list.size)?;
        let keep = Some(scratch.clone());
        let whole = [Fragment::whole(scratch.addr(), list.size)];
        self.inner
            .read_object(key, list, sent, &whole, until, keep)
            .await?;
        let mut out = vec![0u8; list.size as usize];
        scratch.read(&mut out)?;
        Ok(out)
    }

    /// A put of `source` (an upsert with [`Write::Upsert`]): into a grant when it takes one
    /// (see [`grants`]), else placed at the master.
    async fn put_from_until(
        &self,
        key: &str,
        source: Source,
        opts: &Options,
        until: Instant,
    ) -> Result<()> {
        args::key(key)?;
        let started = Instant::now();
        let (cfg, write) = (self.put_config(opts), opts.write);
        args::put_config(&cfg)?;
        let len = source.len();
        // This client reads its own writes: no location of the old value outlives the put.
        let _writing = self.inner.cache.writing(Some(vec![key.to_string()]));
        if self.inner.grants.takes(len, &cfg) {
            if let Some(held) = self.grant_place(len, until).await {
                let item = (key.to_string(), source);
                let mut outcome = self
                    .put_in_grants(vec![(&item, held)], &cfg, write, until)
                    .await?;
                let source = item.1;
                match outcome.pop().flatten() {
                    Some(Ok(())) => {
                        self.inner
                            .metrics
                            .took(telemetry::Op::Put, len, started.elapsed());
                        return Ok(());
                    }
                    Some(Err(e)) => return Err(e),
                    // The grant is gone there: placed at the master instead.
                    None => {
                        return self
                            .put_placed_one(key, source, &cfg, write, until, started)
                            .await
                    }
                }
            }
        }
        self.put_placed_one(key, source, &cfg, write, until, started)
            .await
    }

    /// A put of `source` placed at the master: start, transfers, then end (or revoke).
    async fn put_placed_one(
        &self,
        key: &str,
        source: Source,
        cfg: &PutConfig,
        write: Write,
        until: Instant,
        started: Instant,
    ) -> Result<()> {
        let len = source.len();
        let descs = self
            .master(
                until,
                |m, k| {
                    let cfg = cfg.clone();
                    async move { m.put_start(&k, len, &cfg, write).await }
                },
                key,
            )
            .await?;
        let (pieces, keep) = source.place();
        match self
            .inner
            .write_replicas(&pieces, &descs, until, keep)
            .await
        {
            Ok(()) => {
                self.master(until, |m, k| async move { m.put_end(&k).await }, key)
                    .await?;
                self.inner
                    .metrics
                    .took(telemetry::Op::Put, len, started.elapsed());
                Ok(())
            }
            Err(e) => {
                let _ = self
                    .master(until, |m, k| async move { m.put_revoke(&k).await }, key)
                    .await;
                Err(e)
            }
        }
    }

    /// The replica settings of a put with `opts`: its own, or the client's when it sets none.
    pub(crate) fn put_config(&self, opts: &Options) -> PutConfig {
        opts.put
            .clone()
            .unwrap_or_else(|| self.inner.cfg.put.clone())
    }
}

/// Whether `[addr, addr + len)` lies inside `space` (its start and length), without overflow.
fn inside(space: Option<(u64, u64)>, addr: u64, len: u64) -> bool {
    space.is_some_and(|(base, size)| {
        let (end, limit) = (addr.checked_add(len), base.checked_add(size));
        addr >= base && end.zip(limit).is_some_and(|(end, limit)| end <= limit)
    })
}

/// A buffer of `len` bytes must hold the whole object, or nothing is read into it.
pub(crate) fn fits(key: &str, list: &ReplicaList, len: u64) -> Result<()> {
    if list.size > len {
        return Err(Error::params(format!(
            "buffer of {len} bytes is smaller than {key:?} ({} bytes)",
            list.size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::inside;

    #[test]
    fn an_own_node_replica_must_lie_inside_the_store_space() {
        let space = Some((0x1000, 0x1000));
        assert!(inside(space, 0x1000, 0x1000));
        assert!(inside(space, 0x1800, 0x10));
        assert!(!inside(space, 0xff0, 0x20), "starts before");
        assert!(
            !inside(space, 0x1ff0, 0x20),
            "ends after (staging may be there)"
        );
        assert!(!inside(space, u64::MAX - 4, 16), "wraps");
        assert!(!inside(None, 0x1000, 1), "a pure client has no store space");
    }
}
