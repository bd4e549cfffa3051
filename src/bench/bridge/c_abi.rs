//! The C ABI as a C program calls it: the same operations through the exported `extern "C"`
//! functions — the blocking forms from plain threads, the `_async` forms with C callbacks — on
//! C handles of the rig's own client and master connection, so that they do exactly the work
//! of the Rust modes and differ only by the ABI.

use std::ffi::{c_char, c_void, CStr, CString};

use yuebing_bridge::ffi::error::{yuebing_error_name, yuebing_last_error_message};
use yuebing_bridge::ffi::master_api::{
    master_handle, yuebing_master_destroy, yuebing_master_health, yuebing_master_health_async,
};
use yuebing_bridge::ffi::store_api::{store_handle, yuebing_buf_free, yuebing_store_destroy};
use yuebing_bridge::ffi::store_ops::{
    yuebing_store_get, yuebing_store_get_async, yuebing_store_get_into,
    yuebing_store_get_into_async, yuebing_store_put, yuebing_store_put_async,
};
use yuebing_bridge::ffi::types::{yuebing_buf, yuebing_health, yuebing_master_t, yuebing_store_t};
use yuebing_bridge::{BlockingClient, BlockingMaster};

use super::load::Done;
use super::ops::{whole, Op};
use super::rig::{Rig, LARGE, SMALL};

/// The rig's client and master connection as C handles.
pub(super) struct CHandles {
    store: yuebing_store_t,
    master: yuebing_master_t,
}

impl CHandles {
    /// Handles of `client` and `master`.
    pub(super) fn new(
        client: &BlockingClient,
        master: &BlockingMaster,
    ) -> Result<CHandles, String> {
        let store = store_handle(client).map_err(failure)?;
        let master = master_handle(master).map_err(failure)?;
        Ok(CHandles { store, master })
    }

    /// Releases both handles.
    pub(super) fn release(&self) {
        // SAFETY: handles this rig made; NULL error outputs are allowed.
        unsafe {
            yuebing_store_destroy(self.store, std::ptr::null_mut());
            yuebing_master_destroy(self.master, std::ptr::null_mut());
        }
    }
}

/// A failed C call: its code's name, the code, and this thread's last message.
fn failure(code: i32) -> String {
    // SAFETY: both return NUL-terminated strings that stay valid until the next yuebing call on
    // this thread; they are copied at once.
    let (name, message) = unsafe {
        (
            CStr::from_ptr(yuebing_error_name(code)),
            CStr::from_ptr(yuebing_last_error_message()),
        )
    };
    format!(
        "{} ({code}): {}",
        name.to_string_lossy(),
        message.to_string_lossy()
    )
}

fn checked(code: i32) -> Result<(), String> {
    match code {
        0 => Ok(()),
        code => Err(failure(code)),
    }
}

fn key(k: &str) -> CString {
    CString::new(k).expect("the bench's keys have no NUL")
}

/// One call of `op` through the blocking C functions.
pub(super) fn call_blocking(rig: &Rig, op: Op, w: usize, seq: u64) -> Result<(), String> {
    let h = &rig.c;
    let none = std::ptr::null();
    let err = std::ptr::null_mut();
    // SAFETY: valid handles, NUL-terminated keys, buffers valid for their lengths, writable
    // outputs; registered memory from the rig's slots.
    unsafe {
        match op {
            Op::Health => {
                let mut health = yuebing_health::default();
                checked(yuebing_master_health(h.master, &mut health, err))
            }
            Op::Put => {
                let (k, v) = (key(&rig.put_key()), &rig.value);
                checked(yuebing_store_put(
                    h.store,
                    k.as_ptr(),
                    v.as_ptr(),
                    v.len(),
                    none,
                    err,
                ))
            }
            Op::Get => {
                let k = key(rig.small_key(seq));
                let mut buf = yuebing_buf {
                    data: std::ptr::null_mut(),
                    len: 0,
                };
                checked(yuebing_store_get(h.store, k.as_ptr(), none, &mut buf, err))?;
                let len = buf.len;
                yuebing_buf_free(&mut buf);
                whole(len, SMALL)
            }
            Op::GetInto => {
                let (addr, len) = rig.slot(w);
                let k = key(rig.large_key(seq));
                let mut size = 0;
                let code =
                    yuebing_store_get_into(h.store, k.as_ptr(), addr, len, none, &mut size, err);
                checked(code)?;
                whole(size as usize, LARGE)
            }
        }
    }
}

