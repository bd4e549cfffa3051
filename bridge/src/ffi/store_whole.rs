//! The store client's calls on the whole store, in their blocking and callback forms:
//! `remove_all`, `remove_by_regex`, `list`, `stats`, `health_check` and `close`.

use std::ffi::{c_char, c_void};

use yuebing_store::master::{ListedObject, Stats};
use yuebing_store::ClientHealth;

use super::deliver::{self, required, Op, UserData};
use super::error::{c_string, entry, yuebing_error, FfiResult};
use super::raw;
use super::store_api::target;
use super::store_ops::{switch, wait_number};
use super::types::*;

/// `remove_all`.
unsafe fn remove_all_op(
    store: yuebing_store_t,
    force: u32,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let force = switch(force, "force")?;
    Ok(Op::new(
        client.bridge(),
        client.client().remove_all(force, opts),
    ))
}

/// `remove_by_regex`.
unsafe fn remove_by_regex_op(
    store: yuebing_store_t,
    pattern: *const c_char,
    force: u32,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (pattern, force) = (
        unsafe { raw::text(pattern, "pattern") }?,
        switch(force, "force")?,
    );
    Ok(Op::new(
        client.bridge(),
        client.client().remove_by_regex(pattern, force, opts),
    ))
}

/// `health_check`, as one of `YUEBING_CLIENT_*`: never an error of the store's.
unsafe fn health_check_op(
    store: yuebing_store_t,
    opts: *const yuebing_options,
) -> FfiResult<Op<u64>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let check = client.client().health_check(opts);
    Ok(Op::new(client.bridge(), async move {
        Ok::<_, yuebing_store::Error>(c_client_health(check.await))
    }))
}

/// The C form of a client's health.
fn c_client_health(h: ClientHealth) -> u64 {
    match h {
        ClientHealth::Healthy => YUEBING_CLIENT_HEALTHY,
        ClientHealth::Closed => YUEBING_CLIENT_CLOSED,
        ClientHealth::MasterUnreachable => YUEBING_CLIENT_MASTER_UNREACHABLE,
    }
}

/// `close`.
unsafe fn close_op(store: yuebing_store_t, opts: *const yuebing_options) -> FfiResult<Op<()>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    Ok(Op::new(client.bridge(), client.client().close(opts)))
}

/// `stats`.
unsafe fn stats_op(store: yuebing_store_t, opts: *const yuebing_options) -> FfiResult<Op<Stats>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    Ok(Op::new(client.bridge(), client.client().stats(opts)))
}

/// Delivery to a [`yuebing_stats_cb`].
fn stats_cb(
    cb: yuebing_stats_cb,
    user_data: *mut c_void,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<Stats>) + Send + 'static> {
    deliver::by_pointer(cb, user_data, c_stats)
}

/// The C form of the master's counts.
pub(crate) fn c_stats(s: Stats) -> yuebing_stats {
    yuebing_stats {
        objects: s.objects,
        pending_writes: s.pending_writes,
        bytes_used: s.bytes_used,
        bytes_capacity: s.bytes_capacity,
        nodes: s.nodes,
        mounts: s.mounts,
    }
}

/// Waits for a value and writes its C form through `out` (required).
pub(crate) fn wait_into<T: Send + 'static, C>(
    out: *mut C,
    op: Op<T>,
    to_c: fn(T) -> C,
) -> FfiResult<()> {
    raw::check_out(out, "out")?;
    let v = op.wait()?;
    // SAFETY: checked non-NULL; writable (the caller's promise).
    unsafe { raw::write(out, to_c(v)) };
    Ok(())
}

unsafe fn list_op(
    store: yuebing_store_t,
    prefix: *const c_char,
    limit: u64,
    opts: *const yuebing_options,
) -> FfiResult<Op<Vec<ListedObject>>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let prefix = unsafe { raw::text(prefix, "prefix") }?;
    Ok(Op::new(
        client.bridge(),
        client.client().list(prefix, limit, opts),
    ))
}

/// A listing's keys as C strings, with sizes and replica counts.
fn c_keys(listed: Vec<ListedObject>) -> Vec<(std::ffi::CString, u64, u32)> {
    listed
        .into_iter()
        .map(|o| (c_string(&o.key), o.size, o.replicas))
        .collect()
}

/// Lists keys starting with `prefix`, sorted, at most `limit`; the listing goes to `out` (free
/// it with `yuebing_list_free`).
///
/// # Safety
/// `prefix` NUL-terminated; `opts` NULL or readable; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_list(
    store: yuebing_store_t,
    prefix: *const c_char,
    limit: u64,
    opts: *const yuebing_options,
    out: *mut yuebing_list,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        // SAFETY: forwarded contract.
        let listed = unsafe { list_op(store, prefix, limit, opts) }?.wait()?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(out, raw::into_list(c_keys(listed))) };
        Ok(())
    })
}

