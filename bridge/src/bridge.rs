//! [`Bridge`]: the runtime the bridged calls run on (owned, or a supplied multi-thread one), its
//! callback pool, and the rules of blocking and shutdown.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio_util::sync::CancellationToken;

use crate::call::Call;
use crate::callbacks::{bridge_of_thread, mark_thread, run_caught, CallbackPool, Job};
use crate::error::{Error, Result};
use crate::here::Here;
use crate::waiter::{Waiter, WaiterCell};

/// How a [`Bridge`] is built; `BridgeConfig::default()` suits one process.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// Runtime worker threads (`yuebing-rt-N`). Default 2.
    pub worker_threads: usize,
    /// Callback-pool threads (`yuebing-cb-N`): more let a slow callback delay fewer others.
    /// Default 2.
    pub callback_threads: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            worker_threads: 2,
            callback_threads: 2,
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Most threads of either kind a bridge starts (a larger count is refused, not attempted).
pub(crate) const MAX_THREADS: usize = 1024;

/// What the calls of a bridge share with it: the runtime handle, the callback pool, the count
/// of calls under way, and the shutdown signal.
pub(crate) struct Shared {
    id: u64,
    pid: u32,
    handle: Handle,
    callbacks: CallbackPool,
    stopping: CancellationToken,
    closed: AtomicBool,
    pending: Mutex<usize>,
    idle: Condvar,
    /// Held for the whole of a shutdown, so that a second one returns only when it is done.
    stopping_now: Mutex<()>,
    /// How blocking callers wait for their calls.
    waiter: WaiterCell,
}

impl Shared {
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    pub(crate) fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    pub(crate) fn waiter(&self) -> Waiter {
        self.waiter.get()
    }

    pub(crate) fn check_pid(&self) -> Result<()> {
        match crate::pid::current() == self.pid {
            true => Ok(()),
            false => Err(Error::Forked { parent: self.pid }),
        }
    }

    /// Whether calls can be made: the bridge is not shut down and this is not a forked child.
    pub(crate) fn usable(&self) -> Result<()> {
        self.check_pid()?;
        match self.closed.load(Ordering::Acquire) {
            true => Err(Error::Shutdown),
            false => Ok(()),
        }
    }

    /// Counts a new call in, unless the bridge is closed (or this is a forked child).
    pub(crate) fn call_started(&self) -> Result<()> {
        self.check_pid()?;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Shutdown);
        }
        *pending += 1;
        Ok(())
    }

    /// Counts a call out (its outcome was recorded or its callback handed to the pool).
    pub(crate) fn call_ended(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.idle.notify_all();
        }
    }

    /// Runs `job` on the callback pool; where there is none (the bridge shut down, so every
    /// call ended; or a forked child, where the pool's threads do not exist), on a thread
    /// started for it: only `then` of a call made after that gets here, and its caller may be
    /// a runtime worker or hold a lock the callback takes, so it never runs on the caller's
    /// thread. Only if no thread can be started (the process is out of them) does it run here,
    /// with an error logged.
    pub(crate) fn run_callback(&self, job: Job) {
        let job = match self.check_pid() {
            Ok(()) => match self.callbacks.run(job) {
                Ok(()) => return,
                Err(job) => job,
            },
            Err(_) => job,
        };
        let job = std::sync::Arc::new(Mutex::new(Some(job)));
        let on_thread = job.clone();
        let started = std::thread::Builder::new()
            .name("yuebing-cb-late".into())
            .spawn(move || {
                let job = on_thread.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(job) = job {
                    run_caught(job);
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "no thread for a late callback; it runs on the caller's");
            let job = job.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(job) = job {
                run_caught(job);
            }
        }
    }

    /// Whether this thread may block waiting for a call of this bridge.
    pub(crate) fn may_block(&self) -> Result<()> {
        self.check_pid()?;
        let own_thread = bridge_of_thread() == Some(self.id);
        let own_runtime = Handle::try_current().is_ok_and(|h| h.id() == self.handle.id());
        match own_thread || own_runtime {
            true => Err(Error::WouldBlockBridge),
            false => Ok(()),
        }
    }
}

