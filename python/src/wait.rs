//! Waiting for a bridged call from Python: with the GIL released, in slices, running Python's
//! signal handlers between them. Store and engine calls run on the waiting thread itself ([`run`]),
//! which spares them two thread hand-offs; the others are started on the bridge and waited for.

use std::time::Duration;

use pyo3::prelude::*;
use yuebing_bridge::{BlockingClient, Bridge, Call};
use yuebing_store::Client;

use crate::errors;

/// How long the GIL stays released before the waiting thread looks at Python's signals again:
/// the most a Ctrl-C waits before it is noticed.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// Waits for `call` with the GIL released. Between slices of [`SLICE`] it runs Python's signal
/// handlers (only the main thread has any); if one raises (Ctrl-C's `KeyboardInterrupt`), the
/// call is cancelled, and that exception is returned once the call's work has stopped: from
/// then on nothing reads or writes the memory the call was given, so the caller may release
/// it. A call that failed becomes its `YuebingError`.
pub(crate) fn wait<T: Send + 'static>(py: Python<'_>, call: Call<T>) -> PyResult<T> {
    match wait_raw(py, call)? {
        Ok(value) => Ok(value),
        Err(e) => Err(errors::to_py(py, &e)),
    }
}

/// Python's signal handlers, run between slices of a wait (with the GIL taken for them).
fn signals() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}

/// As [`wait`], with the call's own outcome unconverted (for batches, whose items fail one by
/// one); `Err` only for an exception raised by a signal handler.
///
/// `Call::wait_for` hands back an outcome before the call's work stopped only when it refuses
/// to wait on a thread of the bridge (`WouldBlockBridge`). Python code never runs on those
/// threads (Python callbacks run on `runtime::callback_bridge`'s pool, and no call waited for
/// here is made on that bridge), and in a forked child a call
/// of the parent's bridge never starts (it ends at once with `Forked`), so every outcome here
/// comes once nothing of the call touches the caller's memory.
pub(crate) fn wait_raw<T: Send + 'static>(
    py: Python<'_>,
    call: Call<T>,
) -> PyResult<yuebing_bridge::Result<T>> {
    py.detach(move || call.wait_in_slices(SLICE, signals))
}

/// Makes the call `start` makes on `bridge` and waits for it with the GIL released (making a
/// put copies its value into staging memory): the call runs on this thread
/// ([`Bridge::block_on_sliced`]) in slices of [`SLICE`], between which Python's signal
/// handlers run. One that raises (Ctrl-C's `KeyboardInterrupt`) stops the call, and that
/// exception is returned once the call's work has stopped: from then on nothing reads or
/// writes the memory the call was given. A call that failed becomes its `YuebingError`.
pub(crate) fn run<T, E, F>(
    py: Python<'_>,
    bridge: &Bridge,
    start: impl FnOnce() -> F + Send,
) -> PyResult<T>
where
    T: Send + 'static,
    E: Into<yuebing_bridge::Error>,
    F: std::future::Future<Output = Result<T, E>> + Send + 'static,
{
    match py.detach(|| bridge.block_on_sliced(start, Some(SLICE), signals)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(errors::to_py(py, &e)),
        Err(raised) => Err(raised),
    }
}

/// [`run`] for a call of a store client, made by `start`.
pub(crate) fn run_store<T, F>(
    py: Python<'_>,
    client: &BlockingClient,
    start: impl FnOnce(&Client) -> F + Send,
) -> PyResult<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = yuebing_store::Result<T>> + Send + 'static,
{
    run(py, client.bridge(), || start(client.client()))
}
