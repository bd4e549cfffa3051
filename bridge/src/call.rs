//! [`Call`]: one bridged operation, the analogue of Mooncake's `Lazy<T>`: wait for it
//! (`syncAwait`), hand it a callback (`start(cb)`), or cancel it.
//!
//! Each call's task owns a once-guard: whatever ends the task (its result, a cancel, the bridge
//! shutting down, or the runtime dropping the task unrun), the outcome is delivered exactly
//! once, and only after the operation's future was dropped, so its work has stopped (a
//! transfer touches the caller's memory no more) by the time anyone hears of it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::bridge::Shared;
use crate::error::{Error, Result};

/// A callback, called once with the outcome.
type Callback<T> = Box<dyn FnOnce(Result<T>) + Send + 'static>;

enum Slot<T> {
    /// Under way; nobody asked for the outcome yet (or a waiter sleeps on the condvar).
    Running,
    /// Under way; this callback gets the outcome.
    Callback(Callback<T>),
    /// Ended; the outcome waits for `wait` or `then`.
    Done(Result<T>),
    /// The outcome was handed over.
    Taken,
}

/// What a call's task and its handle share.
pub(crate) struct CallState<T> {
    slot: Mutex<Slot<T>>,
    done: Condvar,
    /// Set with `Slot::Done`: what a waiter spins on before it sleeps.
    ended: AtomicBool,
    cancel: CancellationToken,
    shared: Arc<Shared>,
}

impl<T: Send + 'static> CallState<T> {
    fn new(shared: &Arc<Shared>, slot: Slot<T>, cancel: CancellationToken) -> Arc<CallState<T>> {
        Arc::new(CallState {
            slot: Mutex::new(slot),
            done: Condvar::new(),
            ended: AtomicBool::new(false),
            cancel,
            shared: shared.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the outcome: wakes a waiter, or hands a registered callback to the pool.
    fn complete(&self, outcome: Result<T>) {
        let mut slot = self.lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Running => {
                *slot = Slot::Done(outcome);
                self.ended.store(true, Ordering::Release);
                self.done.notify_all();
            }
            Slot::Callback(cb) => {
                drop(slot);
                self.shared.run_callback(Box::new(move || cb(outcome)));
            }
            // Completed twice cannot happen (one guard per call); keep the first.
            other => *slot = other,
        }
    }
}

/// Delivers the outcome exactly once: by [`Deliver::deliver`], or, if the task is dropped
/// unrun or unfinished (a runtime shutting down drops its tasks), as `Shutdown` from `Drop`.
struct Deliver<T: Send + 'static> {
    state: Option<Arc<CallState<T>>>,
}

impl<T: Send + 'static> Deliver<T> {
    fn deliver(mut self, outcome: Result<T>) {
        if let Some(state) = self.state.take() {
            state.complete(outcome);
            state.shared.call_ended();
        }
    }
}

impl<T: Send + 'static> Drop for Deliver<T> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            state.complete(Err(Error::Shutdown));
            state.shared.call_ended();
        }
    }
}

/// A call's operation and its once-guard, dropped in that order whatever ends the task (its
/// end, a cancel, or the runtime dropping it unrun or mid-way): nobody hears of the outcome
/// before the operation's future, and so its work, is gone.
struct Work<F, T: Send + 'static> {
    op: Option<Pin<Box<F>>>,
    guard: Option<Deliver<T>>,
}

impl<F, T: Send + 'static> Work<F, T> {
    /// Drops the operation's future (its work stops); `Some(message)` if that panicked.
    fn stop(&mut self) -> Option<String> {
        drop_caught(&mut self.op)
    }
}

impl<F, T: Send + 'static> Drop for Work<F, T> {
    fn drop(&mut self) {
        let panicked = self.stop();
        if let (Some(message), Some(guard)) = (panicked, self.guard.take()) {
            guard.deliver(Err(Error::Panicked { message }));
        }
        self.guard = None;
    }
}

