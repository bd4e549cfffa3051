//! Puts in three steps (Mooncake's put sessions) and store space mounted at run time, in
//! blocking and callback forms: `batch_reserve` hands over a reservation handle per object,
//! `batch_write_reserved` writes ranges of reserved objects from registered memory,
//! `batch_publish` / `batch_revoke` end them; `mount_space`, `mount_file` and `unmount_space`
//! add and drop ranges of store space.
//!
//! A reservation handle is made where the caller receives it, as a location handle is (see
//! `store_located`); it holds its own reference, so a write in flight is unaffected by its
//! free, and a free does not revoke it (the master does, when the client leaves).

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use yuebing_store::{Reservation, SpaceId};

use super::deliver::{self, required, Op};
use super::error::{entry, yuebing_error, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::store_api::target;
use super::store_batch::{
    fragment_lists, identity, keys, nothing, then_each, then_each_handles, wait_each,
    wait_each_handles, with_fragments,
};
use super::store_ops::wait_number;
use super::types::*;
use crate::Each;

/// The object of a reservation's handle.
fn reservation_object(r: Reservation) -> Object {
    Object::Reservation(Arc::new(r))
}

/// `batch_reserve` of `n` keys with their sizes.
///
/// # Safety
/// `k` and `sizes` valid for `n` elements, keys NUL-terminated; `opts` NULL or readable.
unsafe fn batch_reserve_op(
    store: yuebing_store_t,
    k: *const *const c_char,
    sizes: *const u64,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<Reservation>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (k, sizes) = unsafe { (keys(k, n)?, raw::array(sizes, n, "sizes")?) };
    let items: Vec<(&str, u64)> = k.iter().map(String::as_str).zip(sizes).collect();
    Ok(Op::new(
        client.bridge(),
        client.client().batch_reserve(&items, opts),
    ))
}

/// Reserves space for each of `n` objects (`keys[i]`, `sizes[i]` bytes; a put, or an upsert
/// with `YUEBING_OPT_UPSERT`, with `opts`' replica settings) without writing it: one round
/// trip to the master. Item i's code goes to `codes_out[i]` and its reservation to
/// `reservations_out[i]` (yours: free each with `yuebing_reservation_free`; 0 for a failed
/// item). Write them with `yuebing_store_batch_write_reserved` within `opts`' deadline, then
/// publish or revoke them.
///
/// # Safety
/// `keys` and `sizes` valid for `n` elements, keys NUL-terminated; `codes_out` and
/// `reservations_out` writable for `n`; `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_reserve(
    store: yuebing_store_t,
    keys: *const *const c_char,
    sizes: *const u64,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    reservations_out: *mut yuebing_reservation_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { batch_reserve_op(store, keys, sizes, n, opts) }?;
        let outs = (codes_out, reservations_out, "reservations_out");
        wait_each_handles(op, n, outs, reservation_object)
    })
}

/// `yuebing_store_batch_reserve` in callback form: `values` are the reservations, made on the
/// callback thread just before the call (yours: free each with `yuebing_reservation_free`).
/// Returns 0 and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_reserve`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_reserve_async(
    store: yuebing_store_t,
    keys: *const *const c_char,
    sizes: *const u64,
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
        let op = unsafe { batch_reserve_op(store, keys, sizes, n, opts) }?;
        then_each_handles(op, n, (cb, user_data, call_out), reservation_object)
    })
}

/// The reservations named by `n` handles (all valid, or the call is refused).
///
/// # Safety
/// `reservations` valid for `n` elements.
unsafe fn reservations_of(
    reservations: *const yuebing_reservation_t,
    n: usize,
) -> FfiResult<Vec<Arc<Reservation>>> {
    // SAFETY: forwarded contract.
    let hs = unsafe { raw::array(reservations, n, "reservations") }?;
    hs.into_iter().map(handles::reservation).collect()
}

/// `batch_write_reserved`: item i is `reservations[i]` with the next `counts[i]` of
/// `fragments`.
///
/// # Safety
/// `reservations` and `counts` valid for `n` elements; `fragments` for the sum of `counts`;
/// `opts` NULL or readable.
unsafe fn batch_write_reserved_op(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
    counts: *const usize,
    fragments: *const yuebing_fragment,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<Each<u64>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let reserved = unsafe { reservations_of(reservations, n) }?;
    // SAFETY: forwarded contract.
    let (lists, _) = unsafe { fragment_lists(counts, n, fragments) }?;
    let items = with_fragments(&reserved, &lists);
    Ok(Op::new(
        client.bridge(),
        client.client().batch_write_reserved(&items, opts),
    ))
}

