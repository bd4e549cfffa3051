//! `yuebing_engine_*`: a transfer engine (standalone, or a store client's), its memory, its
//! segments, and single transfers in blocking and callback forms.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use yuebing_engine::{
    EngineBuffer, EngineConfig, Location, Region, RemoteAccess, SegmentHandle, TransportKind,
};

use crate::BlockingEngine;

use super::bridge_api::resolve;
use super::deliver::{self, Op};
use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::store_ops::check_range;
use super::types::*;

/// What C registered or allocated through an engine's handles, as registered: the region's
/// serial tells it from a later registration at the same address (one made after something
/// else, such as Rust code holding the same client, unregistered it).
struct Owned {
    region: Region,
    /// The engine buffer allocated there (None: caller memory).
    _buffer: Option<Arc<EngineBuffer>>,
}

/// The handles of an engine object, the calls under way on its memory, and that memory.
struct State {
    owned: HashMap<u64, Owned>,
    /// C handles that name this object (engine handles, and the store handle it came with).
    handles: usize,
    /// Calls that register, allocate or unregister through it now.
    busy: usize,
    /// Its last handle was destroyed: no such call starts any more.
    closed: bool,
}

/// An engine as C holds it: the engine, and the memory registered or allocated through its
/// handles, unregistered when the last of them (a store's included) is destroyed. Calls hold
/// clones of the object while they run, so its end is not left to its `Drop`: the destroy of
/// the last handle closes it, waits for the calls that change its memory (later ones are
/// refused) and unregisters that memory before it returns.
pub(crate) struct EngineObject {
    pub(crate) engine: BlockingEngine,
    state: Mutex<State>,
    idle: Condvar,
}

/// One call on an engine object's memory, counted until dropped (see [`EngineObject::enter`]).
struct Busy<'a>(&'a EngineObject);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.busy -= 1;
        if state.busy == 0 {
            self.0.idle.notify_all();
        }
    }
}

