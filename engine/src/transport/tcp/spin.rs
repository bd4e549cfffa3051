//! Spin, then park: a short wait for a lone request's answer (or, on the target, for the next
//! lone request) polled without parking the thread.
//!
//! A parked worker sleeps in `epoll_wait` and must be woken by the kernel when the bytes
//! arrive; on a virtual machine that wake-up (an idle vCPU to resume) costs about as much as
//! the loopback round trip itself. For a request that waits alone, the answer is due within a
//! round trip, so the waiter first yields to the runtime for up to a short budget: each yield
//! lets the worker poll the I/O driver without sleeping and run whatever else is ready. Only
//! then does it park as usual. Under load the spin ends at once: the caller stops as soon as
//! it is no longer alone, and a target spins only after a request marked lone, until the next
//! request is there.
//!
//! This pays only where the spinning thread is the one that polls the I/O driver: a runtime
//! with one worker ([`super::spin_budget`] turns it off elsewhere), and a future polled by that
//! runtime, as its task or on a current-thread runtime's own thread
//! ([`Job::can_spin`](crate::transport::Job::can_spin) is false for other callers).

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Awaits `fut`, yielding instead of parking for up to `budget` while `alone()` holds.
pub(crate) async fn spin_then_park<F: Future>(
    fut: F,
    budget: Duration,
    mut alone: impl FnMut() -> bool,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    if budget.is_zero() {
        return fut.await;
    }
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = futures::poll!(fut.as_mut()) {
            return v;
        }
        if start.elapsed() >= budget || !alone() {
            return fut.await;
        }
        // Deferred, not woken: a tokio worker polls its I/O driver without sleeping before it
        // runs this task again.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn returns_what_the_future_returns_spinning_or_not() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = tx.send(7u32);
        });
        // The answer comes after the budget: the wait parks and still gets it.
        let got = spin_then_park(rx, Duration::from_micros(100), || true).await;
        assert_eq!(got.unwrap(), 7);
        assert_eq!(
            spin_then_park(async { 3 }, Duration::ZERO, || true).await,
            3
        );
    }

    #[tokio::test]
    async fn stops_spinning_once_no_longer_alone() {
        let checks = AtomicUsize::new(0);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiter = spin_then_park(rx, Duration::from_secs(60), || {
            checks.fetch_add(1, Ordering::Relaxed) < 3
        });
        let sender = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(());
        };
        let (got, ()) = tokio::join!(waiter, sender);
        got.unwrap();
        // Alone for three checks, then not: the fourth check ends the spin and the wait parks
        // (a spin that went on would check thousands of times in 20 ms). Fewer only if the
        // answer came first, on a machine that stalled this thread for 20 ms.
        let n = checks.load(Ordering::Relaxed);
        assert!((1..=4).contains(&n), "{n} checks");
    }
}
