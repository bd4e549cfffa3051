//! The caller's memory for the zero-copy calls: any C-contiguous Python buffer (`bytearray`,
//! `memoryview`, numpy arrays, …), held exported for as long as the [`Memory`] lives so that
//! it can be neither freed nor resized meanwhile; an engine `Buffer`, whose mapping is held
//! likewise (freeing the `Buffer` meanwhile only unregisters it from its engine); or a raw
//! address and a length (a tensor's `data_ptr()`), which the caller vouches for.
//!
//! Nothing here forms a Rust reference over that memory: the calls hand its address to the
//! engine, which copies through raw pointers.

use std::sync::Arc;

use pyo3::buffer::{PyBuffer, PyUntypedBuffer};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyMemoryView};
use yuebing_engine::EngineBuffer;

use crate::errors;

/// What a call does with the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Only reads it (`put_from`, the source of a write).
    Read,
    /// Writes it (`get_into`, the destination of a read): a read-only buffer is refused.
    Write,
}

/// A range of the caller's memory, valid while this lives, or while any clone of it lives
/// (see the module docs; a raw address only as long as its caller vouched).
#[derive(Clone)]
pub(crate) struct Memory {
    /// First byte.
    pub(crate) addr: u64,
    /// Length in bytes (at least 1).
    pub(crate) len: u64,
    /// Whether the memory may be written. False for a read-only Python buffer (a `bytes`, a
    /// read-only mmap or memoryview, a numpy array that is not writeable): it may be read
    /// (registered, a source), never written. An engine buffer's memory, the binding's own
    /// and a raw address (which its caller vouches for) may be written.
    pub(crate) writable: bool,
    /// The argument it came from, which errors name (`buffer`, `buffers[3]`, `local`).
    pub(crate) what: Arc<str>,
    /// What keeps the memory valid, shared by the clones: the last one releases it.
    keep: Arc<Keep>,
}

/// What keeps a [`Memory`] valid while it lives: held for its drop, never read.
#[allow(dead_code)]
enum Keep {
    /// A Python buffer's export: the buffer stays allocated and cannot be resized; released
    /// when the memory is dropped.
    Export(PyUntypedBuffer),
    /// The memory of an engine `Buffer`: its mapping, which stays while this is held even if
    /// the `Buffer` is freed meanwhile (freeing only unregisters it from its own engine and
    /// drops the `Buffer`'s share).
    Engine(Arc<EngineBuffer>),
    /// A raw address: its caller vouches for it, only until its call returns (or, registered,
    /// until it unregisters).
    Nothing,
}

/// The first `size` bytes (all when `None`) of `whole` bytes of `what`; never 0.
fn part(py: Python<'_>, size: Option<u64>, whole: u64, what: &str) -> PyResult<u64> {
    let len = match size {
        None => whole,
        Some(n) if n <= whole => n,
        Some(n) => {
            return Err(errors::invalid(
                py,
                &format!("size {n} is larger than {what} ({whole} bytes)"),
            ))
        }
    };
    match len {
        0 => Err(errors::invalid(py, &format!("{what} is empty (0 bytes)"))),
        n => Ok(n),
    }
}

