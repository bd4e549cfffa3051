//! The store client's calls of one key in their blocking and callback forms: each
//! `yuebing_store_X` waits, each `yuebing_store_X_async` hands the outcome to a callback. The
//! arguments are checked by one `X_op` per call, shared by both forms.

use std::ffi::{c_char, c_void};

use super::deliver::{self, required, Op, UserData};
use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::raw;
use super::store_api::{target, text_op};
use super::types::*;
use crate::BlockingClient;
use yuebing_store::{Client, Options, Write};

/// Waits for a number and writes it through `out` (NULL: not wanted).
pub(crate) fn wait_number(out: *mut u64, op: Op<u64>) -> FfiResult<()> {
    let v = op.wait()?;
    // SAFETY: NULL or writable (the caller's promise).
    unsafe { raw::write(out, v) };
    Ok(())
}

/// `put` on the client and the options [`target`] decoded (their `write` says put or
/// upsert): the value is copied before the function returns.
///
/// # Safety
/// `key` NULL or NUL-terminated; `data` NULL or valid for `len` bytes.
unsafe fn put_op(
    (client, opts): (BlockingClient, Options),
    key: *const c_char,
    data: *const u8,
    len: usize,
) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (key, value) = unsafe { (raw::text(key, "key")?, raw::bytes(data, len, "data")?) };
    Ok(Op::new(
        client.bridge(),
        client.client().put(key, &value, opts),
    ))
}

/// [`target`] for `upsert`: the options decoded as if they had `YUEBING_OPT_UPSERT`, so that
/// `upsert` is `put` with that bit.
///
/// # Safety
/// `opts` NULL or readable.
unsafe fn upsert_target(
    store: yuebing_store_t,
    opts: *const yuebing_options,
) -> FfiResult<(BlockingClient, Options)> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    Ok((client, opts.with_write(Write::Upsert)))
}

/// `put_from`: registered memory, read until the call ends.
unsafe fn put_from_op(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let key = unsafe { raw::text(key, "key") }?;
    check_range(addr, len)?;
    Ok(Op::new(
        client.bridge(),
        client.client().put_from(key, addr, len, opts),
    ))
}

/// `put_parts`: the parts are copied, one after the other, before the function returns.
unsafe fn put_parts_op(
    store: yuebing_store_t,
    key: *const c_char,
    parts: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (key, parts) = unsafe {
        (
            raw::text(key, "key")?,
            raw::buffers(parts, lens, n, ("parts", "a part"))?,
        )
    };
    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    Ok(Op::new(
        client.bridge(),
        client.client().put_parts(key, &parts, opts),
    ))
}

/// A yes/no argument: 0 or 1 (a C `bool` or an integer from any FFI); anything else is
/// refused.
pub(crate) fn switch(v: u32, what: &str) -> FfiResult<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(Failure::invalid(format!(
            "{what} is {other}: expected 0 or 1"
        ))),
    }
}

/// A range whose end overflows is refused before anything starts.
pub(crate) fn check_range(addr: u64, len: u64) -> FfiResult<()> {
    match addr.checked_add(len) {
        Some(_) => Ok(()),
        None => Err(Failure::invalid(format!("range {addr:#x}+{len} overflows"))),
    }
}

unsafe fn get_op(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
) -> FfiResult<Op<Vec<u8>>> {
    // SAFETY: forwarded contract.
    unsafe { text_op(store, (key, "key"), opts, Client::get) }
}

/// Waits for bytes and hands them over in `out` (free with `yuebing_buf_free`).
fn wait_bytes(out: *mut yuebing_buf, op: Op<Vec<u8>>) -> FfiResult<()> {
    raw::check_out(out, "out")?;
    let v = op.wait()?;
    // SAFETY: checked non-NULL; writable (the caller's promise).
    unsafe { raw::write(out, raw::into_buf(v)) };
    Ok(())
}

/// Delivery to a [`yuebing_bytes_cb`].
fn bytes_cb(
    cb: yuebing_bytes_cb,
    user_data: *mut c_void,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<Vec<u8>>) + Send + 'static> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    Ok(move |code, msg, v: Option<Vec<u8>>| {
        let v = v.unwrap_or_default();
        // SAFETY: the caller's callback for this call, called once; `v` outlives the call.
        unsafe { f(ud.get(), code, msg, raw::data_or_null(&v), v.len()) }
    })
}

unsafe fn get_into_op(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let key = unsafe { raw::text(key, "key") }?;
    check_range(addr, len)?;
    Ok(Op::new(
        client.bridge(),
        client.client().get_into(key, addr, len, opts),
    ))
}

unsafe fn exist_op(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    Ok(unsafe { text_op(store, (key, "key"), opts, Client::exist) }?.map(u64::from))
}

unsafe fn get_size_op(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    unsafe { text_op(store, (key, "key"), opts, Client::get_size) }
}

unsafe fn remove_op(
    store: yuebing_store_t,
    key: *const c_char,
    force: u32,
    opts: *const yuebing_options,
) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let key = unsafe { raw::text(key, "key") }?;
    let force = switch(force, "force")?;
    Ok(Op::new(
        client.bridge(),
        client.client().remove(key, force, opts),
    ))
}

/// Stores `len` bytes at `data` under `key` (copied before the function returns);
/// `YUEBING_ERR_OBJECT_ALREADY_EXISTS` if the key exists, unless `opts` has
/// `YUEBING_OPT_UPSERT` (then it replaces the value).
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put(
    store: yuebing_store_t,
    key: *const c_char,
    data: *const u8,
    len: usize,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        unsafe { put_op(target(store, opts)?, key, data, len) }?.wait()
    })
}

