//! The caller's memory of a zero-copy batch (`batch_put_from`, `batch_get_into`), its
//! ranges held registered together for the call, and the checks of a batch's lists.

use std::future::Future;

use pyo3::prelude::*;
use yuebing_store::Client;

use super::Store;
use crate::errors;
use crate::memory::{Access, Memory};
use crate::pins::Held;
use crate::wait::run_store;

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

/// The caller's memory of a zero-copy batch, its ranges held registered together: each key
/// with its buffers (one for the single-buffer forms, several for the multi-buffer ones).
pub(super) struct Ranges<'a> {
    pub(super) items: Vec<(String, Vec<(u64, u64)>)>,
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

/// The memory of each key's buffers (`buffers[i][j]`, of `sizes[i][j]` bytes when given),
/// held registered with `access` until the returned value is dropped.
pub(super) fn multi_ranges<'a>(
    store: &'a Store,
    py: Python<'_>,
    keys: Vec<String>,
    buffers: Vec<Vec<Bound<'_, PyAny>>>,
    sizes: Option<Vec<Vec<Option<u64>>>>,
    access: Access,
) -> PyResult<Ranges<'a>> {
    same_length(py, keys.len(), "buffer lists", buffers.len())?;
    if let Some(s) = &sizes {
        same_length(py, keys.len(), "size lists", s.len())?;
        for (i, (b, s)) in buffers.iter().zip(s).enumerate() {
            if b.len() != s.len() {
                let what = format!("{} buffers but {} sizes for keys[{i}]", b.len(), s.len());
                return Err(errors::invalid(py, &what));
            }
        }
    }
    let sizes = |i: usize, j: usize| sizes.as_ref().and_then(|s| s[i][j]);
    let items = keys
        .into_iter()
        .zip(&buffers)
        .enumerate()
        .map(|(i, (key, list))| {
            let list = list.iter().enumerate();
            (
                key,
                list.map(|(j, b)| (b, sizes(i, j), format!("buffers[{i}][{j}]")))
                    .collect(),
            )
        })
        .collect();
    hold_all(store, py, items, access)
}

/// Each key's buffers (each with its size when given, and its name in errors) as memory, held
/// registered with `access` together.
#[allow(clippy::type_complexity)]
fn hold_all<'a>(
    store: &'a Store,
    py: Python<'_>,
    items: Vec<(String, Vec<(&Bound<'_, PyAny>, Option<u64>, String)>)>,
    access: Access,
) -> PyResult<Ranges<'a>> {
    let pins = store.pins(py)?;
    let mut out = Ranges {
        items: Vec::with_capacity(items.len()),
        held: None,
        memory: Vec::with_capacity(items.len()),
    };
    for (key, list) in items {
        let mut ranges = Vec::with_capacity(list.len());
        for (buffer, size, what) in list {
            let mem = Memory::from_py(buffer, size, access, &what)?;
            ranges.push((mem.addr, mem.len));
            out.memory.push(mem);
        }
        out.items.push((key, ranges));
    }
    // All at once: ranges that overlap share one registration, and a wait for other calls'
    // registrations holds none of this call's meanwhile.
    out.held = Some(pins.hold(py, &out.memory, access)?);
    Ok(out)
}

/// As [`multi_ranges`] with one buffer per key (`buffers[i]`, of `sizes[i]` bytes when
/// given).
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
    let items = keys
        .into_iter()
        .zip(&buffers)
        .enumerate()
        .map(|(i, (key, b))| (key, vec![(b, size_at(&sizes, i), format!("buffers[{i}]"))]))
        .collect();
    hold_all(store, py, items, access)
}

/// Runs the zero-copy batch `call` over the caller's memory in `ranges` (held registered
/// until the call's work has stopped); each item's outcome becomes `ok`'s value or its error
/// object.
pub(super) fn batch_over<T, F>(
    py: Python<'_>,
    client: &yuebing_bridge::BlockingClient,
    ranges: Ranges<'_>,
    call: impl FnOnce(&Client, &[(String, Vec<(u64, u64)>)]) -> F + Send,
    ok: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
) -> PyResult<Vec<Py<PyAny>>>
where
    T: Send + 'static,
    F: Future<Output = yuebing_store::Result<Vec<yuebing_store::Result<T>>>> + Send + 'static,
{
    let each = run_store(py, client, |c| call(c, &ranges.items));
    // The call's work has stopped: the memory may go.
    drop(ranges);
    errors::items(py, each?, ok)
}