/// Runs the blocking `wait` here: on a worker of another multi-thread runtime it is handed back
/// to that runtime meanwhile (`block_in_place`); elsewhere (a plain thread, a current-thread
/// runtime's thread, which then waits with it) it simply blocks.
pub(crate) fn block_here<R>(wait: impl FnOnce() -> R) -> R {
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

/// The runtime a bridge owns, shut down with it.
struct Owned(Mutex<Option<Runtime>>);

/// A bridge between yuebing's async core and callers that are not async Rust. Cheap to clone;
/// the last clone dropped shuts it down (see [`Bridge::shutdown`]).
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    runtime: Owned,
    /// Whether the runtime is the bridge's own (blocking calls may then run on their callers'
    /// threads, see `here`).
    owns_runtime: bool,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("id", &self.inner.shared.id)
            .finish_non_exhaustive()
    }
}

impl Bridge {
    /// A bridge with a multi-thread runtime and a callback pool of its own.
    pub fn new(config: BridgeConfig) -> Result<Bridge> {
        if config.worker_threads > MAX_THREADS || config.callback_threads > MAX_THREADS {
            return Err(Error::Start {
                reason: format!("at most {MAX_THREADS} worker and callback threads: {config:?}"),
            });
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let start = |e: std::io::Error| Error::Start {
            reason: e.to_string(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.max(1))
            .thread_name_fn(|| {
                static N: AtomicU64 = AtomicU64::new(0);
                format!("yuebing-rt-{}", N.fetch_add(1, Ordering::Relaxed))
            })
            .on_thread_start(move || mark_thread(id))
            .enable_all()
            .build()
            .map_err(start)?;
        let handle = runtime.handle().clone();
        Bridge::build(id, handle, Some(runtime), config.callback_threads)
    }

    /// A bridge whose calls run on `handle`'s runtime, which must be multi-thread (a
    /// current-thread runtime runs only inside its `block_on`: [`Error::CurrentThreadRuntime`]).
    /// The bridge keeps its own callback pool; shutting it down does not stop the runtime.
    pub fn with_handle(handle: Handle, callback_threads: usize) -> Result<Bridge> {
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(Error::CurrentThreadRuntime);
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Bridge::build(id, handle, None, callback_threads)
    }

    fn build(
        id: u64,
        handle: Handle,
        runtime: Option<Runtime>,
        callback_threads: usize,
    ) -> Result<Bridge> {
        let callbacks = match CallbackPool::start(id, callback_threads) {
            Ok(pool) => pool,
            Err(e) => {
                // Dropping a runtime inside another would panic: stop it without waiting.
                if let Some(rt) = runtime {
                    rt.shutdown_background();
                }
                return Err(Error::Start {
                    reason: e.to_string(),
                });
            }
        };
        let shared = Arc::new(Shared {
            id,
            pid: crate::pid::current(),
            handle,
            callbacks,
            stopping: CancellationToken::new(),
            closed: AtomicBool::new(false),
            pending: Mutex::new(0),
            idle: Condvar::new(),
            stopping_now: Mutex::new(()),
            waiter: WaiterCell::new(Waiter::default()),
        });
        Ok(Bridge {
            inner: Arc::new(Inner {
                shared,
                owns_runtime: runtime.is_some(),
                runtime: Owned(Mutex::new(runtime)),
            }),
        })
    }

    /// The process's default bridge ([`BridgeConfig::default`]), started on first use and
    /// never shut down.
    pub fn global() -> Result<Bridge> {
        static GLOBAL: OnceLock<std::result::Result<Bridge, Error>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Bridge::new(BridgeConfig::default()))
            .clone()
    }

    /// The runtime the bridged calls run on (start engines, clients and masters there with
    /// their `start_on`).
    pub fn handle(&self) -> &Handle {
        &self.inner.shared.handle
    }

    /// Starts `op` on the bridge's runtime and returns its [`Call`].
    pub fn call<T, E, F>(&self, op: F) -> Call<T>
    where
        T: Send + 'static,
        E: Into<Error>,
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    {
        Call::spawn(&self.inner.shared, op)
    }

    /// Starts `op` with `cb` already in place (see `Call::spawn_then`): `Ok` means `cb` runs
    /// exactly once on the callback pool, `Err` that it never runs.
    pub(crate) fn spawn_then<T, E, F, R>(
        &self,
        op: F,
        cancel: &crate::Canceller,
        ready: impl FnOnce() -> std::result::Result<(), R>,
        cb: impl FnOnce(Result<T>) + Send + 'static,
    ) -> std::result::Result<(), crate::call::NotStarted<R>>
    where
        T: Send + 'static,
        E: Into<Error>,
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    {
        Call::spawn_then(&self.inner.shared, op, cancel, ready, cb)
    }

    /// Whether calls can be made now: [`Error::Shutdown`] after a shutdown, [`Error::Forked`]
    /// in a forked child. The synchronous engine calls check it, since their work runs on the
    /// bridge's runtime too.
    pub fn usable(&self) -> Result<()> {
        self.inner.shared.usable()
    }

    /// [`Error::Forked`] in a forked child, even after a shutdown (unlike [`Bridge::usable`]):
    /// what a child inherited (registrations, the shared-memory transport's status page, the
    /// staging memory) is its parent's, and is left untouched there.
    pub fn not_forked(&self) -> Result<()> {
        self.inner.shared.check_pid()
    }

    /// Runs `op` and blocks until it ends (see [`Call::wait`]). On a bridge that owns its
    /// runtime, a thread outside every runtime runs it itself, inside the runtime's context
    /// (what it spawns runs on the runtime's workers): that spares the two thread hand-offs of
    /// a spawned call. Elsewhere (a task of another runtime, a supplied runtime) it is spawned
    /// on the bridge's runtime and waited for. From a thread of this
    /// bridge it returns [`Error::WouldBlockBridge`] without starting `op`.
    pub fn block_on<T, E, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        E: Into<Error>,
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    {
        match self.block_on_sliced(|| op, None, || Ok::<(), std::convert::Infallible>(())) {
            Ok(outcome) => outcome,
            Err(never) => match never {},
        }
    }

    /// As [`Bridge::block_on`] for the operation `start` makes, calling `between` after each
    /// `slice` (`None`: never) the call did not end in (one that runs on this thread is
    /// spawned once its first slice ran out, so that it goes on meanwhile), for callers that must do something
    /// while they wait (a Python caller runs its signal handlers). An `Err` from `between`
    /// stops the call and is returned once its work has stopped (the operation's future
    /// dropped, or the spawned call's outcome in): from then on nothing touches the memory
    /// the call was given. Where the bridge takes no calls (shut down, a forked child) or this
    /// thread must not block on it, `start` is not even called: making an operation may have
    /// effects (a put copies its value into staging memory a forked child shares).
    pub fn block_on_sliced<T, E, F, B>(
        &self,
        start: impl FnOnce() -> F,
        slice: Option<Duration>,
        between: impl FnMut() -> std::result::Result<(), B>,
    ) -> std::result::Result<Result<T>, B>
    where
        T: Send + 'static,
        E: Into<Error>,
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    {
        if let Err(refused) = self.usable().and_then(|()| self.may_block()) {
            return Ok(Err(refused));
        }
        let op = start();
        // Only on a runtime the bridge owns: its timers work, and it stops only once every
        // call ended (a supplied one may be shut down under a call that runs here).
        if !(self.inner.owns_runtime && crate::here::possible()) {
            return self.call(op).wait_sliced(slice, between, false);
        }
        match crate::here::run(&self.inner.shared, op, slice) {
            Here::Ended(outcome) => Ok(outcome),
            // The call goes on spawned, still counted in, so that it is not held up while
            // `between` runs (a signal handler that makes a blocking call would wait for it
            // here); a slice has passed, so `between` runs at once.
            Here::Going(op, counted) => {
                let call = Call::spawn_counted(&self.inner.shared, op, counted);
                call.wait_sliced(slice, between, true)
            }
        }
    }

    /// Starts a call with `start` and waits for it, unless this thread must not block on the
    /// bridge: then nothing is started ([`Error::WouldBlockBridge`]).
    pub(crate) fn wait_for<T: Send + 'static>(&self, start: impl FnOnce() -> Call<T>) -> Result<T> {
        self.may_block()?;
        start().wait()
    }

