//! A store client's admin HTTP server through the C ABI: `yuebing_store_serve_admin` starts
//! it and hands over a handle, `yuebing_admin_address` says where it listens, and
//! `yuebing_admin_free` stops it. The paths are the client's (see `Client::serve_admin`):
//! `/health` in Mooncake's client JSON, `/ready` and `/metrics`.

use std::ffi::c_char;
use std::sync::Arc;

use super::error::{entry, yuebing_error};
use super::handles::{self, Kind, Object};
use super::raw;
use super::store_api::target;
use super::types::*;

/// Serves the store client's admin HTTP paths on `bind` ("host:port", UTF-8; port 0 picks a
/// free one) until the handle written to `admin_out` is freed with `yuebing_admin_free` (or
/// the process ends). Nothing is served unless asked, so several clients on one machine never
/// collide. An address that cannot be bound is `YUEBING_ERR_INVALID_PARAMS`.
///
/// # Safety
/// `bind` a NUL-terminated string; `opts` NULL or readable; `admin_out` writable; `err` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_serve_admin(
    store: yuebing_store_t,
    bind: *const c_char,
    opts: *const yuebing_options,
    admin_out: *mut yuebing_admin_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(admin_out, "admin_out")?;
        // SAFETY: forwarded contract.
        let bind = unsafe { raw::text(bind, "bind") }?;
        // SAFETY: forwarded contract.
        let (client, _) = unsafe { target(store, opts) }?;
        let server = client.serve_admin(&bind)?;
        let handle = handles::insert(Object::Admin(Arc::new(server)))?;
        // SAFETY: writable (the caller's promise).
        unsafe { raw::write(admin_out, handle) };
        Ok(())
    })
}

/// Copies the address the admin server listens on ("host:port"), NUL-terminated, into `buf`
/// of `cap` bytes; its length (without the NUL) goes to `len_out`.
/// `YUEBING_ERR_INVALID_ARGUMENT` if it does not fit (`len_out` still says how long it is).
///
/// # Safety
/// `buf` valid for `cap` bytes of writes; `len_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_admin_address(
    admin: yuebing_admin_t,
    buf: *mut c_char,
    cap: usize,
    len_out: *mut usize,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let server = handles::admin(admin)?;
        let addr = server.local_addr().to_string();
        // SAFETY: forwarded contract.
        unsafe { raw::write_text(buf, cap, len_out, &addr, "the address") }
    })
}

/// Stops the admin server (its port is free again once this returns) and invalidates its
/// handle.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_admin_free(
    admin: yuebing_admin_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        if let Object::Admin(server) = handles::remove(admin, Kind::Admin)? {
            // The last reference (a call on another thread may hold one a moment longer):
            // stopped now, its port free once this returns.
            if let Ok(server) = Arc::try_unwrap(server) {
                server.stop();
            }
        }
        Ok(())
    })
}
