//! Where objects are, in blocking and callback forms: `locate` and `get_or_locate` hand over a
//! location (the master's answer for one object, under its read lease) as a checked handle,
//! `read_located` reads one into registered memory, and `replicas` and `batch_replicas` give
//! the answer itself as C structs.
//!
//! A location handle is made where the caller receives it (after the wait, or on the callback
//! thread just before the callback), so that no call that ends another way leaves one behind;
//! it holds its own copy of the answer, so a read in flight is unaffected by its free.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use yuebing_store::master::ReplicaList;
use yuebing_store::{Client, Fetched, Located};

use super::deliver::{self, required, Op, UserData};
use super::error::{c_string, entry, yuebing_error, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::store_api::{target, text_op};
use super::store_batch::{
    fragment_lists, identity, keys_op, then_each, then_each_handles, then_each_lent, wait_each,
    wait_each_handles, wait_each_values, with_fragments,
};
use super::store_ops::{check_range, wait_number};
use super::store_whole::wait_into;
use super::types::*;

/// A new handle for a located object.
fn location_handle(found: Located) -> FfiResult<yuebing_location_t> {
    handles::insert(Object::Location(Arc::new(found)))
}

/// Finds `key` and takes its read lease (as a get does: until it ends, a remove without
/// `force` is `YUEBING_ERR_OBJECT_HAS_LEASE`), without reading it; its location goes to `out`
/// (yours: release it with `yuebing_location_free`). Read it with `yuebing_store_read_located`
/// into memory of `yuebing_location_size` bytes.
///
/// # Safety
/// `key` NUL-terminated; `opts` NULL or readable; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_locate(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    out: *mut yuebing_location_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        // SAFETY: forwarded contract.
        let found = unsafe { text_op(store, (key, "key"), opts, Client::locate) }?.wait()?;
        let h = location_handle(found)?;
        // SAFETY: checked non-NULL; writable (the caller's promise).
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// Delivery of a call's outcome to a callback that takes a location after what `split` leaves
/// of the value: the handle is made on the callback thread, just before the call; if it
/// cannot be made, the callback gets that error instead (and location 0).
fn deliver_location<T: Send + 'static, R: 'static>(
    f: impl FnOnce(i32, *const c_char, R, yuebing_location_t) + Send + 'static,
    split: fn(Option<T>) -> (R, Option<Located>),
) -> impl FnOnce(i32, *const c_char, Option<T>) + Send + 'static {
    move |code, msg, v| {
        let (rest, found) = split(v);
        match found.map(location_handle) {
            None => f(code, msg, rest, 0),
            Some(Ok(h)) => f(code, msg, rest, h),
            Some(Err(e)) => {
                let m = c_string(&e.message);
                f(e.code, m.as_ptr(), rest, 0)
            }
        }
    }
}

/// `yuebing_store_locate` in callback form: the location is the callback's (0 on failure).
/// Returns 0 and then calls `cb` exactly once (on a bridge thread), or returns an error and
/// never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_locate`; `user_data` may be used on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_locate_async(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_location_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let (f, ud) = (required(cb)?, UserData::new(user_data));
        // SAFETY: the caller's callback, called once with its user_data.
        let to_cb = move |code, msg, (), h| unsafe { f(ud.get(), code, msg, h) };
        let deliver = deliver_location(to_cb, |v| ((), v));
        // SAFETY: forwarded contract.
        unsafe { text_op(store, (key, "key"), opts, Client::locate) }?.then(call_out, deliver)
    })
}