    /// How threads waiting for this bridge's calls watch for the outcome before they sleep
    /// ([`Waiter::default`] unless set).
    pub fn waiter(&self) -> Waiter {
        self.inner.shared.waiter()
    }

    /// Sets how threads waiting for this bridge's calls watch before they sleep, from their
    /// next wait on (for measurements: the default suits callers).
    pub fn set_waiter(&self, waiter: Waiter) {
        self.inner.shared.waiter.set(waiter);
    }

    /// Whether this thread may block on this bridge ([`Error::WouldBlockBridge`] or
    /// [`Error::Forked`] if not).
    pub fn may_block(&self) -> Result<()> {
        self.inner.shared.may_block()
    }

    /// Shuts the bridge down: new calls get [`Error::Shutdown`], the calls under way are
    /// cancelled (each outcome, `Shutdown`, delivered once its work stopped), the owned
    /// runtime stops, and it returns once every pending callback has returned; no callback
    /// runs after it. From a thread of this bridge it returns [`Error::WouldBlockBridge`] (it
    /// would wait for itself). Repeating it is harmless.
    pub fn shutdown(&self) -> Result<()> {
        self.inner.shared.may_block()?;
        let runtime = self.inner.runtime.take();
        block_here(|| shut_down(&self.inner.shared, runtime));
        Ok(())
    }
}