/// What a C callback gets as `user_data`: the chain's continuation and the size a read must
/// bring.
struct Pending {
    done: Done,
    want: usize,
}

impl Pending {
    fn into_raw(self) -> *mut c_void {
        Box::into_raw(Box::new(self)).cast()
    }

    /// Takes back a `Pending` given to a C call.
    ///
    /// # Safety
    /// `ud` came from [`Pending::into_raw`] and is taken back once (each callback runs once).
    unsafe fn take(ud: *mut c_void) -> Pending {
        // SAFETY: the caller's promise.
        *unsafe { Box::from_raw(ud.cast::<Pending>()) }
    }

    fn finish(self, code: i32, message: *const c_char, got: Option<usize>) {
        let outcome = match code {
            0 => got.map_or(Ok(()), |n| whole(n, self.want)),
            code => {
                // SAFETY: a non-NULL message is NUL-terminated and valid during the callback.
                let text = match message.is_null() {
                    true => String::new(),
                    false => unsafe { CStr::from_ptr(message) }
                        .to_string_lossy()
                        .into_owned(),
                };
                Err(format!("code {code}: {text}"))
            }
        };
        (self.done)(outcome);
    }
}

unsafe extern "C" fn on_done(ud: *mut c_void, code: i32, message: *const c_char) {
    // SAFETY: `ud` is this call's `Pending`; the callback runs once.
    unsafe { Pending::take(ud) }.finish(code, message, None);
}

unsafe extern "C" fn on_bytes(
    ud: *mut c_void,
    code: i32,
    message: *const c_char,
    _: *const u8,
    len: usize,
) {
    // SAFETY: as in `on_done`.
    unsafe { Pending::take(ud) }.finish(code, message, Some(len));
}

unsafe extern "C" fn on_number(ud: *mut c_void, code: i32, message: *const c_char, value: u64) {
    // SAFETY: as in `on_done`.
    unsafe { Pending::take(ud) }.finish(code, message, Some(value as usize));
}

unsafe extern "C" fn on_health(
    ud: *mut c_void,
    code: i32,
    message: *const c_char,
    _: *const yuebing_health,
) {
    // SAFETY: as in `on_done`.
    unsafe { Pending::take(ud) }.finish(code, message, None);
}

/// Starts one call of `op` through the `_async` C functions; `done` gets the outcome from the
/// C callback, on the bridge's callback pool.
pub(super) fn call_then(rig: &Rig, op: Op, w: usize, seq: u64, done: Done) {
    let h = &rig.c;
    let (none, err, no_call) = (std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut());
    let want = match op {
        Op::Get => SMALL,
        Op::GetInto => LARGE,
        Op::Health | Op::Put => 0,
    };
    let ud = Pending { done, want }.into_raw();
    // SAFETY: valid handles, keys and buffers as in `call_blocking`; `ud` is taken back by the
    // callback, which runs once when the call returns 0, or below when it does not.
    let code = unsafe {
        match op {
            Op::Health => yuebing_master_health_async(h.master, Some(on_health), ud, no_call, err),
            Op::Put => {
                let (k, v) = (key(&rig.put_key()), &rig.value);
                yuebing_store_put_async(
                    h.store,
                    k.as_ptr(),
                    v.as_ptr(),
                    v.len(),
                    none,
                    Some(on_done),
                    ud,
                    no_call,
                    err,
                )
            }
            Op::Get => {
                let k = key(rig.small_key(seq));
                yuebing_store_get_async(h.store, k.as_ptr(), none, Some(on_bytes), ud, no_call, err)
            }
            Op::GetInto => {
                let (addr, len) = rig.slot(w);
                let k = key(rig.large_key(seq));
                yuebing_store_get_into_async(
                    h.store,
                    k.as_ptr(),
                    addr,
                    len,
                    none,
                    Some(on_number),
                    ud,
                    no_call,
                    err,
                )
            }
        }
    };
    if code != 0 {
        // SAFETY: the call was refused, so no callback will take `ud` back.
        let pending = unsafe { Pending::take(ud) };
        (pending.done)(Err(failure(code)));
    }
}