/// Writes ranges of reserved objects from registered memory without a copy and without a
/// round trip to the master: item i writes, for each of the next `counts[i]` elements of
/// `fragments` (`addr`, `offset`, `len`), `len` bytes at `addr` to `offset` inside
/// `reservations[i]`'s object, on every replica. Item i's code goes to `codes_out[i]` and the
/// bytes it wrote to `lens_out[i]` (NULL: not wanted); a fragment outside its object, or a
/// reservation published or revoked already, is `YUEBING_ERR_INVALID_PARAMS` for its item.
/// The memory is read until the call ends.
///
/// # Safety
/// `reservations` and `counts` valid for `n` elements; `fragments` for the sum of `counts`;
/// `codes_out` (and `lens_out` unless NULL) writable for `n`; `opts` NULL or readable; `err`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_write_reserved(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
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
        let op =
            unsafe { batch_write_reserved_op(store, reservations, counts, fragments, n, opts) }?;
        wait_each(op, n, codes_out, lens_out, identity)
    })
}

/// `yuebing_store_batch_write_reserved` in callback form (`values` are the bytes written per
/// item): the memory is read until the callback runs. Returns 0 and then calls `cb` exactly
/// once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_write_reserved`; `user_data` usable on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_write_reserved_async(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
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
        let op =
            unsafe { batch_write_reserved_op(store, reservations, counts, fragments, n, opts) }?;
        then_each(op, n, cb, user_data, call_out, identity)
    })
}

/// `batch_publish` (`publish`) or `batch_revoke` of `n` reservations.
///
/// # Safety
/// `reservations` valid for `n` elements; `opts` NULL or readable.
unsafe fn finish_op(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
    n: usize,
    opts: *const yuebing_options,
    publish: bool,
) -> FfiResult<Op<Each<()>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let reserved: Vec<Reservation> = unsafe { reservations_of(reservations, n) }?
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let c = client.client();
    Ok(match publish {
        true => Op::new(client.bridge(), c.batch_publish(&reserved, opts)),
        false => Op::new(client.bridge(), c.batch_revoke(&reserved, opts)),
    })
}

/// Makes each of `n` reserved objects readable, once the writes under way have ended (later
/// ones are refused): one round trip to the master. Item i's code goes to `codes_out[i]`; a
/// publication whose answer was lost may be asked again.
///
/// # Safety
/// `reservations` valid for `n` elements; `codes_out` writable for `n`; `opts` NULL or
/// readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_publish(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { finish_op(store, reservations, n, opts, true) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_publish` in callback form (`values` are 0). Returns 0 and then calls
/// `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_publish`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_publish_async(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
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
        let op = unsafe { finish_op(store, reservations, n, opts, true) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

/// Drops each of `n` reserved objects, once the writes under way have ended (later ones are
/// refused): nothing is stored, and the key may be put again. One round trip to the master;
/// item i's code goes to `codes_out[i]`.
///
/// # Safety
/// `reservations` valid for `n` elements; `codes_out` writable for `n`; `opts` NULL or
/// readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_revoke(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
    n: usize,
    opts: *const yuebing_options,
    codes_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { finish_op(store, reservations, n, opts, false) }?;
        wait_each(op, n, codes_out, std::ptr::null_mut(), nothing)
    })
}

/// `yuebing_store_batch_revoke` in callback form (`values` are 0). Returns 0 and then calls
/// `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_batch_revoke`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_batch_revoke_async(
    store: yuebing_store_t,
    reservations: *const yuebing_reservation_t,
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
        let op = unsafe { finish_op(store, reservations, n, opts, false) }?;
        then_each(op, n, cb, user_data, call_out, nothing)
    })
}

/// Releases a reservation handle (writes of it in flight end normally; the reservation itself
/// is not revoked: revoke it first, or the master revokes it when the client leaves); a freed,
/// 0 or other-kind handle is `YUEBING_ERR_INVALID_HANDLE`.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_reservation_free(
    reservation: yuebing_reservation_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        handles::remove(reservation, Kind::Reservation)?;
        Ok(())
    })
}