/// Lists keys starting with `prefix` (callback form: the listing is lent to the callback).
/// Returns 0 and calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_list`; `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_list_async(
    store: yuebing_store_t,
    prefix: *const c_char,
    limit: u64,
    opts: *const yuebing_options,
    cb: yuebing_list_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let (f, ud) = (required(cb)?, UserData::new(user_data));
        // SAFETY: forwarded contract.
        let op = unsafe { list_op(store, prefix, limit, opts) }?;
        op.then(call_out, move |code, msg, v| {
            let keys = c_keys(v.unwrap_or_default());
            let items: Vec<yuebing_listed> = keys
                .iter()
                .map(|(k, size, replicas)| yuebing_listed {
                    key: k.as_ptr(),
                    size: *size,
                    replicas: *replicas,
                })
                .collect();
            let p = match items.is_empty() {
                true => std::ptr::null(),
                false => items.as_ptr(),
            };
            // SAFETY: the caller's callback, called once; `items` and `keys` outlive it.
            unsafe { f(ud.get(), code, msg, items.len(), p) }
        })
    })
}

/// Removes every object (`force` 1: leased ones too; 0 or 1); how many goes to `out`.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove_all(
    store: yuebing_store_t,
    force: u32,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_number(out, unsafe { remove_all_op(store, force, opts) }?)
    })
}

/// Removes every object (`force` 1: leased ones too; 0 or 1); how many goes to `out`.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove_all_async(
    store: yuebing_store_t,
    force: u32,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { remove_all_op(store, force, opts) }?.then(call_out, deliver)
    })
}

/// Removes every object whose key the regular expression `pattern` matches somewhere (anchor
/// it with `^…$` for whole keys; `force` 1: leased ones too; 0 or 1); how many goes to `out`
/// (NULL: not wanted). A bad pattern is `YUEBING_ERR_INVALID_PARAMS` and removes nothing.
///
/// # Safety
/// `pattern` NUL-terminated; `opts` NULL or readable; `out` NULL or writable; `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove_by_regex(
    store: yuebing_store_t,
    pattern: *const c_char,
    force: u32,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: the caller's promises, forwarded.
        let op = unsafe { remove_by_regex_op(store, pattern, force, opts) }?;
        wait_number(out, op)
    })
}

/// `yuebing_store_remove_by_regex` in callback form (the value is how many were removed).
/// Returns 0 and then calls `cb` exactly once (on a bridge thread), or returns an error and
/// never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_remove_by_regex`; `user_data` may be used on the callback thread;
/// `call_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_remove_by_regex_async(
    store: yuebing_store_t,
    pattern: *const c_char,
    force: u32,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        let op = unsafe { remove_by_regex_op(store, pattern, force, opts) }?;
        op.then(call_out, deliver)
    })
}

/// Whether this client can serve calls, in `out`: `YUEBING_CLIENT_HEALTHY` (its master
/// answers and is ready), `YUEBING_CLIENT_CLOSED` (after `yuebing_store_close`) or
/// `YUEBING_CLIENT_MASTER_UNREACHABLE` (no master answered, or none was ready, within the
/// call's deadline): Mooncake's `health_check` numbers. The function fails only for bad
/// arguments or a bridge that cannot run the check.
///
/// # Safety
/// `opts` NULL or readable; `out` NULL or writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_health_check(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_number(out, unsafe { health_check_op(store, opts) }?)
    })
}

/// `yuebing_store_health_check` in callback form (the value is a `YUEBING_CLIENT_*`). Returns
/// 0 and then calls `cb` exactly once (on a bridge thread), or returns an error and never calls
/// it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// As `yuebing_store_health_check`; `user_data` may be used on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_health_check_async(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::number(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { health_check_op(store, opts) }?.then(call_out, deliver)
    })
}

/// Leaves the cluster gracefully: the master places nothing new on this client, and its
/// memory is unmounted.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_close(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || unsafe { close_op(store, opts) }?.wait())
}

/// Leaves the cluster gracefully: the master places nothing new on this client, and its
/// memory is unmounted.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_close_async(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::done(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { close_op(store, opts) }?.then(call_out, deliver)
    })
}

/// The master's counts in `out`.
///
/// # Safety
/// Every pointer as `yuebing.h` says: strings NUL-terminated, buffers valid for their
/// length, `opts` NULL or readable, outputs writable, `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_stats(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    out: *mut yuebing_stats,
    err: *mut yuebing_error,
) -> i32 {
    // SAFETY: the caller's promises, forwarded.
    entry(err, || {
        wait_into(out, unsafe { stats_op(store, opts) }?, c_stats)
    })
}

/// The master's counts in `out`.
/// Callback form: returns 0 and then calls `cb` exactly once (on a bridge thread), or returns
/// an error and never calls it. With `call_out`, a call handle to cancel it is written there.
///
/// # Safety
/// Every pointer as `yuebing.h` says; `user_data` may be used on the callback thread;
/// `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_stats_async(
    store: yuebing_store_t,
    opts: *const yuebing_options,
    cb: yuebing_stats_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = stats_cb(cb, user_data)?;
        // SAFETY: the caller's promises, forwarded.
        unsafe { stats_op(store, opts) }?.then(call_out, deliver)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_health_constants_are_mooncakes_numbers() {
        for h in [
            ClientHealth::Healthy,
            ClientHealth::Closed,
            ClientHealth::MasterUnreachable,
        ] {
            assert_eq!(c_client_health(h), h.code() as u64, "{h:?}");
        }
    }
}
