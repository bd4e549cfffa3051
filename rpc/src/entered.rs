//! Polling a future inside a runtime's context, so that what it creates (sockets, timers)
//! registers with that runtime's drivers whoever polls it: a task of another runtime, or a plain
//! thread with any executor. The runtime's own threads then drive the I/O and the timers.

use std::future::Future;

use tokio::runtime::Handle;

/// Awaits `fut`, entering `handle`'s runtime at every poll: what it creates (sockets, timers,
/// tasks) lives on that runtime, whoever polls it. The runtime must be driven by its own
/// threads (a multi-thread runtime, or a current-thread one inside its `block_on`).
pub async fn in_runtime<F: Future>(handle: &Handle, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let _runtime = handle.enter();
        fut.as_mut().poll(cx)
    })
    .await
}
