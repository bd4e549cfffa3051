//! The `Store`'s gets: a value read into a new `bytes` (copied out of staging when small,
//! straight into the new object when large), into the caller's memory, or in two steps, a
//! location first and the read of it after.

use std::future::Future;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use yuebing_store::{Client, Fetched, Fragment, Located, Options};

use super::ranges::{batch_over, multi_ranges, ranges, same_length, Ranges};
use super::Store;
use crate::errors;
use crate::memory::{Access, Memory};
use crate::options;
use crate::types::Location;
use crate::wait::run_store;

#[pymethods]
impl Store {
    /// The value of `key` as bytes. A missing key raises `ObjectNotFound` (a `KeyError`).
    #[pyo3(signature = (key, *, timeout=None, uncached=false))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let opts = options::read(py, timeout, uncached)?;
        self.get_value(py, key, &opts)
    }

    /// Reads `key` into `buffer` without a copy and returns the value's size. `buffer` is any
    /// writable C-contiguous buffer (a bytearray, a numpy array), or an int address with
    /// `size`; a read-only one, or memory in a read-only registration (`register_buffer` of a
    /// `bytes`, a read-only mmap), raises `InvalidArgument` and nothing is written. A buffer
    /// smaller than the value raises `InvalidParams` and nothing is written. Memory not
    /// registered with `register_buffer` is registered for the call's duration.
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None, uncached=false))]
    fn get_into(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<u64> {
        let opts = options::read(py, timeout, uncached)?;
        self.client(py)?;
        let mem = Memory::from_py(buffer, size, Access::Write, "buffer")?;
        self.read_into(py, mem, |c, addr, len| c.get_into(key, addr, len, &opts))
    }

    /// Finds `key` and takes its read lease (as `get` does: until it ends, `remove` without
    /// `force` raises `ObjectHasLease`), without reading it: a `Location` with the value's
    /// `size`, to read with `read_located` into memory sized for it. A missing key raises
    /// `ObjectNotFound`.
    #[pyo3(signature = (key, *, timeout=None))]
    fn locate(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<Location> {
        let opts = options::call(py, timeout)?;
        Ok(Location(self.run(py, |c| c.locate(key, &opts))?))
    }

    /// The value of `key` as bytes when it has at most `inline_max` bytes (the default: what
    /// `get` reads in one call), else its `Location`, not read yet (read it with
    /// `read_located`): one round trip either way, and no copy of a large value.
    #[pyo3(signature = (key, inline_max=INLINE_MAX, *, timeout=None))]
    fn get_or_locate(
        &self,
        py: Python<'_>,
        key: &str,
        inline_max: u64,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let opts = options::call(py, timeout)?;
        match self.run(py, |c| c.get_or_locate(key, inline_max, &opts))? {
            Fetched::Value(value) => Ok(PyBytes::new(py, &value).into_any().unbind()),
            Fetched::Located(found) => Ok(Py::new(py, Location(found))?.into_any()),
        }
    }

    /// Reads a located object into `buffer` without a copy and returns its size, as
    /// `get_into` reads a key (any writable C-contiguous buffer, or an int address with
    /// `size`). A buffer smaller than the object raises `InvalidParams` and nothing is
    /// written; a read that cannot end inside the location's lease raises `LeaseExpired`. The
    /// location stays usable: read it again while its lease lasts.
    #[pyo3(signature = (location, buffer, size=None, *, timeout=None))]
    fn read_located(
        &self,
        py: Python<'_>,
        location: &Bound<'_, Location>,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        self.client(py)?;
        let found = &location.get().0;
        let mem = Memory::from_py(buffer, size, Access::Write, "buffer")?;
        self.read_into(py, mem, |c, addr, len| {
            c.read_located(found, addr, len, &opts)
        })
    }

    /// The value of each key; one entry per key: bytes, or the `YuebingError` instance (not
    /// raised) of a failed item (`ObjectNotFound` for a missing key).
    #[pyo3(signature = (keys, *, timeout=None, uncached=false))]
    fn batch_get(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::read(py, timeout, uncached)?;
        let each = self.run(py, |c| c.batch_get(&keys, &opts))?;
        errors::items(py, each, |py, v| {
            Ok(PyBytes::new(py, &v).into_any().unbind())
        })
    }

    /// Reads each key into its buffer (or int address with `sizes[i]`) without a copy; one
    /// entry per key: the value's size, or the `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, uncached=false))]
    fn batch_get_into(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::read(py, timeout, uncached)?;
        let ranges = ranges(self, py, keys, buffers, sizes, Access::Write)?;
        get_into_ranges_of(self, py, ranges, &opts)
    }

    /// Reads each key into several buffers (or int addresses with `sizes[i][j]`) without a
    /// copy: the object's bytes fill `buffers[i]` in order (per-layer KV blocks). One entry per
    /// key: the value's size, or the `YuebingError` instance of a failed item (buffers with
    /// less room in all than the object: `InvalidParams`, nothing written).
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, uncached=false))]
    fn batch_get_into_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Vec<Bound<'_, PyAny>>>,
        sizes: Option<Vec<Vec<Option<u64>>>>,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::read(py, timeout, uncached)?;
        let ranges = multi_ranges(self, py, keys, buffers, sizes, Access::Write)?;
        get_into_ranges_of(self, py, ranges, &opts)
    }

    /// Reads parts of objects into the caller's memory without a copy: each `(at, offset,
    /// length)` of `fragments[i]` reads `length` bytes at `offset` inside object `keys[i]`
    /// into `buffers[i]` (or an int address with `sizes[i]`) at `at`. One list per item, one
    /// entry per fragment: its length, or the `YuebingError` instance of why it was not read.
    /// A fragment outside its buffer or its object is `InvalidParams` in its place, and the
    /// item's other fragments are still read. Items may repeat a key and a buffer.
    #[pyo3(signature = (keys, buffers, fragments, sizes=None, *, timeout=None, uncached=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_get_ranges(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        fragments: Vec<Vec<(u64, u64, u64)>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        uncached: bool,
    ) -> PyResult<Vec<Vec<Py<PyAny>>>> {
        let opts = options::read(py, timeout, uncached)?;
        same_length(py, keys.len(), "fragment lists", fragments.len())?;
        let client = self.client(py)?;
        let ranges = ranges(self, py, keys, buffers, sizes, Access::Write)?;
        // Each fragment as the client reads it, or `None` where it leaves its buffer.
        let plan: Vec<Vec<Option<Fragment>>> = ranges
            .items
            .iter()
            .zip(&fragments)
            .map(|((_, buffer), frags)| {
                let (addr, len) = buffer[0];
                frags
                    .iter()
                    .map(|&(at, offset, n)| {
                        let end = at.checked_add(n).filter(|&end| end <= len);
                        end.map(|_| Fragment {
                            addr: addr + at,
                            offset,
                            len: n,
                        })
                    })
                    .collect()
            })
            .collect();
        let sent: Vec<Vec<Fragment>> = plan
            .iter()
            .map(|p| p.iter().flatten().copied().collect())
            .collect();
        let items: Vec<(&str, &[Fragment])> = ranges
            .items
            .iter()
            .zip(&sent)
            .map(|((key, _), f)| (key.as_str(), f.as_slice()))
            .collect();
        let each = run_store(py, client, |c| c.batch_get_ranges(&items, &opts));
        // The call's work has stopped: the memory may go.
        drop(ranges);
        let outside = |py| {
            errors::item(
                py,
                yuebing_store::Error::InvalidParams {
                    reason: "the fragment does not fit in its buffer".into(),
                },
            )
        };
        plan.iter()
            .zip(each?)
            .map(|(planned, read)| {
                let mut read = read.into_iter();
                planned
                    .iter()
                    .map(|p| match p {
                        None => Ok(outside(py)),
                        Some(_) => match read.next() {
                            Some(Ok(n)) => Ok(n.into_pyobject(py)?.into_any().unbind()),
                            Some(Err(e)) => Ok(errors::item(py, e)),
                            None => Err(errors::invalid(py, "fewer results than fragments")),
                        },
                    })
                    .collect()
            })
            .collect()
    }
}

impl Store {
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
pub(crate) const INLINE_MAX: u64 = super::write::ZERO_COPY_MIN - 1;

/// `Store.batch_get_into` and `Store.batch_get_into_buffers`: each key read into its
/// buffers; one entry per key, its size or its error.
fn get_into_ranges_of(
    store: &Store,
    py: Python<'_>,
    ranges: Ranges<'_>,
    opts: &Options,
) -> PyResult<Vec<Py<PyAny>>> {
    let client = store.client(py)?;
    let call =
        |c: &Client, items: &[(String, Vec<(u64, u64)>)]| c.batch_get_into_buffers(items, opts);
    batch_over(py, client, ranges, call, |py, n: u64| {
        Ok(n.into_pyobject(py)?.into_any().unbind())
    })
}
