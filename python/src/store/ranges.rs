//! The caller's memory of a zero-copy batch (`batch_put_from`, `batch_get_into`), its
//! ranges held registered together for the call, and the checks of a batch's lists.

use pyo3::prelude::*;

use super::Store;
use crate::errors;
use crate::memory::{Access, Memory};
use crate::pins::Held;

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