/// Stores `len` bytes at `data` under `key` (copied before the function returns);
/// `YUEBING_ERR_OBJECT_ALREADY_EXISTS` if the key exists, unless `opts` has
/// `YUEBING_OPT_UPSERT` (then it replaces the value).
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put_async(
    store: yuebing_store_t,
    key: *const c_char,
    data: *const u8,
    len: usize,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { put_op(target(store, opts)?, key, data, len) }?.then(call_out, deliver)
    })
}

/// Stores `len` bytes at `data` under `key`, replacing an existing value: shorthand for
/// `yuebing_store_put` with `YUEBING_OPT_UPSERT` in `opts` (the other put forms take that bit).
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_upsert(
    store: yuebing_store_t,
    key: *const c_char,
    data: *const u8,
    len: usize,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        unsafe { put_op(upsert_target(store, opts)?, key, data, len) }?.wait()
    })
}

/// Stores `len` bytes at `data` under `key`, replacing an existing value: shorthand for
/// `yuebing_store_put_async` with `YUEBING_OPT_UPSERT` in `opts`.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_upsert_async(
    store: yuebing_store_t,
    key: *const c_char,
    data: *const u8,
    len: usize,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { put_op(upsert_target(store, opts)?, key, data, len) }?.then(call_out, deliver)
    })
}

/// Stores `len` bytes of memory registered with the client's engine under `key`, without a
/// copy; the memory is read until the call ends. `YUEBING_ERR_OBJECT_ALREADY_EXISTS` if the
/// key exists, unless `opts` has `YUEBING_OPT_UPSERT` (then it replaces the value).
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put_from(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        unsafe { put_from_op(store, key, addr, len, opts) }?.wait()
    })
}

/// Stores `len` bytes of memory registered with the client's engine under `key`, without a
/// copy; the memory is read until the call ends. `YUEBING_ERR_OBJECT_ALREADY_EXISTS` if the
/// key exists, unless `opts` has `YUEBING_OPT_UPSERT` (then it replaces the value).
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put_from_async(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { put_from_op(store, key, addr, len, opts) }?.then(call_out, deliver)
    })
}

/// Stores the concatenation of `n` parts (`parts[i]` of `lens[i]` bytes, copied once before
/// the function returns) under `key`: a value gathered from buffers that are not contiguous.
/// `YUEBING_ERR_OBJECT_ALREADY_EXISTS` if the key exists, unless `opts` has
/// `YUEBING_OPT_UPSERT` (then it replaces the value).
///
/// # Safety
/// `key` NUL-terminated; `parts` and `lens` valid for `n` elements, each part for its length;
/// `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put_parts(
    store: yuebing_store_t,
    key: *const c_char,
    parts: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        unsafe { put_parts_op(store, key, parts, lens, n, opts) }?.wait()
    })
}

/// `yuebing_store_put_parts` in callback form: returns 0 and then calls `cb` exactly once
/// (on a bridge thread), or returns an error and never calls it. With `call_out`, a call
/// handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_put_parts`; `user_data` may be used on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_put_parts_async(
    store: yuebing_store_t,
    key: *const c_char,
    parts: *const *const u8,
    lens: *const usize,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { put_parts_op(store, key, parts, lens, n, opts) }?.then(call_out, deliver)
    })
}

/// The value of `key`: the blocking form hands it over in `out` (free it with
/// `yuebing_buf_free`); the callback form lends it to the callback.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    out: *mut yuebing_buf,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_bytes(out, unsafe { get_op(store, key, opts) }?)
    })
}

/// The value of `key`: the blocking form hands it over in `out` (free it with
/// `yuebing_buf_free`); the callback form lends it to the callback.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_async(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_bytes_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = bytes_cb(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { get_op(store, key, opts) }?.then(call_out, deliver)
    })
}

/// Reads `key` into `len` bytes of memory registered with the client's engine, without a
/// copy; its size goes to `out` (NULL: not wanted). The memory is written until the call
/// ends: a cancelled call's callback comes only once nothing writes there any more.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_into(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_number(out, unsafe { get_into_op(store, key, addr, len, opts) }?)
    })
}

/// Reads `key` into `len` bytes of memory registered with the client's engine, without a
/// copy; its size goes to `out` (NULL: not wanted). The memory is written until the call
/// ends: a cancelled call's callback comes only once nothing writes there any more.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_into_async(
    store: yuebing_store_t,
    key: *const c_char,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { get_into_op(store, key, addr, len, opts) }?.then(call_out, deliver)
    })
}

/// Whether `key` exists: 1 or 0 in `out`.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_exist(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_number(out, unsafe { exist_op(store, key, opts) }?)
    })
}

/// Whether `key` exists: 1 or 0 in `out`.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_exist_async(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { exist_op(store, key, opts) }?.then(call_out, deliver)
    })
}

/// The size of `key`'s value in `out`.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_size(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_number(out, unsafe { get_size_op(store, key, opts) }?)
    })
}

/// The size of `key`'s value in `out`.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_size_async(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { get_size_op(store, key, opts) }?.then(call_out, deliver)
    })
}

/// Removes `key` (`force` 1: even while readers hold leases on it; 0 or 1).
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove(
    store: yuebing_store_t,
    key: *const c_char,
    force: u32,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        unsafe { remove_op(store, key, force, opts) }?.wait()
    })
}

/// Removes `key` (`force` 1: even while readers hold leases on it; 0 or 1).
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove_async(
    store: yuebing_store_t,
    key: *const c_char,
    force: u32,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { remove_op(store, key, force, opts) }?.then(call_out, deliver)
    })
}
