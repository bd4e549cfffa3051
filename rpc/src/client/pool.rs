//! A pool of connections to one endpoint (coro_io's `client_pool`).
//!
//! deadpool creates connections and bounds their number; the pool keeps every live connection
//! shared (a tarpc connection multiplexes many calls) and picks, per call, the connection with
//! the fewest calls, the oldest among equals. A call that finds a connection open below
//! `grow_threshold` calls never waits for a connect: when every open one carries that many, it
//! is sent on the least-loaded one while the pool grows in the background (up to its size, one
//! connect at a time, pausing after one fails). On a cold pool the calls wait for the
//! connections being opened, counted in their load, so a burst spreads over them as on a warm
//! pool, even after its first connections opened: a call that finds every one carrying
//! `grow_threshold` calls opens another (see `members.rs`). Connects
//! run on tasks of the pool's runtime, side by side. A watcher per connection drops it when
//! its driver task ends, so the next call opens a replacement.
//!
//! The watcher can only act once the connection's close has been read. A call that meets a
//! pooled connection whose peer has already gone (it is found closed at send, or closes before
//! the reply) drops that stale connection itself and is sent once more on a fresh one, within
//! its deadline, when it was never written or is idempotent (see `Pool::attempt`).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Object, PoolError, RecycleError, RecycleResult, Timeouts};
use tarpc::client::RpcError;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::config::{CallOptions, PoolConfig};
use super::connection::Connection;
use super::members::{Choice, Entry, Members, Opener, Outcome, Reserved, Taken};
use super::ServiceClient;
use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::metrics::Metrics;

/// deadpool's side: how to create and check a connection.
struct Manager<C> {
    endpoint: Endpoint,
    config: PoolConfig,
    handle: Handle,
    next_id: AtomicU64,
    _client: PhantomData<fn() -> C>,
}

impl<C: ServiceClient> managed::Manager for Manager<C> {
    type Type = Arc<Connection<C>>;
    type Error = Error;

    async fn create(&self) -> Result<Arc<Connection<C>>, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        Connection::open(&self.endpoint, &self.config, &self.handle, id).await
    }

    async fn recycle(
        &self,
        conn: &mut Arc<Connection<C>>,
        _: &managed::Metrics,
    ) -> RecycleResult<Error> {
        if conn.is_alive() {
            Ok(())
        } else {
            Err(RecycleError::message("connection closed"))
        }
    }
}

/// An open connection and its deadpool slot.
struct Live<C: ServiceClient> {
    conn: Arc<Connection<C>>,
    slot: Object<Manager<C>>,
}

impl<C: ServiceClient> Entry for Live<C> {
    type Handle = Arc<Connection<C>>;
    fn handle(&self) -> Arc<Connection<C>> {
        self.conn.clone()
    }
    fn id(&self) -> u64 {
        self.conn.id
    }
    fn is_alive(&self) -> bool {
        self.conn.is_alive()
    }
    fn opened(&self) -> Instant {
        self.conn.opened
    }
}

impl<C: ServiceClient> Live<C> {
    /// Leaves deadpool, freeing the slot for a new connection.
    fn discard(self) {
        drop(self.conn);
        let _ = Object::take(self.slot);
    }
}

struct Inner<C: ServiceClient> {
    endpoint: Endpoint,
    config: PoolConfig,
    handle: Handle,
    slots: managed::Pool<Manager<C>>,
    members: Mutex<Members<Live<C>>>,
    in_flight: AtomicUsize,
    metrics: Metrics,
    born: Instant,
    last_used_ms: AtomicU64,
    /// Cancelled when the pool is dropped: stops its connects under way and its watchers.
    stop: CancellationToken,
}

impl<C: ServiceClient> Drop for Inner<C> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Connections to one endpoint, shared by every call; cheap to clone.
pub struct Pool<C: ServiceClient> {
    inner: Arc<Inner<C>>,
}

impl<C: ServiceClient> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Pool {
            inner: self.inner.clone(),
        }
    }
}

impl<C: ServiceClient> std::fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("endpoint", &self.inner.endpoint)
            .field("status", &self.status())
            .finish()
    }
}

