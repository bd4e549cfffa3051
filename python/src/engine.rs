//! `yuebing.Engine`: a Transfer Engine (its own, or a `Store`'s) over the bridge's
//! [`BlockingEngine`], and `yuebing.Buffer`, memory the engine allocated. Batches of transfers
//! are in `engine_batch`.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt};
use yuebing_bridge::BlockingEngine;
use yuebing_engine::{EngineBuffer, EngineConfig, RemoteAccess, SegmentHandle, TransferRequest};

use crate::memory::{type_name, Access, Memory};
use crate::options::duration;
use crate::pin_table::Range;
use crate::pins::Pins;
use crate::runtime::{self, ForkSafe};
use crate::wait::wait;
use crate::{engine_batch, errors};

/// A Transfer Engine: a segment of this process's registered memory that peers can reach by
/// name, and one-sided reads and writes of peers' segments.
///
/// `Engine(bind="127.0.0.1:0", *, token=None, transport=None, shm=True, timeout=30.0)` starts
/// one whose segment is named by its `host:port` (`name`), which peers pass to `open_segment`.
/// `Store.engine` is the engine of a store client. Local memory of a transfer is any
/// C-contiguous buffer or an int address with a length; memory that is not registered is
/// registered for the call's duration (local-only). Memory peers may reach must be allocated
/// (`allocate(..., remote="rw")`) or registered with `register(..., remote=...)`.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct Engine {
    pins: ForkSafe<Arc<Pins>>,
}

impl Engine {
    /// The engine whose registrations `pins` keeps (a store's), owned by the process that
    /// made them.
    pub(crate) fn shared(pins: ForkSafe<Arc<Pins>>) -> Engine {
        Engine { pins }
    }

    /// The engine, unless this is a forked child (`Forked`).
    pub(crate) fn engine(&self, py: Python<'_>) -> PyResult<&BlockingEngine> {
        Ok(self.pins.get(py)?.engine())
    }

    /// The engine's registrations, shared with a `Store` made on this engine; `Forked` in a
    /// forked child.
    pub(crate) fn pins(&self, py: Python<'_>) -> PyResult<&Arc<Pins>> {
        self.pins.get(py)
    }

    /// The engine's segment name, in any process (a string of its own).
    fn segment_name(&self) -> &str {
        self.pins.any_process().engine().name()
    }

    /// One transfer between local memory and a peer's segment, with the local memory held.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        py: Python<'_>,
        write: bool,
        local: &Bound<'_, PyAny>,
        segment: u64,
        remote_addr: u64,
        length: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let access = match write {
            true => Access::Read,
            false => Access::Write,
        };
        let mem = Memory::from_py(local, length, access, "local")?;
        let remote = span(py, remote_addr, mem.len, "remote_addr")?;
        let target = SegmentHandle::from_raw(segment);
        let mut req = match write {
            true => TransferRequest::write(mem.addr, target, remote_addr, mem.len),
            false => TransferRequest::read(mem.addr, target, remote_addr, mem.len),
        };
        if let Some(t) = timeout {
            req = req.with_deadline(duration(py, t, "timeout")?);
        }
        let pins = self.pins(py)?;
        let held = pins.hold(py, std::slice::from_ref(&mem), access)?;
        // A write to the engine's own segment writes this engine's memory: never read-only
        // memory (after the local memory is held: see `Pins::own_write`).
        let own = write && target == pins.engine().engine().own_segment();
        let own_write = match own {
            true => Some(pins.own_write(py, remote, "remote_addr")?),
            false => None,
        };
        let done = wait(py, pins.engine().transfer_call(req));
        // The transfer has stopped (even when a signal ended the wait): release the memory.
        drop(own_write);
        drop(held);
        done
    }
}