impl EngineObject {
    pub(crate) fn new(engine: BlockingEngine) -> Arc<EngineObject> {
        Arc::new(EngineObject {
            engine,
            state: Mutex::new(State {
                owned: HashMap::new(),
                handles: 0,
                busy: 0,
                closed: false,
            }),
            idle: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new C handle for this object, made by `object`; its destroy must call
    /// [`EngineObject::release`]. Refused once the object's last handle was destroyed.
    pub(crate) fn insert(
        self: &Arc<Self>,
        object: impl FnOnce(Arc<Self>) -> Object,
    ) -> FfiResult<u64> {
        {
            let mut state = self.lock();
            if state.closed {
                return Err(Failure::handle("the engine's last handle was destroyed"));
            }
            state.handles += 1;
        }
        handles::insert(object(self.clone())).inspect_err(|_| self.release())
    }

    /// One of this object's handles was destroyed. At the last one, waits for the calls
    /// changing its memory to return and unregisters everything registered or allocated
    /// through its handles: no byte of it is touched after this returns.
    pub(crate) fn release(&self) {
        let owned = {
            let mut state = self.lock();
            state.handles = state.handles.saturating_sub(1);
            if state.handles > 0 {
                return;
            }
            state.closed = true;
            while state.busy > 0 {
                state = self.idle.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            std::mem::take(&mut state.owned)
        };
        self.unregister_all(owned);
    }

    /// Counts a call that registers, allocates or unregisters through this object, unless
    /// its last handle was destroyed (a call that looked the handle up just before).
    fn enter(&self) -> FfiResult<Busy<'_>> {
        let mut state = self.lock();
        if state.closed {
            return Err(Failure::handle("the engine's handle was destroyed"));
        }
        state.busy += 1;
        Ok(Busy(self))
    }

    /// Records what was registered at `region`.
    fn record(&self, region: Region, buffer: Option<Arc<EngineBuffer>>) {
        let owned = Owned {
            region,
            _buffer: buffer,
        };
        self.lock().owned.insert(region.addr, owned);
    }

    /// Unregisters each recorded registration that is still in place.
    fn unregister_all(&self, owned: HashMap<u64, Owned>) {
        for (addr, o) in owned {
            if let Err(e) = self.engine.engine().unregister_region(&o.region) {
                tracing::debug!(addr, error = %e, "unregister at engine destroy");
            }
        }
    }
}

/// What a forked child's destroy leaves of an object it inherited: the parent's registrations
/// and engine, whose release would write memory the child shares with its parent (the
/// shared-memory transport's status page marks exports released for the parent's peers). It is
/// leaked: the child's copy of it goes when the child exits.
pub(crate) fn inherited<T>(object: T) {
    std::mem::forget(object);
}

impl Drop for EngineObject {
    /// Only for an object whose handles were never all released (a failed start): what
    /// [`EngineObject::release`] did not unregister is unregistered now.
    fn drop(&mut self) {
        let owned = std::mem::take(&mut self.lock().owned);
        self.unregister_all(owned);
    }
}

/// Peers' rights from a `YUEBING_ACCESS_*` value.
fn access(v: u32) -> FfiResult<RemoteAccess> {
    Ok(match v {
        YUEBING_ACCESS_LOCAL_ONLY => RemoteAccess::LOCAL_ONLY,
        YUEBING_ACCESS_READ => RemoteAccess::READ,
        YUEBING_ACCESS_WRITE => RemoteAccess::WRITE,
        YUEBING_ACCESS_READ_WRITE => RemoteAccess::READ_WRITE,
        other => return Err(Failure::invalid(format!("unknown access {other}"))),
    })
}

/// An engine's config from C.
///
/// # Safety
/// `c`'s strings are NULL or NUL-terminated.
unsafe fn engine_config(c: &yuebing_engine_config) -> FfiResult<EngineConfig> {
    if c.flags & !YUEBING_ENGINE_NO_SHM != 0 {
        return Err(Failure::invalid(format!(
            "unknown engine flags {:#x}",
            c.flags
        )));
    }
    let mut cfg = EngineConfig::default();
    // SAFETY: forwarded.
    if let Some(bind) = unsafe { raw::optional_text(c.bind, "bind") }? {
        cfg.bind = bind;
    }
    // SAFETY: forwarded.
    if let Some(t) = unsafe { raw::optional_text(c.token, "token") }? {
        cfg.token = Some(yuebing_rpc::Token::new(t).map_err(crate::Error::from)?);
    }
    cfg.transport = match c.transport {
        YUEBING_TRANSPORT_AUTO => None,
        YUEBING_TRANSPORT_TCP => Some(TransportKind::Tcp),
        YUEBING_TRANSPORT_SHM => Some(TransportKind::Shm),
        YUEBING_TRANSPORT_RDMA => Some(TransportKind::Rdma),
        other => return Err(Failure::invalid(format!("unknown transport {other}"))),
    };
    cfg.shm = c.flags & YUEBING_ENGINE_NO_SHM == 0;
    Ok(cfg)
}

/// Starts an engine on `bridge` (0: the default bridge) and blocks until it serves;
/// `config` may be NULL for the defaults.
///
/// # Safety
/// `config` NULL or readable, its strings NUL-terminated; `out` writable; `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_new(
    bridge: yuebing_bridge_t,
    config: *const yuebing_engine_config,
    out: *mut yuebing_engine_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        let cfg = match config.is_null() {
            true => EngineConfig::default(),
            // SAFETY: non-NULL, readable, strings NUL-terminated (the caller's promise).
            false => unsafe { engine_config(&config.read()) }?,
        };
        let engine = BlockingEngine::start(&resolve(bridge)?, cfg)?;
        let h = EngineObject::new(engine).insert(Object::Engine)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// Releases an engine handle. When it was the engine's last handle (a store's counts as one),
/// it first waits for the calls that register, allocate or unregister through these handles
/// on other threads to return (one that starts later fails with
/// `YUEBING_ERR_INVALID_HANDLE`), then unregisters every range registered or allocated through
/// them: after this returns none of that memory is touched, and allocated buffers are freed.
/// It does not wait for transfers in flight: those touching that memory fail, the others end
/// normally, callbacks included.
/// In a forked child the handle is removed and `YUEBING_ERR_FORKED` returned, with nothing
/// unregistered or freed: the registrations, and the shared-memory transport's status page
/// that releasing them writes, are shared with the parent, whose peers would see its memory
/// released. The child's copy goes when it exits.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_destroy(
    engine: yuebing_engine_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        if let Object::Engine(e) = handles::remove(engine, Kind::Engine)? {
            if let Err(forked) = e.engine.bridge().not_forked() {
                inherited(e);
                return Err(forked.into());
            }
            e.release();
        }
        Ok(())
    })
}

/// Copies the engine's segment name (what peers pass to `yuebing_engine_open_segment`),
/// NUL-terminated, into `buf` of `cap` bytes; its length (without the NUL) goes to `len_out`.
/// `YUEBING_ERR_INVALID_ARGUMENT` if it does not fit (`len_out` still says how long it is).
///
/// # Safety
/// `buf` valid for `cap` bytes of writes; `len_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_name(
    engine: yuebing_engine_t,
    buf: *mut c_char,
    cap: usize,
    len_out: *mut usize,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out_array(buf, cap, "buf")?;
        let e = handles::engine(engine)?;
        // SAFETY: forwarded contract.
        unsafe { raw::write_text(buf, cap, len_out, e.engine.name(), "the name") }
    })
}

