//! Running a blocking call on the thread that waits for it.
//!
//! A call spawned on the runtime and waited for costs two hand-offs between threads more than
//! the call itself: the caller wakes a worker to start it, and the worker wakes the caller with
//! the outcome. On a small VM each is a futex wake-up and a reschedule, tens of microseconds:
//! a blocking `exist` against a master in another process took a median of 100-127 µs
//! spawned and 70-87 µs run here, as the async call did (62-70 µs; 2 vCPUs). So a thread
//! outside every runtime runs a blocking call itself, inside the bridge runtime's context
//! (`Handle::block_on`): it writes the request, the runtime's I/O driver reads the answer and
//! wakes it, and whatever the call spawns runs on the runtime's workers as before.
//!
//! The rules of a spawned call hold: the call is counted in (a shutdown waits for it and
//! stops it with `Shutdown`), a panic of the operation becomes [`Error::Panicked`], and the
//! outcome is handed over only after the operation's future was dropped, so its work (a
//! transfer into the caller's memory) has stopped.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures::FutureExt;
use tokio::runtime::Handle;

use crate::bridge::Shared;
use crate::call::{drop_caught, panic_message};
use crate::error::{Error, Result};

/// Whether a blocking call can run on this thread: it is in no runtime's context (where
/// `Handle::block_on` would panic); a task of another runtime waits for a spawned call instead.
pub(crate) fn possible() -> bool {
    Handle::try_current().is_err()
}

/// Counts a call out when dropped, however its run ends (a panic of `between` included).
struct Counted<'a>(&'a Shared);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.call_ended();
    }
}

/// The operation, caught for panics, polled across slices.
type Running<'a, T> = Pin<Box<dyn Future<Output = std::thread::Result<Result<T>>> + 'a>>;

/// Runs `op` on this thread until it ends (the caller checked [`possible`] and that it may
/// block). With a `slice`, `between` runs after each slice the call did not end in; its `Err`
/// stops the call (its future dropped here, so its work has stopped) and is returned.
pub(crate) fn run<T, E, F, B>(
    shared: &Shared,
    op: F,
    slice: Option<Duration>,
    mut between: impl FnMut() -> std::result::Result<(), B>,
) -> std::result::Result<Result<T>, B>
where
    E: Into<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    if let Err(e) = shared.call_started() {
        return Ok(Err(e));
    }
    let _counted = Counted(shared);
    let mut op: Option<Running<'_, T>> = Some(Box::pin(
        AssertUnwindSafe(async move { op.await.map_err(Into::into) }).catch_unwind(),
    ));
    let outcome = loop {
        let Some(running) = op.as_mut() else {
            break Err(Error::Shutdown);
        };
        if let Some(outcome) = poll_for(shared, running, slice) {
            break outcome;
        }
        if let Err(stopped) = between() {
            // Whatever dropping it raises, the caller's reason to stop is what it hears.
            let _ = drop_caught(&mut op);
            return Err(stopped);
        }
    };
    // The operation's future (and its work) is gone before the outcome is handed over; a
    // panic while it is dropped is the operation's panic.
    Ok(match drop_caught(&mut op) {
        None => outcome,
        Some(message) => Err(Error::Panicked { message }),
    })
}

/// Polls `op` here for at most `slice` (`None`: until it ends): its outcome, `Shutdown` if the
/// bridge shuts down first, or `None` when the slice ran out.
fn poll_for<T>(
    shared: &Shared,
    op: &mut Running<'_, T>,
    slice: Option<Duration>,
) -> Option<Result<T>> {
    let stopping = shared.stopping();
    shared.handle().block_on(async {
        let slice_over = async {
            match slice {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = stopping.cancelled() => Some(Err(Error::Shutdown)),
            r = op => Some(match r {
                Ok(r) => r,
                Err(panic) => Err(Error::Panicked { message: panic_message(&*panic) }),
            }),
            _ = slice_over => None,
        }
    })
}