/// `mount_space` of `size` bytes.
///
/// # Safety
/// `opts` NULL or readable.
unsafe fn mount_space_op(
    store: yuebing_store_t,
    size: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let mounted = client.client().mount_space(size, opts);
    Ok(mounted_op(&client, mounted))
}

/// The operation of a mount: the new range's id.
fn mounted_op(
    client: &crate::BlockingClient,
    mounted: impl std::future::Future<Output = yuebing_store::Result<SpaceId>> + Send + 'static,
) -> Op<u64> {
    Op::new(client.bridge(), async move {
        Ok::<_, yuebing_store::Error>(mounted.await?.0)
    })
}

/// `mount_file` of `size` bytes of the file at `path` from `offset`.
///
/// # Safety
/// `path` NULL or a NUL-terminated string; `opts` NULL or readable.
unsafe fn mount_file_op(
    store: yuebing_store_t,
    path: *const c_char,
    offset: u64,
    size: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let path = unsafe { raw::text(path, "path") }?;
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let mounted = client.client().mount_file(path, offset, size, opts);
    Ok(mounted_op(&client, mounted))
}

/// Maps `size` bytes of the file at `path` (UTF-8) from `offset` (a multiple of the page size;
/// the range must lie inside the file) and mounts them as more store space of the client:
/// objects placed there are written into the file, and peers reach it over tcp. If the file is
/// truncated meanwhile, transfers touching the lost pages fail with an error. Its id goes to
/// `id_out` (NULL: not wanted), for `yuebing_store_unmount_space`, which unmaps the file.
///
/// # Safety
/// `path` a NUL-terminated string; `opts` NULL or readable; `id_out` NULL or writable; `err`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_mount_file(
    store: yuebing_store_t,
    path: *const c_char,
    offset: u64,
    size: u64,
    opts: *const yuebing_options,
    id_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { mount_file_op(store, path, offset, size, opts) }?;
        wait_number(id_out, op)
    })
}

/// `yuebing_store_mount_file` in callback form (the value is the id). Returns 0 and then calls
/// `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_mount_file`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn yuebing_store_mount_file_async(
    store: yuebing_store_t,
    path: *const c_char,
    offset: u64,
    size: u64,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: forwarded contract.
        let op = unsafe { mount_file_op(store, path, offset, size, opts) }?;
        op.then(call_out, deliver)
    })
}

/// Allocates `size` bytes of this process's memory and mounts them as more store space of the
/// client: new objects may be placed there once this returns. Its id goes to `id_out` (NULL:
/// not wanted), for `yuebing_store_unmount_space`.
///
/// # Safety
/// `opts` NULL or readable; `id_out` NULL or writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_mount_space(
    store: yuebing_store_t,
    size: u64,
    opts: *const yuebing_options,
    id_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { mount_space_op(store, size, opts) }?;
        wait_number(id_out, op)
    })
}

/// `yuebing_store_mount_space` in callback form (the value is the id). Returns 0 and then
/// calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_mount_space`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_mount_space_async(
    store: yuebing_store_t,
    size: u64,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: forwarded contract.
        let op = unsafe { mount_space_op(store, size, opts) }?;
        op.then(call_out, deliver)
    })
}

/// `unmount_space` of range `id` with a grace of `grace_ms`.
///
/// # Safety
/// `opts` NULL or readable.
unsafe fn unmount_space_op(
    store: yuebing_store_t,
    id: u64,
    grace_ms: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let grace = Duration::from_millis(grace_ms);
    Ok(Op::new(
        client.bridge(),
        client.client().unmount_space(SpaceId(id), grace, opts),
    ))
}

/// Unmounts range `id` of the client's store space: no new object goes there; its objects
/// stay readable for `grace_ms` (at most the master's unmount grace; 0: dropped at once), then
/// the memory is freed. An id not mounted is `YUEBING_ERR_INVALID_PARAMS`.
///
/// # Safety
/// `opts` NULL or readable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_unmount_space(
    store: yuebing_store_t,
    id: u64,
    grace_ms: u64,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        unsafe { unmount_space_op(store, id, grace_ms, opts) }?.wait()
    })
}

/// `yuebing_store_unmount_space` in callback form. Returns 0 and then calls `cb` exactly once,
/// or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_unmount_space`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_unmount_space_async(
    store: yuebing_store_t,
    id: u64,
    grace_ms: u64,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: forwarded contract.
        let op = unsafe { unmount_space_op(store, id, grace_ms, opts) }?;
        op.then(call_out, deliver)
    })
}