/// `get_or_locate`.
unsafe fn get_or_locate_op(
    store: yuebing_store_t,
    key: *const c_char,
    inline_max: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<Fetched>> {
    let call = move |c: &Client, k, o| c.get_or_locate(k, inline_max, o);
    // SAFETY: forwarded contract.
    unsafe { text_op(store, (key, "key"), opts, call) }
}

/// The value of `key` when it has at most `inline_max` bytes, else where it is: a small value
/// goes to `value_out` (free it with `yuebing_buf_free`) with 0 in `location_out`; a larger
/// object is not read, its location goes to `location_out` (yours, as `yuebing_store_locate`
/// gives it) and an empty buffer to `value_out`. One round trip either way, and no copy of a
/// large value: read it with `yuebing_store_read_located` into memory sized for it.
///
/// # Safety
/// `key` NUL-terminated; `opts` NULL or readable; `value_out` and `location_out` writable;
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_or_locate(
    store: yuebing_store_t,
    key: *const c_char,
    inline_max: u64,
    opts: *const yuebing_options,
    value_out: *mut yuebing_buf,
    location_out: *mut yuebing_location_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(value_out, "value_out")?;
        raw::check_out(location_out, "location_out")?;
        // SAFETY: forwarded contract.
        let (value, h) = match unsafe { get_or_locate_op(store, key, inline_max, opts) }?.wait()? {
            Fetched::Value(v) => (v, 0),
            Fetched::Located(found) => (Vec::new(), location_handle(found)?),
        };
        // SAFETY: both checked non-NULL; writable (the caller's promise).
        unsafe {
            raw::write(value_out, raw::into_buf(value));
            raw::write(location_out, h);
        }
        Ok(())
    })
}

/// `yuebing_store_get_or_locate` in callback form: a small value is lent to the callback
/// (`location` 0), a larger object's location is the callback's (no data). Returns 0 and then
/// calls `cb` exactly once (on a bridge thread), or returns an error and never calls it. With
/// `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_get_or_locate`; `user_data` may be used on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_get_or_locate_async(
    store: yuebing_store_t,
    key: *const c_char,
    inline_max: u64,
    opts: *const yuebing_options,
    cb: yuebing_fetched_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let (f, ud) = (required(cb)?, UserData::new(user_data));
        let to_cb = move |code, msg, value: Vec<u8>, h| {
            // SAFETY: the caller's callback, called once with its user_data; `value` outlives
            // the call.
            unsafe {
                f(
                    ud.get(),
                    code,
                    msg,
                    raw::data_or_null(&value),
                    value.len(),
                    h,
                )
            }
        };
        let deliver = deliver_location(to_cb, |v| match v {
            Some(Fetched::Value(v)) => (v, None),
            Some(Fetched::Located(found)) => (Vec::new(), Some(found)),
            None => (Vec::new(), None),
        });
        // SAFETY: forwarded contract.
        unsafe { get_or_locate_op(store, key, inline_max, opts) }?.then(call_out, deliver)
    })
}

unsafe fn read_located_op(
    store: yuebing_store_t,
    location: yuebing_location_t,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let found = handles::location(location)?;
    check_range(addr, len)?;
    Ok(Op::new(
        client.bridge(),
        client.client().read_located(&found, addr, len, opts),
    ))
}

/// Reads a located object into `len` bytes of memory registered with the client's engine (at
/// `addr`), without a copy; its size goes to `out` (NULL: not wanted). A buffer smaller than
/// the object is `YUEBING_ERR_INVALID_PARAMS` and nothing is written; a read that cannot end
/// inside the location's lease is `YUEBING_ERR_LEASE_EXPIRED` (locate it again). It ends by
/// `opts`' deadline and by that of the call that located it. The memory is written until the
/// call ends. The location stays valid: read it again, or free it.
///
/// # Safety
/// `opts` NULL or readable; `out` NULL or writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_read_located(
    store: yuebing_store_t,
    location: yuebing_location_t,
    addr: u64,
    len: u64,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { read_located_op(store, location, addr, len, opts) }?;
        wait_number(out, op)
    })
}

/// `yuebing_store_read_located` in callback form (the value is the size): the memory is
/// written until the callback runs. Returns 0 and then calls `cb` exactly once (on a bridge
/// thread), or returns an error and never calls it. With `call_out`, a call handle to cancel
/// it is written there.
///
/// # Safety
/// As `yuebing_store_read_located`; `user_data` may be used on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_read_located_async(
    store: yuebing_store_t,
    location: yuebing_location_t,
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
        // SAFETY: forwarded contract.
        let op = unsafe { read_located_op(store, location, addr, len, opts) }?;
        op.then(call_out, deliver)
    })
}

