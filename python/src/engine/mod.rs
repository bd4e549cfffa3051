//! `yuebing.Engine`: a Transfer Engine (its own, or a `Store`'s) over the bridge's
//! [`BlockingEngine`]: its memory, segments and one-request transfers.
//!
//! - [`batch`]: the engine's batches of transfers and the notifications it received (their own
//!   `#[pymethods]` block).
//! - [`buffer`]: `yuebing.Buffer`, memory the engine allocated.

mod batch;
mod buffer;

pub(crate) use self::buffer::Buffer;

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyInt;
use yuebing_bridge::BlockingEngine;
use yuebing_engine::{EngineConfig, RemoteAccess, SegmentHandle, TransferRequest};

use crate::errors;
use crate::memory::{type_name, Access, Memory};
use crate::options::duration;
use crate::pin_table::Range;
use crate::pins::Pins;
use crate::runtime::{self, ForkSafe};
use crate::wait::{run, wait};

/// A Transfer Engine: a segment of this process's registered memory that peers can reach by
/// name, and one-sided reads and writes of peers' segments.
///
/// `Engine(bind="127.0.0.1:0", *, token=None, transport=None, shm=True, timeout=30.0,
/// rdma_nics=None)` starts one whose segment is named by its `host:port` (`name`), which
/// peers pass to `open_segment`. `rdma_nics`: None or "auto" (every active RDMA NIC), "off", or
/// names, comma-separated (a package built without the `rdma` feature, see `yuebing.FEATURES`,
/// takes "auto" and "off" only); `transports` says whether rdma is in use.
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
        let engine = pins.engine();
        let e = engine.engine().clone();
        let done = run(py, engine.bridge(), || async move { e.transfer(req).await });
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

/// The transport `transport` names: None or "auto" (the engine picks), or a transport's name
/// ("tcp", "shm", "rdma", "local").
pub(crate) fn transport_kind(
    py: Python<'_>,
    transport: Option<&str>,
) -> PyResult<Option<yuebing_engine::TransportKind>> {
    match transport {
        None | Some("auto") => Ok(None),
        Some(name) => name
            .parse()
            .map(Some)
            .map_err(|e: yuebing_engine::Error| errors::invalid(py, &format!("{e}, or \"auto\""))),
    }
}

/// The settings an engine of its own takes from Python: where it listens, its forced
/// transport, and its RDMA NICs (`rdma_nics`: "auto", the default, "off" or names).
pub(crate) fn engine_config(
    py: Python<'_>,
    bind: &str,
    transport: Option<yuebing_engine::TransportKind>,
    rdma_nics: Option<&str>,
) -> PyResult<EngineConfig> {
    let mut config = EngineConfig {
        bind: bind.to_string(),
        transport,
        ..EngineConfig::default()
    };
    rdma_nics
        .unwrap_or("auto")
        .parse::<yuebing_engine::RdmaNics>()
        .and_then(|nics| config.set_rdma_nics(nics))
        .map_err(|e| errors::invalid(py, &format!("rdma_nics: {e}")))?;
    Ok(config)
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (bind="127.0.0.1:0", *, token=None, transport=None, shm=true, timeout=30.0,
        rdma_nics=None))]
    fn new(
        py: Python<'_>,
        bind: &str,
        token: Option<String>,
        transport: Option<&str>,
        shm: bool,
        timeout: f64,
        rdma_nics: Option<&str>,
    ) -> PyResult<Engine> {
        let token = token
            .map(yuebing_rpc::Token::new)
            .transpose()
            .map_err(|e| errors::to_py(py, &e.into()))?;
        let transport = transport_kind(py, transport)?;
        let config = EngineConfig {
            token,
            shm,
            default_deadline: duration(py, timeout, "timeout")?,
            ..engine_config(py, bind, transport, rdma_nics)?
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

    /// The transports this engine serves, sorted ("rdma", "shm", "tcp"): "rdma" only where
    /// the package was built with it and a NIC could be used.
    #[getter]
    fn transports(&self) -> Vec<String> {
        let descriptor = self.pins.any_process().engine().engine().descriptor();
        descriptor.transports.into_keys().collect()
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

    fn __repr__(&self) -> String {
        format!("<yuebing.Engine name={}>", self.segment_name())
    }
}
