//! The process's bridge: every `Store` and `Engine` made in one process runs on one
//! [`Bridge`] (its runtime and callback pool), started on first use; Python callbacks run on a
//! second bridge's callback pool, on the same runtime ([`callback_bridge`]).
//!
//! After `fork()` the parent's bridge threads do not exist in the child, so its calls fail with
//! `Forked` (−4005), and so does every method of a `Store`, `Engine` or `Buffer` the child
//! inherited that would touch the parent's state, before it touches any (see [`ForkSafe`]). A
//! `Store` or `Engine` made in the child gets a bridge of the child's own: the first one made
//! there starts it. (The parent's bridge is left alone there: it has nothing to stop; and the
//! inherited objects are leaked there, not dropped: see [`ForkSafe`].)

use std::mem::ManuallyDrop;
use std::sync::Mutex;

use pyo3::prelude::*;
use yuebing_bridge::{Bridge, BridgeConfig};

use crate::errors;

/// The bridge and the process that started it.
static BRIDGE: Mutex<Option<(u32, Bridge)>> = Mutex::new(None);

/// The bridge whose callback pool runs Python callbacks (see [`callback_bridge`]).
static CALLBACK_BRIDGE: Mutex<Option<(u32, Bridge)>> = Mutex::new(None);

/// Threads that run Python callbacks: more let a callback that blocks (waits for an event,
/// makes a blocking call) hold up fewer others.
const CALLBACK_THREADS: usize = 4;

/// This process's bridge, started on first use (again in a forked child).
pub(crate) fn bridge(py: Python<'_>) -> PyResult<Bridge> {
    per_process(py, &BRIDGE, || Bridge::new(BridgeConfig::default()))
}

/// The bridge that runs this process's Python callbacks (the rpc module's receive and send
/// callbacks): on [`bridge`]'s runtime, with a callback pool of its own. A Python callback may
/// make any blocking call of this package, since its thread is not one of [`bridge`]'s (where
/// a blocking call would be refused with `WouldBlockBridge` before its work stopped, see
/// `wait::wait_raw`); blocking calls are never made on this bridge.
pub(crate) fn callback_bridge(py: Python<'_>) -> PyResult<Bridge> {
    let main = bridge(py)?;
    per_process(py, &CALLBACK_BRIDGE, || {
        Bridge::with_handle(main.handle().clone(), CALLBACK_THREADS)
    })
}

/// The bridge in `slot` if this process made it, else one made now by `make` (a forked
/// child's inherited one is left alone).
fn per_process(
    py: Python<'_>,
    slot: &Mutex<Option<(u32, Bridge)>>,
    make: impl FnOnce() -> yuebing_bridge::Result<Bridge>,
) -> PyResult<Bridge> {
    let pid = yuebing_bridge::pid::current();
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, bridge)) = slot.as_ref() {
        if *owner == pid {
            return Ok(bridge.clone());
        }
    }
    // A forked child: the parent's bridge has no threads here; dropping it would only try to
    // stop them. Its clones held by inherited objects keep refusing calls with `Forked`.
    if let Some((_, inherited)) = slot.take() {
        std::mem::forget(inherited);
    }
    let made = make();
    if let Ok(bridge) = &made {
        *slot = Some((pid, bridge.clone()));
    }
    // The exception (Python code, which may let the GIL go) only once the lock is released.
    drop(slot);
    made.map_err(|e| errors::to_py(py, &e))
}

/// A value made in this process that a forked child must not touch: using or dropping a
/// client, an engine or their registrations reaches into the parent's runtime and locks,
/// which threads that do not exist in the child may have held at the fork (a lock held then
/// is never released there), and into memory still shared with the parent (an engine
/// buffer's memfd mapping, its status page). So in a child [`ForkSafe::get`] refuses with
/// `Forked` before anything of it is touched, and the value is leaked instead of dropped (as
/// the bridge leaks its runtime there); in its own process it is used and dropped as usual.
pub(crate) struct ForkSafe<T> {
    pid: u32,
    value: ManuallyDrop<T>,
}

impl<T> ForkSafe<T> {
    /// `value`, owned by this process.
    pub(crate) fn new(value: T) -> ForkSafe<T> {
        ForkSafe {
            pid: yuebing_bridge::pid::current(),
            value: ManuallyDrop::new(value),
        }
    }

    /// The value, unless this is a forked child: then `Forked`.
    pub(crate) fn get(&self, py: Python<'_>) -> PyResult<&T> {
        self.here().ok_or_else(|| forked(py, self.pid))
    }

    /// The value, unless this is a forked child.
    pub(crate) fn here(&self) -> Option<&T> {
        (yuebing_bridge::pid::current() == self.pid).then_some(&*self.value)
    }

    /// The value in any process, for what only reads data of its own that nothing changes
    /// after it was made (a name): no lock, no runtime, no shared memory.
    pub(crate) fn any_process(&self) -> &T {
        &self.value
    }
}

impl<T: Clone> Clone for ForkSafe<T> {
    /// A clone of the value, owned by the process that made this one (a clone made in a forked
    /// child is the parent's too).
    fn clone(&self) -> ForkSafe<T> {
        ForkSafe {
            pid: self.pid,
            value: self.value.clone(),
        }
    }
}

/// The `Forked` exception for a value that process `parent` made.
pub(crate) fn forked(py: Python<'_>, parent: u32) -> PyErr {
    errors::to_py(py, &yuebing_bridge::Error::Forked { parent })
}

impl<T> Drop for ForkSafe<T> {
    fn drop(&mut self) {
        if yuebing_bridge::pid::current() == self.pid {
            // SAFETY: `value` is dropped only here, once, and never used afterwards (this is
            // the wrapper's own drop).
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}