/// Allocates `len` bytes of engine memory (memfd-backed, zeroed) registered with `access`
/// (`YUEBING_ACCESS_*`) for peers; its address goes to `addr_out`. The engine owns it: it is
/// freed by `yuebing_engine_unregister(addr)` or when the engine's last handle is destroyed.
///
/// # Safety
/// `addr_out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_allocate(
    engine: yuebing_engine_t,
    len: usize,
    access: u32,
    addr_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(addr_out, "addr_out")?;
        let remote = self::access(access)?;
        let e = handles::engine(engine)?;
        let _busy = e.enter()?;
        let buffer = e.engine.allocate_exported(len, true, remote)?;
        let addr = buffer.addr();
        // A fresh mapping, which this call holds: its region is still the one just made.
        let region = e
            .engine
            .engine()
            .memory()
            .find(addr, buffer.len() as u64)
            .ok_or(yuebing_engine::Error::AddressNotRegistered { addr })?;
        e.record(region, Some(buffer));
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(addr_out, addr) };
        Ok(())
    })
}

/// Registers caller memory `[addr, addr + len)` at `location` ("cpu:0" when NULL) with
/// `access` (`YUEBING_ACCESS_*`) for peers.
///
/// # Safety
/// The memory stays valid until it is unregistered (by `yuebing_engine_unregister`, or by
/// destroying the engine's last handle), and the caller neither frees it nor relies on its
/// contents while transfers may run: the engine and, as `access` allows, peers read and write
/// it at any time. `location` NULL or NUL-terminated; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_register(
    engine: yuebing_engine_t,
    addr: *mut c_void,
    len: usize,
    location: *const c_char,
    access: u32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        if addr.is_null() {
            return Err(Failure::invalid("addr is NULL"));
        }
        check_range(addr as u64, len as u64)?;
        let remote = self::access(access)?;
        // SAFETY: NULL or NUL-terminated (the caller's promise).
        let location: Location = match unsafe { raw::optional_text(location, "location") }? {
            Some(l) => l.parse()?,
            None => Location::default(),
        };
        let e = handles::engine(engine)?;
        let _busy = e.enter()?;
        // SAFETY: the memory stays valid and untouched by the caller until unregistered (the
        // caller's promise, which is `register`'s contract; no Rust reference exists over C
        // memory).
        let region = unsafe {
            e.engine
                .register_exported(addr.cast(), len, location, remote)
        }?;
        e.record(region, None);
        Ok(())
    })
}

/// Unregisters the range that starts at `addr`, registered or allocated through this engine's
/// C handles (anything else, such as a store client's own memory, is
/// `YUEBING_ERR_ADDRESS_NOT_REGISTERED`): transfers touching it fail, and after this returns no
/// byte of it is read or written. Allocated memory is freed.
///
/// In a forked child: `YUEBING_ERR_FORKED`, nothing unregistered (see
/// `yuebing_engine_destroy`).
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_unregister(
    engine: yuebing_engine_t,
    addr: u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let e = handles::engine(engine)?;
        e.engine.bridge().not_forked()?;
        let _busy = e.enter()?;
        let owned = e.lock().owned.remove(&addr);
        let owned = owned.ok_or(yuebing_engine::Error::AddressNotRegistered { addr })?;
        // Not in place any more (unregistered through the Rust API since): nothing of ours to
        // undo, and whatever is registered there now is left alone.
        e.engine.engine().unregister_region(&owned.region)?;
        Ok(())
    })
}

unsafe fn open_segment_op(engine: yuebing_engine_t, name: *const c_char) -> FfiResult<Op<u64>> {
    let e = handles::engine(engine)?;
    // SAFETY: forwarded contract.
    let name = unsafe { raw::text(name, "name") }?;
    let engine = e.engine.engine().clone();
    Ok(Op::new(e.engine.bridge(), async move {
        engine.open_segment(&name).await
    })
    .map(SegmentHandle::to_raw))
}

/// Opens the segment of the engine named `name` (its `yuebing_engine_name`); the segment goes
/// to `segment_out`, for transfers.
///
/// # Safety
/// `name` NUL-terminated; `segment_out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_open_segment(
    engine: yuebing_engine_t,
    name: *const c_char,
    segment_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(segment_out, "segment_out")?;
        // SAFETY: forwarded contract.
        let segment = unsafe { open_segment_op(engine, name) }?.wait()?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(segment_out, segment) };
        Ok(())
    })
}

