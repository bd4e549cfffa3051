//! Polling a future inside a runtime's context, so that what it creates (sockets, timers)
//! registers with that runtime's drivers whoever polls it: a task of another runtime, or a plain
//! thread with any executor. The runtime's own threads then drive the I/O and the timers.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

/// A future that runs `fut`, entering `handle`'s runtime at every poll: what it creates (sockets, timers,
/// tasks) lives on that runtime, whoever polls it. The runtime must be driven by its own
/// threads (a multi-thread runtime, or a current-thread one inside its `block_on`).
///
/// A plain future, not an `async fn`: an `async fn` would keep `fut` twice in its state (the
/// argument, and the pinned local it is polled as), and every call of the store client is
/// wrapped in one or more of these, so its future would grow by its whole size at each level
/// (a put's future was 20 KiB, three times its body, and was copied whole on every move).
pub fn in_runtime<F: Future>(handle: &Handle, fut: F) -> InRuntime<F> {
    InRuntime {
        handle: handle.clone(),
        fut,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`in_runtime`].
    #[must_use = "futures do nothing unless polled"]
    pub struct InRuntime<F> {
        handle: Handle,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _runtime = this.handle.enter();
        this.fut.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wrapper holds the future it runs once: every store call is wrapped once or twice,
    /// and each copy would grow what the call's caller moves and boxes by the whole future.
    #[test]
    fn the_wrapped_future_is_kept_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let big = async {
            let scratch = [7u8; 4096];
            tokio::task::yield_now().await;
            scratch.iter().map(|&b| u64::from(b)).sum::<u64>()
        };
        let inner = std::mem::size_of_val(&big);
        let wrapped = in_runtime(rt.handle(), big);
        let outer = std::mem::size_of_val(&wrapped);
        assert!(
            inner >= 4096,
            "the test future holds its buffer ({inner} bytes)"
        );
        assert!(
            outer < inner + 64,
            "in_runtime's future is {outer} bytes around a future of {inner}"
        );
        assert_eq!(rt.block_on(wrapped), 7 * 4096);
    }
}
