//! `yuebing_master_*`: a connection to a master for its `health` and `stats`.

use std::ffi::{c_char, c_void};

use yuebing_store::master::{Health, Stats};

use crate::BlockingMaster;

use super::bridge_api::resolve;
use super::deliver::{self, Op};
use super::error::{entry, yuebing_error, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::store_whole::{c_stats, wait_into};
use super::types::*;

/// Connects to the master at `endpoint` (`host:port`) on `bridge` (0: the default bridge),
/// presenting `token` (NULL: none); connections open on first use.
///
/// # Safety
/// `endpoint` NUL-terminated; `token` NULL or NUL-terminated; `out` writable; `err` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_new(
    bridge: yuebing_bridge_t,
    endpoint: *const c_char,
    token: *const c_char,
    out: *mut yuebing_master_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        // SAFETY: forwarded contract.
        let endpoint = unsafe { raw::text(endpoint, "endpoint") }?;
        let endpoint = endpoint.parse().map_err(crate::Error::from)?;
        // SAFETY: forwarded contract.
        let token = match unsafe { raw::optional_text(token, "token") }? {
            Some(t) => Some(yuebing_rpc::Token::new(t).map_err(crate::Error::from)?),
            None => None,
        };
        let master = BlockingMaster::connect(&resolve(bridge)?, endpoint, token)?;
        let h = handles::insert(Object::Master(master))?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// A C handle for a master connection made from Rust (see `store_api::store_handle`): release
/// it with `yuebing_master_destroy`.
pub fn master_handle(master: &BlockingMaster) -> crate::Result<yuebing_master_t, i32> {
    handles::insert(Object::Master(master.clone())).map_err(|f| f.code)
}

/// Releases a master handle (calls in flight end normally).
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_destroy(
    master: yuebing_master_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        handles::remove(master, Kind::Master)?;
        Ok(())
    })
}

/// The C form of the master's readiness.
fn c_health(h: Health) -> yuebing_health {
    yuebing_health {
        ready: h.ready,
        persistent: h.persistent,
        failed: h.failure.is_some(),
        last_seq: h.last_seq,
        durable_seq: h.durable_seq,
    }
}

fn health_op(master: yuebing_master_t) -> FfiResult<Op<Health>> {
    let m = handles::master(master)?;
    Ok(Op::new(m.bridge(), m.health_future()))
}

fn stats_op(master: yuebing_master_t) -> FfiResult<Op<Stats>> {
    let m = handles::master(master)?;
    Ok(Op::new(m.bridge(), m.stats_future()))
}

/// The master's readiness in `out` (a no-op round trip).
///
/// # Safety
/// `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_health(
    master: yuebing_master_t,
    out: *mut yuebing_health,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || wait_into(out, health_op(master)?, c_health))
}

/// The master's readiness (callback form). Returns 0 and then calls `cb` exactly once, or
/// returns an error and never calls it.
///
/// # Safety
/// `user_data` usable on the callback thread; `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_health_async(
    master: yuebing_master_t,
    cb: yuebing_health_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::by_pointer(cb, user_data, c_health)?;
        health_op(master)?.then(call_out, deliver)
    })
}

/// The master's counts in `out`.
///
/// # Safety
/// `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_stats(
    master: yuebing_master_t,
    out: *mut yuebing_stats,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || wait_into(out, stats_op(master)?, c_stats))
}

/// The master's counts (callback form). Returns 0 and then calls `cb` exactly once, or
/// returns an error and never calls it.
///
/// # Safety
/// `user_data` usable on the callback thread; `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_master_stats_async(
    master: yuebing_master_t,
    cb: yuebing_stats_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::by_pointer(cb, user_data, c_stats)?;
        stats_op(master)?.then(call_out, deliver)
    })
}
