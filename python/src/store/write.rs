//! The `Store`'s puts and upserts. A plain value is copied through the client's staging memory
//! (small or mutable values) or sent from its own memory (immutable values from 64 KiB on);
//! `put_from` and the `_from` batches send from the caller's registered memory.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use yuebing_store::{Client, Options, Write};

use super::ranges::{batch_over, multi_ranges, ranges, same_length, Ranges};
use super::Store;
use crate::errors;
use crate::memory::{copy_of, Access, Memory};
use crate::options::Replicas;
use crate::wait::run_store;

#[pymethods]
impl Store {
    /// Stores `value` (bytes, bytearray, memoryview, a numpy array: any C-contiguous buffer)
    /// under `key`. An existing key raises `ObjectAlreadyExists` and keeps its value (see
    /// `upsert`). `replicas`, `preferred` (segment names), `soft_pin` and `hard_pin` override
    /// the store's replica settings for this put. An immutable value (`bytes`, or a
    /// memoryview of one) of 64 KiB or more is sent from its own memory, without a copy; any
    /// other is copied first (for no copy from mutable memory, use `put_from`).
    #[pyo3(signature = (key, value, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_value(py, key, value, opts)
    }

    /// Stores `value` under `key`, replacing an existing value (as `put` otherwise).
    #[pyo3(signature = (key, value, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_value(py, key, value, opts.with_write(Write::Upsert))
    }

    /// Stores the first `size` bytes (all when omitted) of `buffer` under `key` without copying
    /// them: `buffer` is any C-contiguous buffer, or an int address (a tensor's `data_ptr()`)
    /// with `size`, which must stay valid until the call returns. Memory not registered with
    /// `register_buffer` is registered for the call's duration.
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_memory(py, key, (buffer, size), opts)
    }

    /// As `put_from`, replacing an existing value (zero-copy from `buffer`, or an int address
    /// with `size`).
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_memory(py, key, (buffer, size), opts.with_write(Write::Upsert))
    }

    /// Stores the concatenation of `parts` under `key`: each part is any C-contiguous buffer
    /// (bytes, bytearray, memoryview, a numpy array of any dtype), taken by its length in
    /// bytes; the value is copied once into registered memory. An existing key raises
    /// `ObjectAlreadyExists` and keeps its value (see `upsert_parts`).
    #[pyo3(signature = (key, *parts, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_parts_value(py, key, parts, opts)
    }

    /// As `put_parts`, replacing an existing value.
    #[pyo3(signature = (key, *parts, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_parts_value(py, key, parts, opts.with_write(Write::Upsert))
    }

    /// Stores each `(keys[i], values[i])`; returns one entry per key: `None` when stored, or
    /// the `YuebingError` instance (not raised) of a failed item.
    #[pyo3(signature = (keys, values, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        batch_put(self, py, keys, values, &opts)
    }

    /// As `batch_put`, replacing existing values; one entry per key: `None`, or the
    /// `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, values, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_upsert(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        batch_put(self, py, keys, values, &opts.with_write(Write::Upsert))
    }

    /// Stores each key from its buffer (or int address with `sizes[i]`) without copying;
    /// returns one entry per key: `None`, or the `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        let ranges = ranges(self, py, keys, buffers, sizes, Access::Read)?;
        put_from_ranges(self, py, ranges, &opts)
    }

    /// As `batch_put_from`, replacing existing values; one entry per key: `None`, or the
    /// `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_upsert_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        let ranges = ranges(self, py, keys, buffers, sizes, Access::Read)?;
        put_from_ranges(self, py, ranges, &opts.with_write(Write::Upsert))
    }

    /// Stores each key's value gathered without copying from several buffers (or int
    /// addresses with `sizes[i][j]`), `buffers[i]` end to end (per-layer KV blocks): one
    /// placement and one publication for the batch. One entry per key: `None`, or the
    /// `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put_from_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Vec<Bound<'_, PyAny>>>,
        sizes: Option<Vec<Vec<Option<u64>>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let replicas = Replicas::of(replicas, preferred, soft_pin, hard_pin);
        let opts = self.put_options(py, timeout, replicas)?;
        let ranges = multi_ranges(self, py, keys, buffers, sizes, Access::Read)?;
        put_from_ranges(self, py, ranges, &opts)
    }

    /// As `batch_put_from_buffers`, replacing existing values.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_upsert_from_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Vec<Bound<'_, PyAny>>>,
        sizes: Option<Vec<Vec<Option<u64>>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let replicas = Replicas::of(replicas, preferred, soft_pin, hard_pin);
        let opts = self.put_options(py, timeout, replicas)?;
        let ranges = multi_ranges(self, py, keys, buffers, sizes, Access::Read)?;
        put_from_ranges(self, py, ranges, &opts.with_write(Write::Upsert))
    }
}