/// `[addr, addr + len)` of a peer's (or the engine's own) segment, `what` naming `addr`:
/// `InvalidArgument` for the null address, no bytes, or a range that wraps.
pub(crate) fn span(py: Python<'_>, addr: u64, len: u64, what: &str) -> PyResult<Range> {
    if addr == 0 {
        return Err(errors::invalid(py, &format!("{what} is the null address")));
    }
    if len == 0 {
        return Err(errors::invalid(py, &format!("{what}: length 0")));
    }
    match addr.checked_add(len) {
        Some(end) => Ok(Range { start: addr, end }),
        None => Err(errors::invalid(
            py,
            &format!("{what}: {addr:#x} + {len} overflows"),
        )),
    }
}

/// The rights `remote` names: None (local-only), "r", "w" or "rw".
pub(crate) fn remote_access(py: Python<'_>, remote: Option<&str>) -> PyResult<RemoteAccess> {
    match remote {
        None | Some("") => Ok(RemoteAccess::LOCAL_ONLY),
        Some("r") => Ok(RemoteAccess::READ),
        Some("w") => Ok(RemoteAccess::WRITE),
        Some("rw") => Ok(RemoteAccess::READ_WRITE),
        Some(other) => Err(errors::invalid(
            py,
            &format!("remote {other:?} is not None, \"r\", \"w\" or \"rw\""),
        )),
    }
}

/// The address `obj` (the argument `what`) names: an int, a `Buffer`, or a Python buffer's
/// first byte; never 0.
pub(crate) fn address_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    let py = obj.py();
    let addr = if obj.is_instance_of::<PyInt>() {
        obj.extract().map_err(|_| {
            errors::invalid(py, &format!("{what}: an address is an int in 1 … 2**64-1"))
        })?
    } else if let Ok(b) = obj.cast::<Buffer>() {
        b.get().addr
    } else {
        let buf = pyo3::buffer::PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}: expected an int address or a buffer, not {}",
                type_name(obj)
            ))
        })?;
        buf.buf_ptr() as u64
    };
    match addr {
        0 => Err(errors::invalid(py, &format!("{what} is the null address"))),
        addr => Ok(addr),
    }
}