impl Memory {
    /// The memory `obj` names: a buffer (its first `size` bytes when given), or an `int` address
    /// with `size` bytes. `what` names the argument in errors. A wrong type is `TypeError`; a
    /// value out of its domain (empty, strided, too short, the null address, a range that wraps,
    /// a read-only buffer where the call writes) is `InvalidArgument`.
    pub(crate) fn from_py(
        obj: &Bound<'_, PyAny>,
        size: Option<u64>,
        access: Access,
        what: &str,
    ) -> PyResult<Memory> {
        let py = obj.py();
        if obj.is_instance_of::<PyInt>() {
            return Memory::raw(obj, size, what);
        }
        if let Ok(engine_buffer) = obj.cast::<crate::engine::Buffer>() {
            // The memory itself, not only the Python object: `Buffer.free()` from another
            // thread must not unmap it while a call or a registration uses it.
            let buf = engine_buffer.get().live(py)?;
            return Ok(Memory {
                addr: buf.addr(),
                len: part(py, size, buf.len() as u64, what)?,
                writable: true,
                what: what.into(),
                keep: Arc::new(Keep::Engine(buf)),
            });
        }
        let buf = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be a buffer (bytes, bytearray, memoryview, a numpy array, …) or an \
                 int address with a size, not {}",
                type_name(obj)
            ))
        })?;
        if !buf.is_c_contiguous() {
            return Err(errors::invalid(
                py,
                &format!(
                    "{what} is not C-contiguous: pass a contiguous array (numpy: \
                     np.ascontiguousarray)"
                ),
            ));
        }
        let writable = !buf.readonly();
        if access == Access::Write && !writable {
            return Err(errors::invalid(
                py,
                &format!(
                    "{what} is read-only ({}): pass a writable buffer such as a bytearray or a \
                     writable numpy array",
                    type_name(obj)
                ),
            ));
        }
        Ok(Memory {
            addr: buf.buf_ptr() as u64,
            len: part(py, size, buf.len_bytes() as u64, what)?,
            writable,
            what: what.into(),
            keep: Arc::new(Keep::Export(buf)),
        })
    }

    /// An `int` address with `size` bytes: the caller promises they stay valid (and, for a
    /// destination, writable) until the call returns, or, registered, until it unregisters.
    /// Taken as writable memory: the binding cannot tell otherwise.
    fn raw(obj: &Bound<'_, PyAny>, size: Option<u64>, what: &str) -> PyResult<Memory> {
        let py = obj.py();
        let addr: u64 = obj.extract().map_err(|_| {
            errors::invalid(py, &format!("{what}: an address is an int in 1 … 2**64-1"))
        })?;
        let Some(len) = size else {
            return Err(PyTypeError::new_err(format!(
                "{what} is an address: its size must be given too"
            )));
        };
        if addr == 0 {
            return Err(errors::invalid(py, &format!("{what} is the null address")));
        }
        if len == 0 {
            return Err(errors::invalid(py, &format!("{what}: size 0")));
        }
        if addr.checked_add(len).is_none() {
            return Err(errors::invalid(
                py,
                &format!("{what}: {addr:#x} + {len} overflows"),
            ));
        }
        Ok(Memory {
            addr,
            len,
            writable: true,
            what: what.into(),
            keep: Arc::new(Keep::Nothing),
        })
    }

    /// Memory that the binding allocated for one call (a new `bytes` being filled): valid, and
    /// written by nobody else, until that call returns. Like a raw address, it is never shared
    /// with another call.
    pub(crate) fn of_call(addr: *mut u8, len: u64, what: &str) -> Memory {
        Memory {
            addr: addr as u64,
            len,
            writable: true,
            what: what.into(),
            keep: Arc::new(Keep::Nothing),
        }
    }

    /// Whether this keeps its memory valid itself for as long as it (or a clone) lives: a
    /// Python buffer's export or an engine `Buffer`'s mapping, not a raw address, which is
    /// valid only as long as its caller vouched.
    pub(crate) fn keeps_itself(&self) -> bool {
        !matches!(*self.keep, Keep::Nothing)
    }
}

/// A copy of the first `size` bytes (all when `None`) of any C-contiguous buffer `obj`.
/// `bytes` are copied directly; other buffers through a byte view of them, by the
/// interpreter's own copy (no Rust reference over memory that other threads may write).
pub(crate) fn copy_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<pyo3::types::PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a buffer (bytes, bytearray, memoryview, a numpy array, …); for an \
             address use put_from"
        )));
    }
    let view = PyMemoryView::from(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a buffer (bytes, bytearray, memoryview, a numpy array, …), not {}",
            type_name(obj)
        ))
    })?;
    let c_contiguous: bool = view.getattr("c_contiguous")?.extract()?;
    if !c_contiguous {
        return Err(errors::invalid(
            obj.py(),
            &format!(
                "{what} is not C-contiguous: pass a contiguous array (numpy: np.ascontiguousarray)"
            ),
        ));
    }
    let bytes = view.call_method1("cast", ("B",))?;
    PyBuffer::<u8>::get(&bytes)?.to_vec(obj.py())
}

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