impl Owned {
    fn take(&self) -> Option<Runtime> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The shutdown sequence (see [`Bridge::shutdown`]). Blocking; one at a time.
fn shut_down(shared: &Shared, runtime: Option<Runtime>) {
    let _one_at_a_time = shared
        .stopping_now
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    shared.closed.store(true, Ordering::Release);
    shared.stopping.cancel();
    if shared.check_pid().is_err() {
        // A forked child: the runtime's and the pool's threads exist only in the parent, so
        // nothing here can be joined or waited for.
        std::mem::forget(runtime);
        return;
    }
    {
        let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        while *pending > 0 {
            pending = shared
                .idle
                .wait_timeout(pending, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
    if let Some(rt) = runtime {
        stop_runtime(rt);
    }
    shared.callbacks.close();
}

/// Stops an owned runtime, waiting a few seconds for its blocking tasks. A runtime cannot be
/// stopped (nor dropped) from inside a runtime: on a thread of its own then, handed over only
/// once that thread runs, so that if it cannot start the runtime is still here to be stopped
/// without waiting.
fn stop_runtime(rt: Runtime) {
    let stop = |rt: Runtime| rt.shutdown_timeout(Duration::from_secs(5));
    if Handle::try_current().is_err() {
        return stop(rt);
    }
    let (tx, rx) = std::sync::mpsc::channel::<Runtime>();
    let stopper = std::thread::Builder::new()
        .name("yuebing-rt-stop".into())
        .spawn(move || {
            if let Ok(rt) = rx.recv() {
                stop(rt);
            }
        });
    match stopper {
        Ok(t) => {
            if let Err(unsent) = tx.send(rt) {
                unsent.0.shutdown_background();
            }
            let _ = t.join();
        }
        Err(e) => {
            tracing::error!(error = %e, "the bridge runtime is stopped without waiting");
            rt.shutdown_background();
        }
    }
}

impl Drop for Inner {
    /// The last handle is gone: shut down, in the background when this thread must not block
    /// (a bridge thread, or inside a runtime).
    fn drop(&mut self) {
        let runtime = self.runtime.take();
        let must_not_block = self.shared.may_block().is_err()
            || Handle::try_current().is_ok()
            || crate::callbacks::in_foreign_call();
        if !must_not_block {
            shut_down(&self.shared, runtime);
            return;
        }
        // The runtime is handed over only once the thread runs: if it cannot start, the
        // runtime is still here to be stopped without waiting (dropping it here would panic).
        let (tx, rx) = std::sync::mpsc::channel::<Option<Runtime>>();
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("yuebing-bridge-stop".into())
            .spawn(move || shut_down(&shared, rx.recv().unwrap_or(None)));
        match spawned {
            Ok(_) => {
                if let Err(unsent) = tx.send(runtime) {
                    if let Some(rt) = unsent.0 {
                        rt.shutdown_background();
                    }
                }
            }
            Err(e) => {
                self.shared.closed.store(true, Ordering::Release);
                self.shared.stopping.cancel();
                if let Some(rt) = runtime {
                    rt.shutdown_background();
                }
                tracing::error!(error = %e, "the bridge could not shut down in the background");
            }
        }
    }
}