/// The object of a located object's handle.
fn location_object(found: Located) -> Object {
    Object::Location(Arc::new(found))
}

/// Finds each of `n` keys and takes its read lease, without reading it: one round trip to the
/// master (Mooncake's get session start). Item i's code goes to `codes_out[i]` and its
/// location to `locations_out[i]` (yours: free each with `yuebing_location_free`; 0 for a
/// failed item). Read them with `yuebing_store_batch_read_located` before their leases end.
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `codes_out` and `locations_out` writable for `n`;
/// `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_locate(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    locations_out: *mut yuebing_location_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { keys_op(store, (keys, n), opts, |c, k, o| c.batch_locate(&k, o)) }?;
        let outs = (codes_out, locations_out, "locations_out");
        wait_each_handles(op, n, outs, location_object)
    })
}

/// `yuebing_store_batch_locate` in callback form: `values` are the locations, made on the
/// callback thread just before the call (yours: free each with `yuebing_location_free`).
/// Returns 0 and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_locate`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_locate_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { keys_op(store, (keys, n), opts, |c, k, o| c.batch_locate(&k, o)) }?;
        then_each_handles(op, n, (cb, user_data, call_out), location_object)
    })
}

/// `batch_read_located`: item i is `locations[i]` with the next `counts[i]` of `fragments`.
///
/// # Safety
/// `locations` and `counts` valid for `n` elements; `fragments` for the sum of `counts`;
/// `opts` NULL or readable.
unsafe fn batch_read_located_op(
    store: yuebing_store_t,
    locations: *const yuebing_location_t,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<crate::Each<u64>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let handles = unsafe { raw::array(locations, n, "locations") }?;
    let found = handles
        .into_iter()
        .map(handles::location)
        .collect::<FfiResult<Vec<Arc<Located>>>>()?;
    // SAFETY: forwarded contract.
    let (lists, _) = unsafe { fragment_lists(counts, n, fragments) }?;
    let items = with_fragments(&found, &lists);
    Ok(Op::new(
        client.bridge(),
        client.client().batch_read_located(&items, opts),
    ))
}

/// Reads ranges of located objects into registered memory without a copy and without a
/// round trip to the master: item i reads, for each of the next `counts[i]` elements of
/// `fragments` (`addr`, `offset`, `len`), `len` bytes at `offset` inside `locations[i]`'s
/// object into `addr`. Item i's code goes to `codes_out[i]` and the bytes it read to
/// `lens_out[i]` (NULL: not wanted); a fragment outside its object refuses its whole item
/// (`YUEBING_ERR_INVALID_PARAMS`), a read past the lease is `YUEBING_ERR_LEASE_EXPIRED`. The
/// memory is written until the call ends.
///
/// # Safety
/// `locations` and `counts` valid for `n` elements; `fragments` for the sum of `counts`;
/// `codes_out` (and `lens_out` unless NULL) writable for `n`; `opts` NULL or readable; `err`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_read_located(
    store: yuebing_store_t,
    locations: *const yuebing_location_t,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    lens_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_read_located_op(store, locations, counts, fragments, n, opts) }?;
        wait_each(op, n, codes_out, lens_out, identity)
    })
}

/// `yuebing_store_batch_read_located` in callback form (`values` are the bytes read per
/// item): the memory is written until the callback runs. Returns 0 and then calls `cb` exactly
/// once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_read_located`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_read_located_async(
    store: yuebing_store_t,
    locations: *const yuebing_location_t,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { batch_read_located_op(store, locations, counts, fragments, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, identity)
    })
}

/// The size in bytes of a located object in `out`: the room `yuebing_store_read_located`
/// needs.
///
/// # Safety
/// `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_location_size(
    location: yuebing_location_t,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        let size = handles::location(location)?.size();
        // SAFETY: checked non-NULL; writable (the caller's promise).
        unsafe { raw::write(out, size) };
        Ok(())
    })
}

