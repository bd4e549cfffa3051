//! The process's bridge: every `Store` and `Engine` made in one process runs on one
//! [`Bridge`] (its runtime and callback pool), started on first use.
//!
//! After `fork()` the parent's bridge threads do not exist in the child, so its calls fail with
//! `Forked` (−4005), and so do the calls of every `Store` and `Engine` the child inherited. A
//! `Store` or `Engine` made in the child gets a bridge of the child's own: the first one made
//! there starts it. (The parent's bridge is left alone there: it has nothing to stop; and the
//! inherited objects are leaked there, not dropped: see [`ForkSafe`].)

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Mutex;

use pyo3::prelude::*;
use yuebing_bridge::{Bridge, BridgeConfig};

use crate::errors;

/// The bridge and the process that started it.
static BRIDGE: Mutex<Option<(u32, Bridge)>> = Mutex::new(None);

/// This process's bridge, started on first use (again in a forked child).
pub(crate) fn bridge(py: Python<'_>) -> PyResult<Bridge> {
    let pid = std::process::id();
    let mut slot = BRIDGE.lock().unwrap_or_else(|p| p.into_inner());
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
    let bridge = Bridge::new(BridgeConfig::default()).map_err(|e| errors::to_py(py, &e))?;
    *slot = Some((pid, bridge.clone()));
    Ok(bridge)
}

/// A value made in this process whose drop must not run in a forked child: dropping a client
/// or an engine reaches into the parent's runtime and locks, which threads that do not exist
/// in the child may have held at the fork. In a child it is leaked instead (as the bridge
/// leaks its runtime there); in its own process it is dropped as usual.
pub(crate) struct ForkSafe<T> {
    pid: u32,
    value: ManuallyDrop<T>,
}

impl<T> ForkSafe<T> {
    /// `value`, owned by this process.
    pub(crate) fn new(value: T) -> ForkSafe<T> {
        ForkSafe {
            pid: std::process::id(),
            value: ManuallyDrop::new(value),
        }
    }
}

impl<T> Deref for ForkSafe<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for ForkSafe<T> {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: `value` is dropped only here, once, and never used afterwards (this is
            // the wrapper's own drop).
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}
