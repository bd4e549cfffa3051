//! How one plain value or one piece of the caller's memory reaches the store client for a
//! `Store`'s single-key puts and gets: copied (small or mutable values), sent from its own
//! memory (immutable values from 64 KiB on, and `put_from`), or read straight into a new
//! `bytes` (large values).

use std::future::Future;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use yuebing_store::{Client, Fetched, Located};

use crate::memory::{copy_of, Access, Memory};
use crate::store::Store;

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

    /// `get`: a small value copied out of the client's staging memory, a large one read
    /// straight into the new `bytes` returned.
    pub(crate) fn get_value<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        opts: &yuebing_store::Options,
    ) -> PyResult<Bound<'py, PyBytes>> {
        match self.run(py, |c| c.get_or_locate(key, INLINE_MAX, opts))? {
            Fetched::Value(value) => Ok(PyBytes::new(py, &value)),
            Fetched::Located(found) => self.read_into_bytes(py, found, opts),
        }
    }

    /// Reads a located object into a new `bytes` of its size, without a copy: the object's
    /// memory is registered for the read.
    fn read_into_bytes<'py>(
        &self,
        py: Python<'py>,
        found: Located,
        opts: &yuebing_store::Options,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (bytes, addr) = uninit_bytes(py, found.size())?;
        let mem = Memory::of_call(addr, found.size(), "the value's new bytes");
        let read = self.read_into(py, mem, |c, addr, len| {
            c.read_located(&found, addr, len, opts)
        });
        // Filled: every one of its `size` bytes was written by the read (else it is dropped
        // unread).
        read.map(|_| bytes)
    }

    /// A read into the caller's memory `mem` (`get_into`, `read_located`): `read` is the
    /// client's call into `(addr, len)`, run while the memory is held registered and writable.
    /// Returns what the call does, the object's size.
    pub(crate) fn read_into<F>(
        &self,
        py: Python<'_>,
        mem: Memory,
        read: impl FnOnce(&Client, u64, u64) -> F + Send,
    ) -> PyResult<u64>
    where
        F: Future<Output = yuebing_store::Result<u64>> + Send + 'static,
    {
        let held = self
            .pins(py)?
            .hold(py, std::slice::from_ref(&mem), Access::Write)?;
        let done = self.run(py, |c| read(c, mem.addr, mem.len));
        // The call's work has stopped (even when a signal ended the wait): release the memory.
        drop(held);
        done
    }
}

/// A new `bytes` of `size` bytes whose contents are not initialised yet, and the address of
/// its contents. Give it to Python only once all `size` bytes were written (through that
/// address; no Rust reference to them exists); on failure drop it unread.
fn uninit_bytes(py: Python<'_>, size: u64) -> PyResult<(Bound<'_, PyBytes>, *mut u8)> {
    if size == 0 {
        // CPython hands out one shared empty bytes for size 0: not ours to write.
        return Err(PyValueError::new_err("no uninitialised bytes of size 0"));
    }
    let len = pyo3::ffi::Py_ssize_t::try_from(size)
        .map_err(|_| PyValueError::new_err("the value is larger than this process's memory"))?;
    // SAFETY: the GIL is held (`py`). With a null source, PyBytes_FromStringAndSize returns a
    // new reference to a bytes object of `len` bytes with contents left uninitialised (CPython
    // documents this), or null with an exception set, which `from_owned_ptr_or_err` raises.
    let obj = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), len),
        )
    }?;
    let bytes = obj.cast_into::<PyBytes>()?;
    // SAFETY: `bytes` is a bytes object (checked above) and the GIL is held: PyBytes_AsString
    // returns its contents, `len` bytes (plus a terminating 0) that stay in place for as long
    // as the object lives. The object is new and referenced only here, so writing them before
    // anyone else sees it is what CPython's own constructors do.
    let addr = unsafe { pyo3::ffi::PyBytes_AsString(bytes.as_ptr()) }.cast::<u8>();
    if addr.is_null() {
        return Err(PyErr::fetch(py));
    }
    Ok((bytes, addr))
}

/// `get`'s (and `get_or_locate`'s default) largest value read inline: copied out of the
/// client's staging memory in the call that finds it. A larger one is read in a second call,
/// straight into memory sized for it.
pub(crate) const INLINE_MAX: u64 = ZERO_COPY_MIN - 1;

/// Values from this size on are put and got without a copy (their memory registered for the
/// call); smaller ones are copied through the client's staging memory, which costs less than a
/// registration.
const ZERO_COPY_MIN: u64 = 64 << 10;

/// The memory of a put's `value` when it is sent without a copy: an immutable buffer — a
/// `bytes`, or a memoryview of one — of at least [`ZERO_COPY_MIN`] bytes, held exported for the
/// call. A mutable buffer (a bytearray, a numpy array) is copied: another thread could write it
/// while the replicas are written, and they would differ. `None`: copy it (and report its
/// errors).
fn zero_copy_source(value: &Bound<'_, PyAny>) -> Option<Memory> {
    let immutable = match value.cast::<PyBytes>() {
        Ok(bytes) => bytes.as_bytes().len() as u64 >= ZERO_COPY_MIN,
        Err(_) => value
            .cast::<pyo3::types::PyMemoryView>()
            .ok()
            .and_then(|view| view.getattr("obj").ok())
            .is_some_and(|obj| obj.is_instance_of::<PyBytes>()),
    };
    if !immutable {
        return None;
    }
    Memory::from_py(value, None, Access::Read, "value")
        .ok()
        .filter(|m| m.len >= ZERO_COPY_MIN)
}
