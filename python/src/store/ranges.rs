//! The caller's memory of a zero-copy batch (`batch_put_from`, `batch_get_into`), its
//! ranges held registered together for the call, and the checks of a batch's lists.

use std::future::Future;

use pyo3::prelude::*;
use yuebing_store::Client;

use super::Store;
use crate::errors;
use crate::memory::{Access, Memory};
use crate::pins::Held;
use crate::wait::wait;

/// `sizes[i]` when given (a list as long as the keys, entries may be `None`).
pub(super) fn size_at(sizes: &Option<Vec<Option<u64>>>, i: usize) -> Option<u64> {
    sizes.as_ref().and_then(|s| s.get(i).copied().flatten())
}

/// Checks that the lists of a batch have one entry per key.
pub(super) fn same_length(py: Python<'_>, keys: usize, what: &str, n: usize) -> PyResult<()> {
    match keys == n {
        true => Ok(()),
        false => Err(errors::invalid(
            py,
            &format!("{keys} keys but {n} {what}: give one per key"),
        )),
    }
}

/// The caller's memory of a zero-copy batch, its ranges held registered together.
pub(super) struct Ranges<'a> {
    pub(super) items: Vec<(String, u64, u64)>,
    /// Dropped before `memory`: the pins go before the buffers they pin.
    held: Option<Held<'a>>,
    memory: Vec<Memory>,
}

impl Drop for Ranges<'_> {
    fn drop(&mut self) {
        self.held = None;
        self.memory.clear();
    }
}

pub(super) fn ranges<'a>(
    store: &'a Store,
    py: Python<'_>,
    keys: Vec<String>,
    buffers: Vec<Bound<'_, PyAny>>,
    sizes: Option<Vec<Option<u64>>>,
    access: Access,
) -> PyResult<Ranges<'a>> {
    same_length(py, keys.len(), "buffers", buffers.len())?;
    if let Some(s) = &sizes {
        same_length(py, keys.len(), "sizes", s.len())?;
    }
    let pins = store.pins(py)?;
    let mut out = Ranges {
        items: Vec::with_capacity(keys.len()),
        held: None,
        memory: Vec::with_capacity(keys.len()),
    };
    for (i, (key, buffer)) in keys.into_iter().zip(&buffers).enumerate() {
        let mem = Memory::from_py(buffer, size_at(&sizes, i), access, &format!("buffers[{i}]"))?;
        out.items.push((key, mem.addr, mem.len));
        out.memory.push(mem);
    }
    // All at once: ranges that overlap share one registration, and a wait for other calls'
    // registrations holds none of this call's meanwhile.
    out.held = Some(pins.hold(py, &out.memory, access)?);
    Ok(out)
}

/// A zero-copy batch's lists as Python passes them: keys, buffers (or addresses) and the sizes
/// (all of each buffer where `None`).
pub(super) type Lists<'py> = (
    Vec<String>,
    Vec<Bound<'py, PyAny>>,
    Option<Vec<Option<u64>>>,
);

/// Runs the zero-copy batch `call` over the caller's memory (`keys[i]` in `buffers[i]`, of
/// `sizes[i]` bytes when given), held registered with `access` until the call's work has
/// stopped; each item's outcome becomes `ok`'s value or its error object.
pub(super) fn batch_over<T, F>(
    store: &Store,
    py: Python<'_>,
    (keys, buffers, sizes): Lists<'_>,
    access: Access,
    call: impl FnOnce(&Client, &[(String, u64, u64)]) -> F,
    ok: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
) -> PyResult<Vec<Py<PyAny>>>
where
    T: Send + 'static,
    F: Future<Output = yuebing_store::Result<Vec<yuebing_store::Result<T>>>> + Send + 'static,
{
    let client = store.client(py)?;
    let ranges = ranges(store, py, keys, buffers, sizes, access)?;
    let each = wait(py, client.call(|c| call(c, &ranges.items)));
    // The call's work has stopped: the memory may go.
    drop(ranges);
    errors::items(py, each?, ok)
}