impl Store {
    pub(crate) fn put_value(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        opts: yuebing_store::Options,
    ) -> PyResult<()> {
        if let Some(mem) = zero_copy_source(value) {
            return self.put_held(py, key, mem, opts);
        }
        let value = copy_of(value, "value")?;
        self.run(py, |c| c.put(key, &value, opts))
    }

    /// `put_parts` (and `upsert_parts`): each part copied by its byte length.
    pub(crate) fn put_parts_value(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        opts: yuebing_store::Options,
    ) -> PyResult<()> {
        let parts = parts
            .iter()
            .enumerate()
            .map(|(i, p)| copy_of(&p, &format!("parts[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        self.run(py, |c| c.put_parts(key, &parts, opts))
    }

    /// `put_from` (and `upsert_from`) of a buffer or an address.
    pub(crate) fn put_memory(
        &self,
        py: Python<'_>,
        key: &str,
        (buffer, size): (&Bound<'_, PyAny>, Option<u64>),
        opts: yuebing_store::Options,
    ) -> PyResult<()> {
        let mem = Memory::from_py(buffer, size, Access::Read, "buffer")?;
        self.put_held(py, key, mem, opts)
    }

    /// `put_from` (and `upsert_from`): `mem` held registered for the call.
    fn put_held(
        &self,
        py: Python<'_>,
        key: &str,
        mem: Memory,
        opts: yuebing_store::Options,
    ) -> PyResult<()> {
        let held = self
            .pins(py)?
            .hold(py, std::slice::from_ref(&mem), Access::Read)?;
        let done = self.run(py, |c| c.put_from(key, mem.addr, mem.len, opts));
        // The call's work has stopped (even when a signal ended the wait): release the memory.
        drop(held);
        done
    }
}

/// Values from this size on are put and got without a copy (their memory registered for the
/// call); smaller ones are copied through the client's staging memory, which costs less than a
/// registration.
pub(super) const ZERO_COPY_MIN: u64 = 64 << 10;

/// The memory of a put's `value` when it is sent without a copy: an immutable buffer — a
/// `bytes` (exactly: a subclass may export other, mutable memory through `__buffer__`), or a
/// memoryview of one — of at least [`ZERO_COPY_MIN`] bytes, held exported for the
/// call. A mutable buffer (a bytearray, a numpy array) is copied: another thread could write it
/// while the replicas are written, and they would differ. `None`: copy it (and report its
/// errors).
fn zero_copy_source(value: &Bound<'_, PyAny>) -> Option<Memory> {
    let immutable = match value.cast_exact::<PyBytes>() {
        Ok(bytes) => bytes.as_bytes().len() as u64 >= ZERO_COPY_MIN,
        Err(_) => value
            .cast::<pyo3::types::PyMemoryView>()
            .ok()
            .and_then(|view| view.getattr("obj").ok())
            .is_some_and(|obj| obj.is_exact_instance_of::<PyBytes>()),
    };
    if !immutable {
        return None;
    }
    Memory::from_py(value, None, Access::Read, "value")
        .ok()
        .filter(|m| m.len >= ZERO_COPY_MIN)
}

/// `Store.batch_put` (and `Store.batch_upsert`).
pub(crate) fn batch_put(
    store: &Store,
    py: Python<'_>,
    keys: Vec<String>,
    values: Vec<Bound<'_, PyAny>>,
    opts: &Options,
) -> PyResult<Vec<Py<PyAny>>> {
    same_length(py, keys.len(), "values", values.len())?;
    let client = store.client(py)?;
    let items = keys
        .into_iter()
        .zip(&values)
        .enumerate()
        .map(|(i, (k, v))| Ok((k, copy_of(v, &format!("values[{i}]"))?)))
        .collect::<PyResult<Vec<_>>>()?;
    let items: Vec<(&str, &[u8])> = items.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
    // Staging the values (making the call) runs with the GIL released, as the wait does.
    let each = run_store(py, client, |c| c.batch_put(&items, opts))?;
    errors::items(py, each, |py, ()| Ok(py.None()))
}

/// The zero-copy batch puts (`batch_put_from`, `batch_put_from_buffers` and their upserts):
/// each key's value from its buffers; one entry per key, `None` or its error.
fn put_from_ranges(
    store: &Store,
    py: Python<'_>,
    ranges: Ranges<'_>,
    opts: &Options,
) -> PyResult<Vec<Py<PyAny>>> {
    let client = store.client(py)?;
    let call =
        |c: &Client, items: &[(String, Vec<(u64, u64)>)]| c.batch_put_from_buffers(items, opts);
    batch_over(py, client, ranges, call, |py, ()| Ok(py.None()))
}
