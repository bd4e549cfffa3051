//! How a C call runs: an [`Op`] is a call prepared from checked arguments, then either waited
//! for (the blocking form) or handed a C callback (the `_async` form); and the `yuebing_call`
//! functions that cancel and release a started call.

use std::ffi::{c_char, c_void};
use std::future::Future;
use std::pin::Pin;

use crate::call::NotStarted;
use crate::{Bridge, Canceller};

use super::error::{c_string, entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::types::*;

/// A call's work, boxed.
type Work<T> = Pin<Box<dyn Future<Output = crate::Result<T>> + Send>>;

/// A call ready to start, its arguments checked.
pub(crate) struct Op<T: Send + 'static> {
    bridge: Bridge,
    work: Work<T>,
}

impl<T: Send + 'static> Op<T> {
    /// A call of `work` on `bridge`.
    pub(crate) fn new<E: Into<crate::Error>>(
        bridge: &Bridge,
        work: impl Future<Output = Result<T, E>> + Send + 'static,
    ) -> Op<T> {
        Op {
            bridge: bridge.clone(),
            work: Box::pin(async move { work.await.map_err(Into::into) }),
        }
    }

    /// The same call with its value mapped.
    pub(crate) fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Op<U> {
        let work = self.work;
        Op {
            bridge: self.bridge,
            work: Box::pin(async move { work.await.map(f) }),
        }
    }

    /// The same call, failing when `check` refuses its value.
    pub(crate) fn try_map<U: Send + 'static>(
        self,
        check: impl FnOnce(T) -> crate::Result<U> + Send + 'static,
    ) -> Op<U> {
        let work = self.work;
        Op {
            bridge: self.bridge,
            work: Box::pin(async move { work.await.and_then(check) }),
        }
    }

    /// The blocking form: starts nothing on a thread that must not block on the bridge.
    pub(crate) fn wait(self) -> FfiResult<T> {
        Ok(self.bridge.block_on(self.work)?)
    }

    /// The callback form: if this returns `Ok`, `deliver` runs exactly once, on the bridge's
    /// callback pool (never on this thread, and before a destroy of the bridge returns); if
    /// it returns an error, never. With `call_out`, a handle to cancel the call is written
    /// there before the call starts.
    pub(crate) fn then(
        self,
        call_out: *mut yuebing_call_t,
        deliver: impl FnOnce(i32, *const c_char, Option<T>) + Send + 'static,
    ) -> FfiResult<()> {
        let cancel = Canceller::detached();
        // Once the call is counted in, and before it starts: its handle, so that a callback
        // that reads `call_out` finds it set, and a failure here starts nothing.
        let ready = || -> FfiResult<()> {
            if !call_out.is_null() {
                let h = handles::insert(Object::Call(cancel.clone()))?;
                // SAFETY: a non-NULL `call_out` is writable (the caller's promise).
                unsafe { raw::write(call_out, h) };
            }
            Ok(())
        };
        let started = self
            .bridge
            .spawn_then(self.work, &cancel, ready, move |r| match r {
                Ok(v) => deliver(0, std::ptr::null(), Some(v)),
                Err(e) => {
                    let m = c_string(&e.to_string());
                    deliver(e.code(), m.as_ptr(), None)
                }
            });
        match started {
            Ok(()) => Ok(()),
            Err(NotStarted::Bridge(e)) => Err(e.into()),
            Err(NotStarted::Ready(f)) => Err(f),
        }
    }
}

/// The caller's `user_data`, carried to the callback thread.
pub(crate) struct UserData(*mut c_void);

// SAFETY: the header states that `user_data` is handed to the callback on a bridge thread: the
// caller promises it may be used there. The library itself never dereferences it.
unsafe impl Send for UserData {}

impl UserData {
    pub(crate) fn new(p: *mut c_void) -> UserData {
        UserData(p)
    }

    /// The pointer (a method, so that closures capture the whole `Send` wrapper).
    pub(crate) fn get(&self) -> *mut c_void {
        self.0
    }
}

/// A required callback.
pub(crate) fn required<F>(cb: Option<F>) -> FfiResult<F> {
    cb.ok_or_else(|| Failure::invalid("the callback is NULL"))
}

/// Delivery to a [`yuebing_done_cb`].
pub(crate) fn done(
    cb: yuebing_done_cb,
    user_data: *mut c_void,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<()>) + Send + 'static> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    // SAFETY: a C callback the caller gave for this call, called once with its user_data.
    Ok(move |code, msg, _| unsafe { f(ud.get(), code, msg) })
}

/// Delivery to a [`yuebing_u64_cb`] (0 on failure).
pub(crate) fn number(
    cb: yuebing_u64_cb,
    user_data: *mut c_void,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<u64>) + Send + 'static> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    // SAFETY: as in `done`.
    Ok(move |code, msg, v: Option<u64>| unsafe { f(ud.get(), code, msg, v.unwrap_or(0)) })
}

/// Delivery of a value through a pointer to its C form (NULL on failure).
pub(crate) fn by_pointer<T: Send + 'static, C: 'static>(
    cb: Option<unsafe extern "C" fn(*mut c_void, i32, *const c_char, *const C)>,
    user_data: *mut c_void,
    to_c: fn(T) -> C,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<T>) + Send + 'static> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    Ok(move |code, msg, v: Option<T>| {
        let c = v.map(to_c);
        let p = c.as_ref().map_or(std::ptr::null(), |c| c as *const C);
        // SAFETY: as in `done`; `p` lives until the callback returns.
        unsafe { f(ud.get(), code, msg, p) }
    })
}

/// Cancels a call started in its callback form. Idempotent, safe from any thread, a no-op
/// once the call ended; the callback still runs once (with `YUEBING_ERR_CANCELED` unless the
/// call ended first), and only after the call's work stopped.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_call_cancel(call: yuebing_call_t, err: *mut yuebing_error) -> i32 {
    entry(err, || {
        handles::call(call)?.cancel();
        Ok(())
    })
}

/// Releases a call handle (it does not cancel the call; its callback still runs).
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_call_destroy(
    call: yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        handles::remove(call, Kind::Call)?;
        Ok(())
    })
}