/// Releases a location (reads of it in flight end normally); a location freed already, 0,
/// or a handle of another kind is `YUEBING_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_location_free(
    location: yuebing_location_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        handles::remove(location, Kind::Location)?;
        Ok(())
    })
}

/// The C form of where an object's replicas are (free it with `yuebing_replicas_free`).
fn c_replicas(l: ReplicaList) -> yuebing_replicas {
    let replicas = l
        .replicas
        .into_iter()
        .map(|d| (c_string(&d.node), d.addr, d.len))
        .collect();
    raw::into_replicas(l.size, l.lease_ms, replicas)
}

/// Where `key`'s replicas are and its size, in `out` (yours: free it with
/// `yuebing_replicas_free`). The master grants a read lease with the answer, as a get does
/// (Mooncake's `get_replica_desc`).
///
/// # Safety
/// `key` NUL-terminated; `opts` NULL or readable; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_replicas(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    out: *mut yuebing_replicas,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { text_op(store, (key, "key"), opts, Client::replicas) }?;
        wait_into(out, op, c_replicas)
    })
}

/// `yuebing_store_replicas` in callback form: the replicas are lent to the callback (NULL on
/// failure). Returns 0 and then calls `cb` exactly once (on a bridge thread), or returns an
/// error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_replicas`; `user_data` may be used on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_replicas_async(
    store: yuebing_store_t,
    key: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_replicas_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let (f, ud) = (required(cb)?, UserData::new(user_data));
        // SAFETY: forwarded contract.
        let op = unsafe { text_op(store, (key, "key"), opts, Client::replicas) }?;
        op.then(call_out, move |code, msg, list| {
            let mut lent = list.map(c_replicas);
            let p = lent.as_ref().map_or(std::ptr::null(), |r| r as *const _);
            // SAFETY: the caller's callback, called once with its user_data; `lent` outlives
            // the call, and is freed once, after it.
            unsafe {
                f(ud.get(), code, msg, p);
                if let Some(r) = lent.as_mut() {
                    raw::free_replicas(r);
                }
            }
        })
    })
}

/// Frees replicas handed over by `yuebing_store_replicas` or `yuebing_store_batch_replicas`
/// and empties them; NULL or an empty (zeroed) one is a no-op.
///
/// # Safety
/// `replicas` is NULL or a `yuebing_replicas` filled by this library (or zeroed), not freed
/// since.
#[no_mangle]
pub unsafe extern "C" fn yuebing_replicas_free(replicas: *mut yuebing_replicas) {
    // SAFETY: forwarded.
    unsafe { raw::free_replicas(replicas) }
}

/// `yuebing_store_replicas` of `n` keys: item i's code goes to `codes_out[i]` and where it
/// is to `replicas_out[i]` (free each with `yuebing_replicas_free`; a failed item's is
/// empty).
///
/// # Safety
/// `keys` valid for `n` NUL-terminated keys; `codes_out` and `replicas_out` writable for `n`;
/// `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_replicas(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    replicas_out: *mut yuebing_replicas,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { keys_op(store, (keys, n), opts, |c, k, o| c.batch_replicas(&k, o)) }?;
        let outs = (codes_out, replicas_out, "replicas_out");
        wait_each_values(op, n, outs, c_replicas, raw::no_replicas)
    })
}

/// `yuebing_store_batch_replicas` in callback form: the replicas are lent to the callback.
/// Returns 0 and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_replicas`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_replicas_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_each_replicas_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        required(cb)?;
        // SAFETY: forwarded contract.
        let op = unsafe { keys_op(store, (keys, n), opts, |c, k, o| c.batch_replicas(&k, o)) }?;
        let lend = |r: &yuebing_store::Result<ReplicaList>| match r {
            Ok(list) => c_replicas(list.clone()),
            Err(_) => raw::no_replicas(),
        };
        // SAFETY: each value was made by `lend`, and is released once, after the callback.
        let release = |r: &mut yuebing_replicas| unsafe { raw::free_replicas(r) };
        then_each_lent(op, n, (cb, user_data, call_out), lend, release)
    })
}