/// Runs a counted-in call's `op` as a task: its once-guard delivers the outcome (and counts the
/// call out) whatever ends the task.
fn launch<T, F, E>(state: Arc<CallState<T>>, op: F)
where
    T: Send + 'static,
    F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    E: Into<Error>,
{
    let shared = state.shared.clone();
    let (cancel, shutdown) = (state.cancel.clone(), shared.stopping());
    let mut work = Work {
        op: Some(Box::pin(AssertUnwindSafe(op).catch_unwind())),
        guard: Some(Deliver { state: Some(state) }),
    };
    let task = async move {
        let outcome = match work.op.as_mut() {
            None => Err(Error::Shutdown),
            Some(op) => tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(Error::Canceled),
                _ = shutdown.cancelled() => Err(Error::Shutdown),
                r = op => match r {
                    Ok(r) => r.map_err(Into::into),
                    Err(panic) => Err(Error::Panicked { message: panic_message(&*panic) }),
                },
            },
        };
        // The operation's future (and its work) is gone before anyone hears of the outcome;
        // a panic while it is dropped is the operation's panic.
        let outcome = match work.stop() {
            None => outcome,
            Some(message) => Err(Error::Panicked { message }),
        };
        if let Some(guard) = work.guard.take() {
            guard.deliver(outcome);
        }
    };
    // A runtime that shut down drops the task unrun: the guard then delivers `Shutdown`.
    drop(shared.handle().spawn(task));
}

/// When a wait of `limit` from now ends; a limit too long to represent is a year (the rpc
/// layer's farthest deadline): no limit to speak of.
fn deadline(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .unwrap_or_else(|| now + yuebing_rpc::FARTHEST_DEADLINE)
}

/// Why [`Call::spawn_then`] started nothing.
#[derive(Debug)]
pub(crate) enum NotStarted<R> {
    /// The bridge takes no calls (shut down, or a forked child).
    Bridge(Error),
    /// The caller's `ready` step failed.
    Ready(R),
}

/// Empties `slot` (an operation's future: its work stops); `Some(message)` if dropping its
/// value panicked.
pub(crate) fn drop_caught<X>(slot: &mut Option<X>) -> Option<String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| *slot = None))
        .err()
        .map(|panic| panic_message(&*panic))
}

/// What a panic carried, for [`Error::Panicked`].
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// One bridged operation under way. Consume it with [`Call::wait`], [`Call::wait_timeout`],
/// [`Call::then`], or [`Call::wait_for`] in slices; [`Call::cancel`] (or a [`Canceller`] from
/// another thread) stops it. Dropping it unconsumed cancels it, as dropping a future does.
#[must_use = "a call dropped unconsumed is cancelled"]
pub struct Call<T: Send + 'static> {
    state: Arc<CallState<T>>,
    consumed: bool,
}

/// Cancels a [`Call`] from anywhere; idempotent, and a no-op once the call ended.
#[derive(Clone)]
pub struct Canceller(CancellationToken);

impl Canceller {
    /// A canceller for a call not started yet (see `Bridge::spawn_then`).
    pub(crate) fn detached() -> Canceller {
        Canceller(CancellationToken::new())
    }

    /// Asks the call to stop; its outcome becomes `Canceled` once its work has stopped.
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

impl<T: Send + 'static> Call<T> {
    /// A call under way that nobody waits for yet, and its state for the task.
    fn running(shared: &Arc<Shared>) -> (Arc<CallState<T>>, Call<T>) {
        let state = CallState::new(shared, Slot::Running, CancellationToken::new());
        let call = Call {
            state: state.clone(),
            consumed: false,
        };
        (state, call)
    }

    /// Starts `op` as a task on `shared`'s runtime.
    pub(crate) fn spawn<F, E>(shared: &Arc<Shared>, op: F) -> Call<T>
    where
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
        E: Into<Error>,
    {
        let (state, call) = Call::running(shared);
        match shared.call_started() {
            Ok(()) => launch(state, op),
            Err(e) => state.complete(Err(e)),
        }
        call
    }

    /// Starts `op`, counted in already (its count handed over by `counted`), as a task on
    /// `shared`'s runtime: the rest of a call that began on its caller's thread.
    pub(crate) fn spawn_counted<F, E>(
        shared: &Arc<Shared>,
        op: F,
        counted: crate::here::Counted,
    ) -> Call<T>
    where
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
        E: Into<Error>,
    {
        let (state, call) = Call::running(shared);
        // The task's once-guard counts it out from here on.
        counted.hand_over();
        launch(state, op);
        call
    }