/// A pool's state at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    /// Live connections.
    pub live_connections: usize,
    /// Calls in flight through this pool.
    pub in_flight: usize,
    /// Calls started on each live connection so far, by connection id.
    pub calls_per_connection: Vec<(u64, u64)>,
}

/// Why one try of a call failed, and whether it may have been executed.
pub(crate) struct Failure {
    pub(crate) err: Error,
    pub(crate) maybe_executed: bool,
}

impl Failure {
    fn never_sent(err: Error) -> Self {
        Failure {
            err,
            maybe_executed: false,
        }
    }

    /// Whether the request may be sent again: only if retrying can help, and only if it was not
    /// executed or executing it twice is harmless.
    pub(crate) fn may_retry(&self, idempotent: bool) -> bool {
        self.err.is_retryable() && (!self.maybe_executed || idempotent)
    }
}

impl<C: ServiceClient> Pool<C> {
    /// A pool for `endpoint` whose tasks run on the current runtime. Connects lazily, or ahead
    /// of demand when `config.min_connections > 0`.
    ///
    /// # Panics
    /// Outside a tokio runtime (like `tokio::spawn`); use [`Pool::new_on`] with a handle there.
    pub fn new(endpoint: Endpoint, config: PoolConfig) -> Self {
        Self::new_on(endpoint, config, Handle::current())
    }

    /// A pool whose connection tasks are spawned on `handle`.
    pub fn new_on(endpoint: Endpoint, config: PoolConfig, handle: Handle) -> Self {
        let max = config.max_connections.max(1);
        let manager = Manager {
            endpoint: endpoint.clone(),
            config: config.clone(),
            handle: handle.clone(),
            next_id: AtomicU64::new(0),
            _client: PhantomData,
        };
        // The builder only fails without a runtime for timeouts; one is always given.
        let slots = managed::Pool::builder(manager)
            .max_size(max)
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .expect("deadpool builder with a runtime cannot fail");
        let members = Members::new(config.max_backoff);
        let metrics = Metrics::exported(
            config.metrics.clone(),
            crate::metrics::Side::Client,
            config.service.clone(),
        );
        let pool = Pool {
            inner: Arc::new(Inner {
                endpoint,
                config,
                handle,
                slots,
                members: Mutex::new(members),
                in_flight: AtomicUsize::new(0),
                metrics,
                born: crate::clock::now(),
                last_used_ms: AtomicU64::new(0),
                stop: CancellationToken::new(),
            }),
        };
        pool.top_up();
        pool
    }

    /// The runtime this pool's connections, timers and tasks live on.
    pub(crate) fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    /// The endpoint this pool connects to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// Per-method statistics of calls made through this pool.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Live connections and calls in flight.
    pub fn status(&self) -> PoolStatus {
        let members = self.lock_members();
        PoolStatus {
            live_connections: members.loads().filter(|l| l.1).count(),
            in_flight: self.inner.in_flight.load(Ordering::Acquire),
            calls_per_connection: members.loads().map(|(id, _, n)| (id, n)).collect(),
        }
    }

    /// Calls in flight through this pool.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// How long since a call last started (or since the pool was made).
    pub fn idle_for(&self) -> Duration {
        let now_ms = self.inner.born.elapsed().as_millis() as u64;
        Duration::from_millis(
            now_ms.saturating_sub(self.inner.last_used_ms.load(Ordering::Relaxed)),
        )
    }

    /// Opens connections until `min_connections` are live; returns how many are live.
    pub async fn warm_up(&self) -> Result<usize, Error> {
        let (openers, under_way) = self.with_members(|members| {
            let (openers, closed) = members.fill(self.inner.config.min_connections, self.max());
            ((openers, members.opening()), closed)
        });
        self.start(openers);
        let mut failed = None;
        for mut done in under_way {
            let outcome = done.wait_for(Option::is_some).await.map(|o| o.clone());
            if let Ok(Some(Err(e))) = outcome {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) if self.live_count() < self.inner.config.min_connections.min(self.max()) => {
                Err(e)
            }
            _ => Ok(self.live_count()),
        }
    }