/// Opens a segment by name (callback form: the segment is the callback's value). Returns 0
/// and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// `name` NUL-terminated; `user_data` usable on the callback thread; `call_out` and `err`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_open_segment_async(
    engine: yuebing_engine_t,
    name: *const c_char,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: forwarded contract.
        unsafe { open_segment_op(engine, name) }?.then(call_out, deliver)
    })
}

/// Closes a segment opened by `yuebing_engine_open_segment` (transfers to it fail from then on).
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_close_segment(
    engine: yuebing_engine_t,
    segment: u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let e = handles::engine(engine)?;
        e.engine.close_segment(SegmentHandle::from_raw(segment))?;
        Ok(())
    })
}

/// A single transfer of `request`.
fn transfer_op(engine: yuebing_engine_t, request: &yuebing_request) -> FfiResult<Op<()>> {
    let request = super::batch_api::request(request)?;
    let e = handles::engine(engine)?;
    let engine = e.engine.engine().clone();
    Ok(Op::new(e.engine.bridge(), async move {
        engine.transfer(request).await
    }))
}

/// Runs one transfer (`YUEBING_OP_READ` or `YUEBING_OP_WRITE`) and returns when it is final:
/// 0 only if every byte landed. Its local range is touched until then, and never after.
///
/// # Safety
/// `request` readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_transfer(
    engine: yuebing_engine_t,
    request: *const yuebing_request,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let request = unsafe { super::batch_api::read_request(request) }?;
        transfer_op(engine, &request)?.wait()
    })
}

/// Runs one transfer (callback form; the callback comes once it is final, so its local range
/// is untouched from then on). Returns 0 and then calls `cb` exactly once, or returns an error
/// and never calls it.
///
/// # Safety
/// `request` readable; `user_data` usable on the callback thread; `call_out` and `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_transfer_async(
    engine: yuebing_engine_t,
    request: *const yuebing_request,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: forwarded contract.
        let request = unsafe { super::batch_api::read_request(request) }?;
        transfer_op(engine, &request)?.then(call_out, deliver)
    })
}

/// The request of `yuebing_engine_read`/`_write`.
fn request_of(
    opcode: u32,
    source: u64,
    segment: u64,
    target_offset: u64,
    length: u64,
) -> yuebing_request {
    yuebing_request {
        opcode,
        source,
        segment,
        target_offset,
        length,
    }
}

/// Reads `length` bytes at `target_offset` of `segment` into local registered memory at
/// `source` (a `yuebing_engine_transfer` of `YUEBING_OP_READ`).
///
/// # Safety
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_read(
    engine: yuebing_engine_t,
    source: u64,
    segment: u64,
    target_offset: u64,
    length: u64,
    err: *mut yuebing_error,
) -> i32 {
    let request = request_of(YUEBING_OP_READ, source, segment, target_offset, length);
    // SAFETY: `request` is a local; `err` forwarded.
    unsafe { yuebing_engine_transfer(engine, &request, err) }
}

/// Writes `length` bytes of local registered memory at `source` to `target_offset` of
/// `segment` (a `yuebing_engine_transfer` of `YUEBING_OP_WRITE`).
///
/// # Safety
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_write(
    engine: yuebing_engine_t,
    source: u64,
    segment: u64,
    target_offset: u64,
    length: u64,
    err: *mut yuebing_error,
) -> i32 {
    let request = request_of(YUEBING_OP_WRITE, source, segment, target_offset, length);
    // SAFETY: `request` is a local; `err` forwarded.
    unsafe { yuebing_engine_transfer(engine, &request, err) }
}

/// `yuebing_engine_read` in callback form.
///
/// # Safety
/// As `yuebing_engine_transfer_async`.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_read_async(
    engine: yuebing_engine_t,
    source: u64,
    segment: u64,
    target_offset: u64,
    length: u64,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    let request = request_of(YUEBING_OP_READ, source, segment, target_offset, length);
    // SAFETY: `request` is a local; the rest forwarded.
    unsafe { yuebing_engine_transfer_async(engine, &request, cb, user_data, call_out, err) }
}

/// `yuebing_engine_write` in callback form.
///
/// # Safety
/// As `yuebing_engine_transfer_async`.
#[no_mangle]
pub unsafe extern "C" fn yuebing_engine_write_async(
    engine: yuebing_engine_t,
    source: u64,
    segment: u64,
    target_offset: u64,
    length: u64,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    let request = request_of(YUEBING_OP_WRITE, source, segment, target_offset, length);
    // SAFETY: `request` is a local; the rest forwarded.
    unsafe { yuebing_engine_transfer_async(engine, &request, cb, user_data, call_out, err) }
}
