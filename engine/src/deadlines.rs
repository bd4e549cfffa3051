//! Task deadlines on one timer.
//!
//! A tokio timer per task costs more than its bookkeeping: registering one earlier than what
//! the runtime's timer driver sleeps for wakes the thread parked on the driver (an eventfd write
//! and a context switch), on every small transfer. A task's deadline is usually far beyond its
//! run time (30 s by default against µs–ms), so one sweeper task armed at the earliest deadline
//! serves them all, and a new task wakes it only when its deadline is earlier than that.
//!
//! Time is read through tokio's clock ([`now`]), so that a test can pause and advance it
//! (`tokio::time::pause`); deadlines themselves stay `std::time::Instant`s, as in the API.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

/// The deadlines of an engine's running tasks.
pub(crate) struct Deadlines {
    shared: Arc<Shared>,
    handle: Handle,
}

struct Shared {
    state: Mutex<State>,
    /// An earlier deadline was filed, or the engine is gone.
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// By deadline, then filing order.
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
    next_id: u64,
    /// The deadline the sweeper sleeps until (`None`: it waits for one).
    armed: Option<Instant>,
    started: bool,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Deadlines {
    /// Deadlines whose sweeper runs on `handle` (started with the first deadline).
    pub(crate) fn new(handle: Handle) -> Self {
        Deadlines {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Notify::new(),
            }),
            handle,
        }
    }

    /// A future that resolves at `at`; dropping it withdraws the deadline.
    pub(crate) fn expiry(&self, at: Instant) -> Expiry {
        let (tx, rx) = oneshot::channel();
        let mut state = self.shared.lock();
        let key = (at, state.next_id);
        state.next_id += 1;
        state.waiting.insert(key, tx);
        let earlier = state.armed.is_none_or(|armed| at < armed);
        if earlier {
            state.armed = Some(at);
        }
        let start = !state.started;
        state.started = true;
        drop(state);
        if start {
            self.handle.spawn(sweep(self.shared.clone()));
        } else if earlier {
            self.shared.changed.notify_one();
        }
        Expiry {
            rx,
            key,
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_one();
    }
}

/// Resolves when its deadline passed.
pub(crate) struct Expiry {
    rx: oneshot::Receiver<()>,
    key: (Instant, u64),
    shared: Arc<Shared>,
}

impl Future for Expiry {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // An error means the sweeper is gone with the engine: nothing would expire this any
        // more, so it counts as expired rather than hanging.
        Pin::new(&mut self.rx).poll(cx).map(|_| ())
    }
}

impl Drop for Expiry {
    fn drop(&mut self) {
        // Closed first, so that dropping the sender below does not wake this receiver's task:
        // that task is usually the one dropping it, and carries on with other work; a wake-up
        // from its own poll would make tokio reschedule it and wake a second worker for it.
        self.rx.close();
        self.shared.lock().waiting.remove(&self.key);
    }
}

/// The time now, on tokio's clock (paused and advanced by tests) where there is one.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Fires passed deadlines, then sleeps until the earliest one left or an earlier one is filed.
async fn sweep(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut state = shared.lock();
            if state.closed {
                state.waiting.clear();
                return;
            }
            let now = now();
            while let Some(entry) = state.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                // The task may have finished meanwhile: nobody listens then.
                let _ = entry.remove().send(());
            }
            let next = state.waiting.keys().next().map(|k| k.0);
            state.armed = next;
            next
        };
        // A deadline filed from here on notifies a permit that `notified` then finds.
        let changed = shared.changed.notified();
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = changed => {}
                }
            }
            None => changed.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deadlines_fire_in_order_and_an_earlier_one_is_not_held_up() {
        let deadlines = Deadlines::new(Handle::current());
        let start = Instant::now();
        let late = deadlines.expiry(start + Duration::from_secs(30));
        let mid = deadlines.expiry(start + Duration::from_millis(300));
        let early = deadlines.expiry(start + Duration::from_millis(50));
        early.await;
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50), "fired early: {took:?}");
        assert!(
            took < Duration::from_millis(250),
            "the early one waited: {took:?}"
        );
        mid.await;
        assert!(start.elapsed() >= Duration::from_millis(300));
        let pending = tokio::time::timeout(Duration::from_millis(50), late).await;
        assert!(pending.is_err(), "a 30 s deadline did not fire");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_expiry_is_withdrawn() {
        let deadlines = Deadlines::new(Handle::current());
        let at = Instant::now() + Duration::from_millis(20);
        drop(deadlines.expiry(at));
        assert!(deadlines.shared.lock().waiting.is_empty());
        let after = deadlines.expiry(at + Duration::from_millis(20));
        after.await;
        assert!(deadlines.shared.lock().waiting.is_empty());
    }

    /// Counts its wake-ups.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_an_expiry_does_not_wake_its_own_task() {
        let deadlines = Deadlines::new(Handle::current());
        let counting = Arc::new(Counting(Default::default()));
        let waker = std::task::Waker::from(counting.clone());
        let mut expiry = deadlines.expiry(Instant::now() + Duration::from_secs(30));
        let pending = Pin::new(&mut expiry).poll(&mut Context::from_waker(&waker));
        assert!(pending.is_pending());
        drop(expiry);
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
