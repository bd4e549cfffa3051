//! `yuebing.Buffer`: memory the engine allocated (`Engine.allocate`).

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use yuebing_bridge::BlockingEngine;
use yuebing_engine::EngineBuffer;

use crate::errors;
use crate::memory::type_name;
use crate::runtime::ForkSafe;

/// The engine a `Buffer` is registered with and its memory; `None` once freed.
pub(super) type Allocated = Mutex<Option<(BlockingEngine, Arc<EngineBuffer>)>>;

/// Memory the engine allocated (`Engine.allocate`): `addr` and `size` for transfers; `read`
/// and `write` copy bytes out and in. Those copies and the engine's transfers (or a peer's, for
/// a buffer allocated with `remote` rights) may touch the same bytes at once. The copies go
/// through raw pointers, never a Rust reference over the buffer, as the transports' do; like a
/// `memcpy` racing a peer's on shared memory (the data plane's model, and Mooncake's
/// `read_bytes_from_buffer`), bytes that a transfer writes while `read` copies them come out
/// old, new or a mix, and bytes that `write` and a transfer write at once are left from either.
/// That is a data race in Rust's memory model, not a promise of well-defined bytes: wait for
/// your transfers first. `free()` (or dropping the
/// last reference) unregisters it: no transfer of its engine and no peer touches it afterwards;
/// a call that holds it meanwhile (a transfer on another engine, or a registration there) keeps
/// its memory until it ends.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct Buffer {
    pub(super) addr: u64,
    pub(super) len: usize,
    /// The engine it is registered with and the memory; `None` once freed. Made by the process
    /// that allocated it: a forked child neither uses nor frees it (the memfd mapping and its
    /// status are shared with the parent).
    pub(super) state: ForkSafe<Allocated>,
}

impl Buffer {
    /// Its memory, unless it was freed or this is a forked child (`Forked`).
    pub(crate) fn live(&self, py: Python<'_>) -> PyResult<Arc<EngineBuffer>> {
        let state = self.state.get(py)?;
        // The lock is released at the end of this statement, before any exception is made.
        let buf = state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, buf)| buf.clone());
        buf.ok_or_else(|| PyValueError::new_err("the buffer was freed"))
    }

    /// Checks that `[offset, offset + length)` lies in the buffer (`InvalidArgument` if not).
    fn bounds(&self, py: Python<'_>, offset: usize, length: usize) -> PyResult<()> {
        match offset.checked_add(length) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(errors::invalid(
                py,
                &format!(
                    "{length} bytes at offset {offset} do not fit in the buffer ({} bytes)",
                    self.len
                ),
            )),
        }
    }

    /// Unregisters and drops the buffer's share of its memory, once.
    fn release(state: &Allocated) {
        let taken = state.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((engine, buf)) = taken {
            // An error means the engine no longer has it (the engine stopped): nothing to undo.
            let _ = engine.unregister(buf.addr());
        }
    }
}

#[pymethods]
impl Buffer {
    /// The address of its first byte.
    #[getter]
    fn addr(&self) -> u64 {
        self.addr
    }

    /// Its length in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Copies `data` (any C-contiguous buffer: bytes, bytearray, memoryview, a numpy array) in
    /// at `offset` (`InvalidArgument` if it does not fit). Bytes that a transfer or a peer
    /// writes meanwhile are left from either (see the class).
    #[pyo3(signature = (data, offset=0))]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let buf = self.live(py)?;
        let src = source(data, "data")?;
        let len = src.len_bytes();
        self.bounds(py, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `src` is `len` bytes of a Python buffer held exported (neither freed nor
        // resized meanwhile), valid for reads, and reached by raw pointer only: it may be a
        // view of this very memory, or of memory a transfer or a peer writes (the bytes are then
        // left from either, as the class says; `write_from` allows overlap).
        unsafe { buf.write_from(offset, src.buf_ptr() as *const u8, len) }
            .map_err(|e| errors::engine(py, e))?;
        drop(src);
        Ok(())
    }

    /// Copies `length` bytes at `offset` (to the end when omitted) out as bytes
    /// (`InvalidArgument` if they are not all in the buffer). Bytes that a transfer or a peer
    /// writes meanwhile may be copied old, new or a mix (see the class).
    #[pyo3(signature = (offset=0, length=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: usize,
        length: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let buf = self.live(py)?;
        let length = match length {
            Some(n) => n,
            None => self.len.checked_sub(offset).unwrap_or(usize::MAX),
        };
        // Before anything is allocated: the length comes from Python.
        self.bounds(py, offset, length)?;
        PyBytes::new_with(py, length, |out| {
            // SAFETY: `[offset, offset + length)` lies in the buffer (checked above), which stays
            // mapped while `buf` is held; `out` is the new `bytes`' own memory, private. A
            // transfer or a peer writing the range meanwhile races with the copy: the bytes are
            // then old, new or a mix (`read_at`'s contract, which the class states for Python).
            unsafe { buf.read_at(offset, out) }.map_err(|e| errors::engine(py, e))?;
            Ok(())
        })
    }

    /// Unregisters the buffer (transfers on it fail from now on) and releases it. Freeing
    /// twice does nothing. In a forked child it raises `Forked` and leaves the buffer alone
    /// (it is the parent's).
    fn free(&self, py: Python<'_>) -> PyResult<()> {
        Buffer::release(self.state.get(py)?);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("<yuebing.Buffer addr={:#x} size={}>", self.addr, self.len)
    }
}

/// `Buffer.write`'s `data` (the argument `what`): a C-contiguous Python buffer, held exported.
fn source(data: &Bound<'_, PyAny>, what: &str) -> PyResult<pyo3::buffer::PyUntypedBuffer> {
    let buf = pyo3::buffer::PyUntypedBuffer::get(data).map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a buffer (bytes, bytearray, memoryview, a numpy array, …), not {}",
            type_name(data)
        ))
    })?;
    match buf.is_c_contiguous() {
        true => Ok(buf),
        false => Err(errors::invalid(
            data.py(),
            &format!(
                "{what} is not C-contiguous: pass a contiguous array (numpy: np.ascontiguousarray)"
            ),
        )),
    }
}

impl Drop for Buffer {
    /// Frees the buffer, except in a forked child (see `runtime::ForkSafe`).
    fn drop(&mut self) {
        if let Some(state) = self.state.here() {
            Buffer::release(state);
        }
    }
}