    /// Starts `op` with its callback already in place, so that its outcome always reaches the
    /// callback pool before the call counts as ended (a shutdown then waits for the callback),
    /// and never runs on this thread. `ready` runs once the call is counted in and before it
    /// starts (to publish a handle that cancels it). `Err` if the bridge cannot take calls or
    /// `ready` fails: then nothing starts and `cb` is dropped uncalled. `cancel` stops the call.
    pub(crate) fn spawn_then<F, E, R>(
        shared: &Arc<Shared>,
        op: F,
        cancel: &Canceller,
        ready: impl FnOnce() -> std::result::Result<(), R>,
        cb: impl FnOnce(Result<T>) + Send + 'static,
    ) -> std::result::Result<(), NotStarted<R>>
    where
        F: Future<Output = std::result::Result<T, E>> + Send + 'static,
        E: Into<Error>,
    {
        shared.call_started().map_err(NotStarted::Bridge)?;
        if let Err(e) = ready() {
            shared.call_ended();
            return Err(NotStarted::Ready(e));
        }
        let state = CallState::new(shared, Slot::Callback(Box::new(cb)), cancel.0.clone());
        launch(state, op);
        Ok(())
    }

    /// A handle that cancels this call from any thread.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.state.cancel.clone())
    }

    /// Asks the call to stop (see [`Canceller::cancel`]).
    pub fn cancel(&self) {
        self.state.cancel.cancel();
    }

    /// Whether the outcome is known.
    pub fn is_done(&self) -> bool {
        matches!(*self.state.lock(), Slot::Done(_))
    }

    /// Blocks until the call ends and returns its outcome (Mooncake's `syncAwait`). From a
    /// plain thread, or from a task of another runtime (its worker is handed back to that
    /// runtime meanwhile with `block_in_place`). From a thread of this bridge (a runtime
    /// worker, a callback) it returns [`Error::WouldBlockBridge`] at once and cancels the call,
    /// whose work may then still run for a moment: check [`crate::Bridge::may_block`] first,
    /// or use [`crate::Bridge::block_on`] and the blocking client, which start nothing there.
    pub fn wait(mut self) -> Result<T> {
        self.consumed = true;
        self.wait_until(None)
    }

    /// As [`Call::wait`], for at most `limit`: then the call is cancelled and, once its work
    /// has stopped, [`Error::Timeout`] returned.
    pub fn wait_timeout(mut self, limit: Duration) -> Result<T> {
        self.consumed = true;
        self.wait_until(Some(deadline(limit)))
    }

    /// Waits at most `limit` for the outcome without giving the call up: `Ok(outcome)` once it
    /// ended (the call is then consumed), or `Err(self)` — still running, not cancelled — when
    /// `limit` passed first (as [`std::sync::Arc::try_unwrap`] hands back what it could not
    /// take). For callers that must do something between waits: a Python caller waits in
    /// slices and runs its signal handlers in between, cancelling on Ctrl-C.
    ///
    /// ```ignore
    /// let outcome = loop {
    ///     match call.wait_for(Duration::from_millis(50)) {
    ///         Ok(outcome) => break outcome,
    ///         Err(running) => call = running, // check something, maybe `call.cancel()`
    ///     }
    /// };
    /// ```
    ///
    /// From a thread of this bridge it is [`Call::wait`]'s refusal: the call is cancelled and
    /// `Ok(Err(Error::WouldBlockBridge))` returned at once (in a forked child, whose bridge
    /// threads are gone, `Ok(Err(Error::Forked { .. }))`). Unlike every other outcome, that
    /// one comes *without* waiting for the call's work to stop: the cancelled operation may
    /// still read or write the memory it was given for a moment. A caller that lent memory
    /// to the call must not release it on that outcome: check [`crate::Bridge::may_block`]
    /// before starting the call (as [`crate::Bridge::block_on`] does), or wait only from
    /// threads that are not the bridge's.
    pub fn wait_for(mut self, limit: Duration) -> std::result::Result<Result<T>, Call<T>> {
        if let Err(e) = self.state.shared.may_block() {
            self.consumed = true;
            self.cancel();
            return Ok(Err(e));
        }
        match crate::bridge::block_here(|| self.sleep(Some(deadline(limit)))) {
            Some(outcome) => {
                self.consumed = true;
                Ok(outcome)
            }
            None => Err(self),
        }
    }

    /// Waits for the outcome in `slice`s, calling `between` after each the call did not end
    /// in (for a caller that must do something meanwhile: a Python caller runs its signal
    /// handlers). An `Err` from `between` cancels the call and is returned once the call's
    /// work has stopped: from then on nothing touches the memory the call was given.
    pub fn wait_in_slices<B>(
        self,
        slice: Duration,
        between: impl FnMut() -> std::result::Result<(), B>,
    ) -> std::result::Result<Result<T>, B> {
        self.wait_sliced(Some(slice), between, false)
    }

    /// [`Call::wait_in_slices`]; `None`: [`Call::wait`]; with `now`, `between` runs once
    /// before the first slice too.
    pub(crate) fn wait_sliced<B>(
        mut self,
        slice: Option<Duration>,
        mut between: impl FnMut() -> std::result::Result<(), B>,
        now: bool,
    ) -> std::result::Result<Result<T>, B> {
        let Some(slice) = slice else {
            return Ok(self.wait());
        };
        let mut step = now;
        loop {
            if step {
                if let Err(stopped) = between() {
                    self.cancel();
                    // The outcome (Canceled, or the end that raced the cancel) comes only once
                    // the call's work has stopped.
                    let _ = self.wait();
                    return Err(stopped);
                }
            }
            step = true;
            match self.wait_for(slice) {
                Ok(outcome) => return Ok(outcome),
                Err(running) => self = running,
            }
        }
    }

    fn wait_until(&self, until: Option<Instant>) -> Result<T> {
        if let Err(e) = self.state.shared.may_block() {
            self.cancel();
            return Err(e);
        }
        if let Some(outcome) = crate::bridge::block_here(|| self.sleep(until)) {
            return outcome;
        }
        // The limit passed: cancel; the outcome comes once the call's work stopped.
        self.cancel();
        let outcome =
            crate::bridge::block_here(|| self.sleep(None)).unwrap_or(Err(Error::Shutdown));
        match outcome {
            Err(Error::Canceled) => Err(Error::Timeout),
            outcome => outcome,
        }
    }

    /// Sleeps until the outcome is there (and takes it) or `until` passed (then returns `None`;
    /// the call goes on).
    fn sleep(&self, until: Option<Instant>) -> Option<Result<T>> {
        let waiting = crate::waiter::Waiting::enter();
        let waiter = self.state.shared.waiter();
        waiter.watch(&waiting, &self.state.ended, until);
        let mut slot = self.state.lock();
        loop {
            if matches!(*slot, Slot::Done(_)) {
                return match std::mem::replace(&mut *slot, Slot::Taken) {
                    Slot::Done(outcome) => Some(outcome),
                    _ => None,
                };
            }
            match until {
                None => {
                    slot = self
                        .state
                        .done
                        .wait(slot)
                        .unwrap_or_else(|p| p.into_inner());
                }
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    slot = self
                        .state
                        .done
                        .wait_timeout(slot, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// Hands the outcome to `cb` (Mooncake's `start(cb)`): called exactly once, on the bridge's
    /// callback pool (never a runtime worker), with no bridge lock held; at once (on the pool)
    /// if the call already ended. After the bridge shut down (or in a forked child) there is
    /// no pool, and `cb` runs on a thread started for it, never on this one. A panic in `cb`
    /// is caught and logged.
    pub fn then(mut self, cb: impl FnOnce(Result<T>) + Send + 'static) {
        self.consumed = true;
        let mut slot = self.state.lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Running => *slot = Slot::Callback(Box::new(cb)),
            Slot::Done(outcome) => {
                drop(slot);
                self.state
                    .shared
                    .run_callback(Box::new(move || cb(outcome)));
            }
            other => *slot = other,
        }
    }
}

impl<T: Send + 'static> Drop for Call<T> {
    fn drop(&mut self) {
        if !self.consumed {
            self.state.cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::{Bridge, BridgeConfig, Call, Error};

    /// Sets its flag when dropped: the operation's work has stopped.
    struct Stopped(Arc<AtomicBool>);

    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A call that ends with `x` after `after` (or never, for `None`); `stopped` is set once
    /// its work is gone.
    fn slow(b: &Bridge, after: Option<Duration>, x: u64, stopped: &Arc<AtomicBool>) -> Call<u64> {
        let work = Stopped(stopped.clone());
        b.call(async move {
            let _work = work;
            tokio::time::sleep(after.unwrap_or(Duration::from_secs(600))).await;
            Ok::<u64, Error>(x)
        })
    }

    /// Waits in `slice`s; returns the outcome and how many slices ran out first.
    fn in_slices(mut call: Call<u64>, slice: Duration) -> (crate::Result<u64>, u32) {
        let mut missed = 0;
        loop {
            match call.wait_for(slice) {
                Ok(outcome) => return (outcome, missed),
                Err(running) => {
                    call = running;
                    missed += 1;
                }
            }
        }
    }

    #[test]
    fn wait_for_hands_a_running_call_back_uncancelled() {
        let b = Bridge::new(BridgeConfig::default()).unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let call = slow(&b, Some(Duration::from_millis(200)), 7, &stopped);
        let (outcome, missed) = in_slices(call, Duration::from_millis(20));
        // Neither a slice running out nor handing the call back cancelled it.
        assert_eq!(outcome.unwrap(), 7);
        assert!(missed >= 2, "{missed}");
        // An ended call's outcome comes at the first slice.
        let done = b.call(async { Ok::<u64, Error>(3) });
        while !done.is_done() {
            std::thread::yield_now();
        }
        assert_eq!(in_slices(done, Duration::from_millis(20)), (Ok(3), 0));
    }

    #[test]
    fn a_call_cancelled_between_slices_ends_once_its_work_stopped() {
        let b = Bridge::new(BridgeConfig::default()).unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let call = slow(&b, None, 0, &stopped);
        let call = call.wait_for(Duration::from_millis(10)).unwrap_err();
        assert!(!stopped.load(Ordering::SeqCst));
        call.cancel();
        let start = Instant::now();
        let (outcome, _) = in_slices(call, Duration::from_millis(10));
        assert_eq!(outcome.unwrap_err(), Error::Canceled);
        assert!(stopped.load(Ordering::SeqCst), "the outcome came first");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn then_after_shutdown_never_runs_on_the_callers_thread() {
        let b = Bridge::new(BridgeConfig::default()).unwrap();
        let call = b.call(async { Ok::<u64, Error>(1) });
        while !call.is_done() {
            std::thread::yield_now();
        }
        b.shutdown().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        call.then(move |outcome| {
            tx.send((std::thread::current().id(), outcome)).unwrap();
        });
        let (ran_on, outcome) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, std::thread::current().id(), "ran inline");
        assert_eq!(outcome, Ok(1));
    }

    /// Panics when dropped, as a future holding it is.
    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("dropped");
        }
    }

    #[test]
    fn a_panic_while_an_operation_is_dropped_is_delivered_as_panicked() {
        let b = Bridge::new(BridgeConfig::default()).unwrap();
        let bomb = PanicsOnDrop;
        let call = b.call(async move {
            let _bomb = bomb;
            std::future::pending::<()>().await;
            Ok::<u64, Error>(0)
        });
        call.cancel();
        match call.wait_timeout(Duration::from_secs(10)) {
            Err(Error::Panicked { message }) => assert_eq!(message, "dropped"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wait_for_on_a_bridge_thread_is_refused_and_cancels() {
        let b = Bridge::new(BridgeConfig::default()).unwrap();
        let stopped = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (inner, flag) = (b.clone(), stopped.clone());
        b.call(async { Ok::<u64, Error>(1) }).then(move |_| {
            let call = slow(&inner, None, 0, &flag);
            let refused = call.wait_for(Duration::from_secs(5)).map_err(|_| ());
            tx.send(refused).unwrap();
        });
        let refused = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(refused, Ok(Err(Error::WouldBlockBridge)));
        let start = Instant::now();
        while !stopped.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(10), "not cancelled");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