    /// Calls `f` with a client and a context carrying the default deadline, like coro_io's
    /// `send_request`: `pool.call(|c, ctx| async move { c.echo(ctx, x).await }).await`.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        self.call_with(CallOptions::default(), f).await
    }

    /// Like [`Pool::call`], with a deadline, a method name and idempotency. A request that was
    /// provably not executed (connect failed, refused, overloaded) is tried again; one that may
    /// have been executed only if it is idempotent. Tries back off exponentially and stop at
    /// the deadline. A pooled connection that turns out dead (say, after a server restart) is
    /// dropped, and the call moves to a fresh connection at once, by the same rule, without
    /// using up a retry.
    ///
    /// The call runs inside the pool's runtime (its connections, timers and tasks live there),
    /// whoever polls it: a task of another runtime, or a plain thread with any executor.
    pub async fn call_with<T, F, Fut>(&self, opts: CallOptions, f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        crate::entered::in_runtime(&self.inner.handle, self.call_in_runtime(opts, f)).await
    }

    async fn call_in_runtime<T, F, Fut>(&self, opts: CallOptions, mut f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let cfg = &self.inner.config;
        let now = crate::clock::now();
        let deadline = crate::clock::after(now, opts.timeout.unwrap_or(cfg.default_timeout));
        let idempotent = opts.is_idempotent_for(cfg);
        let mut record = self
            .inner
            .metrics
            .record(opts.method.unwrap_or("call"), now);
        self.touch(now);
        let mut tries = 0;
        let result = loop {
            match self.attempt(&mut f, deadline, idempotent).await {
                Ok(v) => break Ok(v),
                Err(fail) => {
                    tries += 1;
                    let pause = cfg.backoff(tries);
                    if !fail.may_retry(idempotent)
                        || tries > cfg.max_retries
                        || crate::clock::now() + pause >= deadline
                    {
                        break Err(fail.err);
                    }
                    tracing::debug!(endpoint = %self.inner.endpoint, error = %fail.err, tries, "retrying");
                    tokio::time::sleep(pause).await;
                }
            }
        };
        record.set(&result);
        result
    }

    /// One try: pick or open a connection, send, await the reply.
    ///
    /// A pooled connection may have died without the pool noticing yet (the server restarted
    /// and its close is still unread). When a call on a connection taken from the pool fails
    /// because the connection ended before its reply (found closed at send, or closed while the
    /// call waited), that connection is stale: it leaves the pool at once, and the call is sent
    /// once more on a fresh connection within the same deadline, without back-off and without
    /// counting as one of the caller's retries, if [`Failure::may_retry`] allows (it was never
    /// written, or it is idempotent). A call on a connection opened for it gets no such second
    /// chance here: that connection failing says the server failed, which the caller's retry
    /// policy handles.
    pub(crate) async fn attempt<T, F, Fut>(
        &self,
        f: &mut F,
        deadline: Instant,
        idempotent: bool,
    ) -> Result<T, Failure>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let _counted = InFlight::new(&self.inner.in_flight);
        let (pooled, reserved) = match self.choose(None) {
            (Taken::Open(conn), reserved) => (conn, reserved),
            (Taken::Opening(done), reserved) => {
                let waited = self.wait_open(done, reserved, None);
                let (conn, reserved) = self.connect_until(deadline, waited).await?;
                return self.try_on(&conn, reserved, f, deadline).await;
            }
        };
        let stale = match self.try_on(&pooled, reserved, f, deadline).await {
            Err(fail) if matches!(fail.err, Error::ConnectionLost { .. }) => fail,
            done => return done,
        };
        let noticed = now();
        self.evict(&pooled);
        if !stale.may_retry(idempotent) {
            return Err(stale);
        }
        tracing::debug!(endpoint = %self.inner.endpoint, conn = pooled.id, error = %stale.err, "pooled connection was stale; trying a fresh one");
        let fresh = match self.choose(Some(noticed)) {
            (Taken::Open(conn), reserved) => Ok((conn, reserved)),
            (Taken::Opening(done), reserved) => {
                let waited = self.wait_open(done, reserved, Some(noticed));
                self.connect_until(deadline, waited).await
            }
        };
        let (conn, reserved) = fresh?;
        self.try_on(&conn, reserved, f, deadline)
            .await
            .map_err(|mut fail| {
                fail.maybe_executed |= stale.maybe_executed;
                fail
            })
    }

    /// Sends one call on `conn` and awaits its reply.
    async fn try_on<T, F, Fut>(
        &self,
        conn: &Arc<Connection<C>>,
        reserved: Reserved,
        f: &mut F,
        deadline: Instant,
    ) -> Result<T, Failure>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        // `reserved` counts the call on the connection until this returns.
        reserved.sent();
        let mut ctx = tarpc::context::current();
        ctx.deadline = deadline;
        match f(conn.client.clone(), ctx).await {
            Ok(v) => Ok(v),
            Err(RpcError::Send(e)) => Err(Failure::never_sent(Error::ConnectionLost {
                reason: format!("request not sent: {e}"),
            })),
            Err(e) => {
                let err = Error::from_rpc_error(e);
                Err(Failure {
                    maybe_executed: !err.never_executed(),
                    err,
                })
            }
        }
    }

    /// Waits for `connect` until `deadline`; a failure means nothing was sent.
    async fn connect_until<R>(
        &self,
        deadline: Instant,
        connect: impl Future<Output = Result<R, Error>>,
    ) -> Result<R, Failure> {
        let until = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(until, connect).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(Failure::never_sent(e)),
            Err(_) => Err(Failure::never_sent(Error::Timeout)),
        }
    }

    /// Notes that a call started at `now` (for the registry's idle sweep).
    pub(crate) fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.inner.born).as_millis() as u64;
        self.inner.last_used_ms.store(ms, Ordering::Relaxed);
    }

    fn max(&self) -> usize {
        self.inner.config.max_connections.max(1)
    }

    fn lock_members(&self) -> MutexGuard<'_, Members<Live<C>>> {
        self.inner.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the member list under the lock. The entries `f` took off the list leave
    /// deadpool before the lock is released, so that the list and deadpool always agree on how
    /// many connections there are: a call that sees room on the list finds a free slot in
    /// deadpool too, instead of failing its connect because the slot is still taken.
    /// (`Object::take` only takes deadpool's own lock, briefly, never ours.)
    fn with_members<R>(&self, f: impl FnOnce(&mut Members<Live<C>>) -> (R, Vec<Live<C>>)) -> R {
        let mut members = self.lock_members();
        let (r, gone) = f(&mut members);
        gone.into_iter().for_each(Live::discard);
        drop(members);
        r
    }

    fn live_count(&self) -> usize {
        self.with_members(Members::live)
    }

    /// Chooses a connection for one call and reserves its share there (see `members.rs`);
    /// with `fresh`, one opened since then where there is room. Starts the connect the choice
    /// asks for: the new connection chosen, or a grow in the background.
    fn choose(&self, fresh: Option<Instant>) -> (Taken<Arc<Connection<C>>>, Reserved) {
        let threshold = self.inner.config.grow_threshold;
        let choice = self.with_members(|m| m.choose(threshold, self.max(), fresh, now()));
        let Choice {
            taken,
            reserved,
            open,
        } = choice;
        self.start(open);
        (taken, reserved)
    }

    /// Waits for the connect the call chose. If it fails, the call falls back to an open
    /// connection (fresh since `fresh`, if given), else waits for another one being opened,
    /// else fails with the connect's error: the pool grows only as far as the server lets it.
    async fn wait_open(
        &self,
        mut done: tokio::sync::watch::Receiver<Outcome<Arc<Connection<C>>>>,
        mut reserved: Reserved,
        fresh: Option<Instant>,
    ) -> Result<(Arc<Connection<C>>, Reserved), Error> {
        loop {
            let outcome = match done.wait_for(Option::is_some).await {
                Ok(o) => o.clone(),
                Err(_) => None,
            };
            let err = match outcome {
                Some(Ok(conn)) => return Ok((conn, reserved)),
                Some(Err(e)) => e,
                None => Error::Connect {
                    endpoint: self.inner.endpoint.to_string(),
                    reason: "the pool's connect task stopped (its runtime shut down)".into(),
                },
            };
            drop(reserved);
            // Each failed connect has left the list, and a fallback opens none: this ends.
            match self.with_members(|m| m.fallback(fresh)) {
                Some((Taken::Open(conn), r)) => return Ok((conn, r)),
                Some((Taken::Opening(next), r)) => (done, reserved) = (next, r),
                None => return Err(err),
            }
        }
    }

    /// Drops `conn` from the pool now, without waiting for its watcher, and frees its slot.
    fn evict(&self, conn: &Connection<C>) {
        self.with_members(|m| ((), m.remove(conn.id).into_iter().collect()));
    }

    /// Starts each connect on a task of the pool's runtime; the calls that chose it wait for
    /// its outcome. The task holds the pool only weakly: when the pool is dropped, its connects
    /// under way stop (their sockets close), and one that ends after the pool is gone is
    /// closed rather than kept.
    fn start(&self, openers: impl IntoIterator<Item = Opener<Arc<Connection<C>>>>) {
        for opener in openers {
            let pool = Arc::downgrade(&self.inner);
            let stop = self.inner.stop.clone();
            let connect = self.connect();
            self.inner.handle.spawn(async move {
                let outcome = tokio::select! {
                    // Dropping `opener` tells any waiter the connect stopped.
                    _ = stop.cancelled() => return,
                    outcome = connect => outcome,
                };
                let Some(pool) = upgrade(&pool) else {
                    if let Ok(live) = outcome {
                        live.discard();
                    }
                    return;
                };
                let report = outcome.as_ref().map(|l| l.conn.clone()).map_err(Clone::clone);
                pool.with_members(|m| {
                    ((), m.opened(opener.key, outcome, now()).into_iter().collect())
                });
                if let Ok(conn) = &report {
                    pool.watch(conn);
                } else if let Err(e) = &report {
                    tracing::debug!(endpoint = %pool.inner.endpoint, error = %e, "could not open a connection");
                }
                // The waiters may all be gone (their deadline passed): nobody to tell.
                let _ = opener.done.send(Some(report));
            });
        }
    }

    /// Opens one more connection through deadpool, which bounds their number. The future
    /// holds deadpool and the endpoint, not the pool.
    fn connect(&self) -> impl Future<Output = Result<Live<C>, Error>> + Send + 'static {
        let timeouts = Timeouts {
            wait: Some(Duration::ZERO),
            create: Some(self.inner.config.connect_timeout * 2),
            recycle: Some(Duration::from_secs(1)),
        };
        let slots = self.inner.slots.clone();
        let endpoint = self.inner.endpoint.clone();
        async move {
            let slot = slots
                .timeout_get(&timeouts)
                .await
                .map_err(|e| pool_error(&endpoint, e))?;
            let conn: Arc<Connection<C>> = Arc::clone(&slot);
            Ok(Live { conn, slot })
        }
    }

    /// Drops the connection from the pool when its dispatch ends, and keeps the pre-warmed
    /// number of connections open. The watcher holds only the connection's death notice and
    /// the pool weakly: a connection the pool lets go of (the pool dropped, an eviction) is
    /// closed by that, not kept open by its watcher.
    fn watch(&self, conn: &Connection<C>) {
        let dead = conn.dead();
        let stop = self.inner.stop.clone();
        let pool = Arc::downgrade(&self.inner);
        self.inner.handle.spawn(async move {
            tokio::select! {
                _ = dead.cancelled() => {}
                _ = stop.cancelled() => return,
            }
            if let Some(pool) = upgrade(&pool) {
                let live = pool.live_count();
                tracing::debug!(endpoint = %pool.inner.endpoint, live, "connection closed");
                pool.top_up();
            }
        });
    }

    /// Begins opening connections until `min_connections` are open or being opened.
    fn top_up(&self) {
        let min = self.inner.config.min_connections;
        if min == 0 {
            return;
        }
        let openers = self.with_members(|m| m.fill(min, self.max()));
        self.start(openers);
    }
}

fn pool_error(endpoint: &Endpoint, e: PoolError<Error>) -> Error {
    match e {
        PoolError::Backend(e) => e,
        other => Error::Connect {
            endpoint: endpoint.to_string(),
            reason: other.to_string(),
        },
    }
}

fn upgrade<C: ServiceClient>(weak: &Weak<Inner<C>>) -> Option<Pool<C>> {
    weak.upgrade().map(|inner| Pool { inner })
}

fn now() -> Instant {
    crate::clock::now()
}

/// Counts a call in a pool's in-flight total while alive.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::AcqRel);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
