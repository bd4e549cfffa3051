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
//! Only a bridge that owns its runtime runs calls here: its timers work, and it stops only once
//! every call ended (a supplied runtime's owner may shut it down under a call). A call waited
//! for in slices, with something to do between them (a Python caller runs its signal
//! handlers), runs here for its first slice only, and is then spawned: it must go on while the
//! caller is busy between slices (a signal handler may itself make a blocking call that needs
//! what the first holds).
//!
//! The rules of a spawned call hold: the call is counted in, also across the hand-over to a
//! spawned call (a shutdown waits for it and stops it with `Shutdown`), a panic of the operation becomes [`Error::Panicked`], and the
//! outcome is handed over only after the operation's future was dropped, so its work (a
//! transfer into the caller's memory) has stopped.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::runtime::Handle;

use crate::bridge::Shared;
use crate::call::{drop_caught, panic_message};
use crate::error::{Error, Result};

/// Whether a blocking call can run on this thread: it is in no runtime's context (where
/// `Handle::block_on` would panic; a task of another runtime waits for a spawned call
/// instead), and tokio's thread-local state is still there (a thread-local destructor that
/// makes a blocking call waits for a spawned one too).
pub(crate) fn possible() -> bool {
    matches!(Handle::try_current(), Err(e) if e.is_missing_context())
}

/// A call counted in ([`Shared::call_started`]); counted out when dropped, however its run
/// here ends, unless handed to a spawned call ([`Counted::hand_over`]).
pub(crate) struct Counted(Arc<Shared>);

impl Counted {
    /// The count goes with the call to whoever counts it out from now on (a spawned call's
    /// once-guard).
    pub(crate) fn hand_over(self) {
        std::mem::forget(self);
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.call_ended();
    }
}

/// How a run here ended.
pub(crate) enum Here<T, F> {
    /// The call ended: its outcome, its operation's future dropped.
    Ended(Result<T>),
    /// The first slice ran out: the operation, still counted in (a shutdown waits for it), to
    /// be waited for spawned on the runtime (`Call::spawn_counted`), so that it goes on while
    /// the caller does what it must between slices.
    Going(Pin<Box<F>>, Counted),
}

/// Runs `op` on this thread (the caller checked [`possible`], that it may block, and that the
/// bridge owns its runtime, whose timers then work and which stops only once every call
/// ended): until it ends, or for its first `slice` only.
pub(crate) fn run<T, E, F>(shared: &Arc<Shared>, op: F, slice: Option<Duration>) -> Here<T, F>
where
    E: Into<Error>,
    F: Future<Output = std::result::Result<T, E>>,
{
    if let Err(e) = shared.call_started() {
        return Here::Ended(Err(e));
    }
    let counted = Counted(shared.clone());
    let mut op = Some(Box::pin(op));
    let outcome = match op.as_mut() {
        Some(running) => match poll_for(shared, running, slice) {
            Some(outcome) => outcome,
            None => match op.take() {
                Some(going) => return Here::Going(going, counted),
                None => Err(Error::Shutdown),
            },
        },
        None => Err(Error::Shutdown),
    };
    // The operation's future (and its work) is gone before the outcome is handed over; a
    // panic while it is dropped is the operation's panic. Dropped in the runtime's context,
    // as on a worker (a drop may spawn).
    let _runtime = shared.handle().enter();
    Here::Ended(match drop_caught(&mut op) {
        None => outcome,
        Some(message) => Err(Error::Panicked { message }),
    })
}

/// Polls `op` here for at most `slice` (`None`: until it ends): its outcome (a panic of its
/// own caught), `Shutdown` if the bridge shuts down first, or `None` when the slice ran out.
fn poll_for<T, E: Into<Error>>(
    shared: &Shared,
    op: &mut Pin<Box<impl Future<Output = std::result::Result<T, E>>>>,
    slice: Option<Duration>,
) -> Option<Result<T>> {
    let stopping = shared.stopping();
    // Large same-host copies it makes are done here too: this thread waits for them anyway.
    yuebing_engine::copy_in_place(|| {
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
                r = AssertUnwindSafe(op.as_mut()).catch_unwind() => Some(match r {
                    Ok(r) => r.map_err(Into::into),
                    Err(panic) => Err(Error::Panicked { message: panic_message(&*panic) }),
                }),
                _ = slice_over => None,
            }
        })
    })
}