/// The transport `transport` names: None or "auto" (the engine picks), "tcp" or "shm".
pub(crate) fn transport_kind(
    py: Python<'_>,
    transport: Option<&str>,
) -> PyResult<Option<yuebing_engine::TransportKind>> {
    match transport {
        None | Some("auto") => Ok(None),
        Some("tcp") => Ok(Some(yuebing_engine::TransportKind::Tcp)),
        Some("shm") => Ok(Some(yuebing_engine::TransportKind::Shm)),
        Some(other) => Err(errors::invalid(
            py,
            &format!("transport {other:?} is not \"tcp\", \"shm\" or \"auto\""),
        )),
    }
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (bind="127.0.0.1:0", *, token=None, transport=None, shm=true, timeout=30.0))]
    fn new(
        py: Python<'_>,
        bind: &str,
        token: Option<String>,
        transport: Option<&str>,
        shm: bool,
        timeout: f64,
    ) -> PyResult<Engine> {
        let token = token
            .map(yuebing_rpc::Token::new)
            .transpose()
            .map_err(|e| errors::to_py(py, &e.into()))?;
        let transport = transport_kind(py, transport)?;
        let config = EngineConfig {
            bind: bind.to_string(),
            token,
            transport,
            shm,
            default_deadline: duration(py, timeout, "timeout")?,
            ..EngineConfig::default()
        };
        let bridge = runtime::bridge(py)?;
        let engine = wait(py, BlockingEngine::start_call(&bridge, config))?;
        Ok(Engine::shared(ForkSafe::new(Arc::new(Pins::new(engine)))))
    }

    /// The engine's segment name (`host:port`), which peers pass to `open_segment`.
    #[getter]
    fn name(&self) -> String {
        self.segment_name().to_string()
    }

    /// Allocates `size` bytes of engine memory (a `Buffer`), registered: local-only, or with
    /// `remote` rights for peers ("r", "w", "rw"). `prefault` touches every page now.
    #[pyo3(signature = (size, *, remote=None, prefault=true))]
    fn allocate(
        &self,
        py: Python<'_>,
        size: usize,
        remote: Option<&str>,
        prefault: bool,
    ) -> PyResult<Buffer> {
        if size == 0 {
            return Err(errors::invalid(py, "size 0: allocate at least one byte"));
        }
        let rights = remote_access(py, remote)?;
        let engine = self.engine(py)?.clone();
        let buf = py
            .detach(|| engine.allocate_exported(size, prefault, rights))
            .map_err(|e| errors::to_py(py, &e))?;
        Ok(Buffer {
            addr: buf.addr(),
            len: buf.len(),
            state: ForkSafe::new(Mutex::new(Some((engine, buf)))),
        })
    }

    /// Registers `buffer` (any C-contiguous buffer, or an int address with `size`) until
    /// `unregister`: local-only, or with `remote` rights for peers ("r", "w", "rw"; peers
    /// then read or write it at any time). A Python buffer is held meanwhile. Returns its
    /// address. Overlapping a registered range raises `AddressOverlapped`.
    ///
    /// Read-only memory (a `bytes`, a read-only mmap or memoryview) may be registered
    /// local-only or with "r", as a source: a call that would write into it (`read` into it, a
    /// batch's "read", a write to this engine's own segment that lands in it) raises
    /// `InvalidArgument` and moves nothing. With "w" or "rw" it raises `InvalidArgument`. An
    /// int address is taken as writable memory.
    #[pyo3(signature = (buffer, size=None, *, remote=None))]
    fn register(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        remote: Option<&str>,
    ) -> PyResult<u64> {
        let rights = remote_access(py, remote)?;
        let access = match rights.write {
            true => Access::Write,
            false => Access::Read,
        };
        let pins = self.pins(py)?;
        let mem = Memory::from_py(buffer, size, access, "buffer")?;
        pins.register(py, mem, rights)
    }

    /// Ends a registration made by `register` (give the buffer or its address). Transfers
    /// using it now fail; none touches the memory once this returns.
    fn unregister(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let pins = self.pins(py)?;
        let addr = address_of(buffer, "buffer")?;
        pins.unregister(py, addr)
    }

    /// Opens a peer's segment by name (`host:port`, or this engine's own `name`); returns its
    /// handle for transfers and batches.
    fn open_segment(&self, py: Python<'_>, name: &str) -> PyResult<u64> {
        if name.trim().is_empty() {
            return Err(errors::invalid(
                py,
                "name is empty: give a segment name (host:port)",
            ));
        }
        let handle = wait(py, self.engine(py)?.open_segment_call(name))?;
        Ok(handle.to_raw())
    }

    /// Closes a segment handle.
    fn close_segment(&self, py: Python<'_>, segment: u64) -> PyResult<()> {
        self.engine(py)?
            .close_segment(SegmentHandle::from_raw(segment))
            .map_err(|e| errors::to_py(py, &e))
    }

    /// The memory an open segment publishes to peers: `[(address, length, rights)]` with
    /// rights "r", "w" or "rw", in address order.
    fn segment_buffers(&self, py: Python<'_>, segment: u64) -> PyResult<Vec<(u64, u64, String)>> {
        let d = self
            .engine(py)?
            .engine()
            .segment_descriptor(SegmentHandle::from_raw(segment))
            .map_err(|e| errors::engine(py, e))?;
        let rights = |r: RemoteAccess| match (r.read, r.write) {
            (true, true) => "rw",
            (true, false) => "r",
            (false, true) => "w",
            (false, false) => "",
        };
        Ok(d.buffers
            .iter()
            .map(|b| (b.addr, b.len, rights(b.remote).to_string()))
            .collect())
    }

    /// Writes `length` bytes (all of `local` when omitted) from `local` (a buffer, or an int
    /// address with `length`) to `remote_addr` in the open `segment`; returns once they
    /// landed. A target in this engine's own segment that lies in a read-only registration
    /// raises `InvalidArgument` (see `register`).
    #[pyo3(signature = (local, segment, remote_addr, length=None, *, timeout=None))]
    fn write(
        &self,
        py: Python<'_>,
        local: &Bound<'_, PyAny>,
        segment: u64,
        remote_addr: u64,
        length: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        self.transfer(py, true, local, segment, remote_addr, length, timeout)
    }

    /// Reads `length` bytes (all of `local` when omitted) at `remote_addr` in the open
    /// `segment` into `local` (a writable buffer, or an int address with `length`). Local
    /// memory in a read-only registration raises `InvalidArgument` (see `register`).
    #[pyo3(signature = (local, segment, remote_addr, length=None, *, timeout=None))]
    fn read(
        &self,
        py: Python<'_>,
        local: &Bound<'_, PyAny>,
        segment: u64,
        remote_addr: u64,
        length: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        self.transfer(py, false, local, segment, remote_addr, length, timeout)
    }

    /// A new batch for up to `capacity` transfers; returns its id.
    fn allocate_batch(&self, py: Python<'_>, capacity: usize) -> PyResult<u64> {
        engine_batch::allocate(self, py, capacity)
    }

    /// Starts `requests` in `batch`: each `(opcode, local_addr, segment, remote_addr,
    /// length)` with opcode "read" or "write"; the local range must be registered (`register`
    /// or `allocate`) and stay so until its task is final. With `notify` (bytes, ≤ 4 KiB),
    /// the target segment (one for all requests) receives it once every task completed.
    /// Returns the tasks' indices. A bad request (a null address, length 0, a range that
    /// wraps; a "read" into a read-only registration, or a "write" to this engine's own
    /// segment that lands in one) raises `InvalidArgument` naming it, and none starts.
    #[pyo3(signature = (batch, requests, *, notify=None, timeout=None))]
    fn submit(
        &self,
        py: Python<'_>,
        batch: u64,
        requests: Vec<(String, u64, u64, u64, u64)>,
        notify: Option<Vec<u8>>,
        timeout: Option<f64>,
    ) -> PyResult<(usize, usize)> {
        engine_batch::submit(self, py, batch, requests, notify, timeout)
    }

    /// Blocks until every task of `batch` is final; returns its `BatchStatus`. Ctrl-C stops
    /// the wait, not the transfers (`cancel` does).
    fn wait(&self, py: Python<'_>, batch: u64) -> PyResult<crate::types::BatchStatus> {
        engine_batch::wait_batch(self, py, batch)
    }

    /// The `BatchStatus` of `batch` now.
    fn status(&self, py: Python<'_>, batch: u64) -> PyResult<crate::types::BatchStatus> {
        engine_batch::status(self, py, batch)
    }

    /// The `TaskStatus` of task `task` of `batch` now.
    fn task_status(
        &self,
        py: Python<'_>,
        batch: u64,
        task: usize,
    ) -> PyResult<crate::types::TaskStatus> {
        engine_batch::task_status(self, py, batch, task)
    }

    /// Cancels the unfinished tasks of `batch`; returns how many.
    fn cancel(&self, py: Python<'_>, batch: u64) -> PyResult<usize> {
        engine_batch::cancel(self, py, batch)
    }

    /// Frees `batch`, whose tasks must all be final (`Busy` otherwise).
    fn free_batch(&self, py: Python<'_>, batch: u64) -> PyResult<()> {
        engine_batch::free(self, py, batch)
    }

    /// Takes the notifications received so far, oldest first: `[(from_segment, message)]`.
    fn take_notifications<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(String, Bound<'py, PyBytes>)>> {
        Ok(engine_batch::notifications(self, py)?
            .into_iter()
            .map(|n| (n.from, PyBytes::new(py, &n.message)))
            .collect())
    }

    fn __repr__(&self) -> String {
        format!("<yuebing.Engine name={}>", self.segment_name())
    }
}

/// The engine a `Buffer` is registered with and its memory; `None` once freed.
type Allocated = Mutex<Option<(BlockingEngine, Arc<EngineBuffer>)>>;

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
    addr: u64,
    len: usize,
    /// The engine it is registered with and the memory; `None` once freed. Made by the process
    /// that allocated it: a forked child neither uses nor frees it (the memfd mapping and its
    /// status are shared with the parent).
    state: ForkSafe<Allocated>,
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
