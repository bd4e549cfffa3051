//! `yuebing_bridge_*`: creating and destroying bridges.

use crate::{Bridge, BridgeConfig};

use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, Kind, Object};
use super::raw;
use super::types::{yuebing_bridge_config, yuebing_bridge_t};
use crate::bridge::MAX_THREADS;

/// The bridge a handle names; 0 is the process's default bridge (started on first use, never
/// destroyed).
pub(crate) fn resolve(bridge: yuebing_bridge_t) -> FfiResult<Bridge> {
    match bridge {
        0 => Ok(Bridge::global()?),
        h => handles::bridge(h),
    }
}

/// Creates a bridge: a runtime and a callback pool of its own (`config` may be NULL for the
/// defaults). Store clients and engines created on it run there.
///
/// # Safety
/// `config` is NULL or readable; `out` is writable; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_bridge_new(
    config: *const yuebing_bridge_config,
    out: *mut yuebing_bridge_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(out, "out")?;
        let c = match config.is_null() {
            true => yuebing_bridge_config::default(),
            // SAFETY: non-NULL and readable (the caller's promise).
            false => unsafe { config.read() },
        };
        let d = BridgeConfig::default();
        let pick = |v: u32, default: usize, what: &str| match v {
            0 => Ok(default),
            v if v as usize <= MAX_THREADS => Ok(v as usize),
            v => Err(Failure::invalid(format!(
                "{what} {v}: at most {MAX_THREADS}"
            ))),
        };
        let bridge = Bridge::new(BridgeConfig {
            worker_threads: pick(c.worker_threads, d.worker_threads, "worker_threads")?,
            callback_threads: pick(c.callback_threads, d.callback_threads, "callback_threads")?,
        })?;
        let h = handles::insert(Object::Bridge(bridge))?;
        // SAFETY: checked non-NULL above; writable (the caller's promise).
        unsafe { raw::write(out, h) };
        Ok(())
    })
}

/// Destroys a bridge: calls under way end with `YUEBING_ERR_SHUTDOWN`, and this returns only
/// after every pending callback has returned; no callback of the bridge runs after it (so
/// their `user_data` may be freed). Store clients and engines made on it fail their calls with
/// `YUEBING_ERR_SHUTDOWN` from then on; destroy them too. From inside a callback (or any bridge
/// thread) it returns `YUEBING_ERR_WOULD_BLOCK_BRIDGE` and changes nothing: it would wait for
/// itself.
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_bridge_destroy(
    bridge: yuebing_bridge_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        handles::bridge(bridge)?.shutdown()?;
        handles::remove(bridge, Kind::Bridge)?;
        Ok(())
    })
}
