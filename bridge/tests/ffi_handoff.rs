//! A client made in Rust and handed to C: once Rust dropped its own handles, an `_async` call
//! racing the C handle's destroy may end up holding the bridge's last handle. It must not wait
//! there for callbacks (the C caller may hold a lock its callback takes): it shuts the bridge
//! down in the background, and the call returns.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use yuebing_bridge::ffi::deliver::yuebing_call_destroy;
use yuebing_bridge::ffi::master_api::*;
use yuebing_bridge::ffi::types::yuebing_call_t;
use yuebing_bridge::ffi::types::yuebing_health;
use yuebing_bridge::{BlockingMaster, Bridge, BridgeConfig};

/// The C caller's lock, held across its `_async` calls and taken by its callback.
static LOCK: Mutex<u32> = Mutex::new(0);

unsafe extern "C" fn take_the_lock(
    _: *mut c_void,
    _: i32,
    _: *const c_char,
    _: *const yuebing_health,
) {
    *LOCK.lock().unwrap_or_else(|p| p.into_inner()) += 1;
}

#[test]
fn an_abi_call_holding_the_last_bridge_handle_does_not_wait_for_callbacks() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..30 {
            let bridge = Bridge::new(BridgeConfig::default()).unwrap();
            // Nothing listens there: health waits for its connect, so calls are in flight.
            let master =
                BlockingMaster::connect(&bridge, "127.0.0.1:1".parse().unwrap(), None).unwrap();
            let h = master_handle(&master).unwrap();
            drop((master, bridge));
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
                        let mut call: yuebing_call_t = 0;
                        // SAFETY: a handle that may be destroyed meanwhile (then an error
                        // code); no user_data.
                        let rc = unsafe {
                            yuebing_master_health_async(
                                h,
                                Some(take_the_lock),
                                std::ptr::null_mut(),
                                &mut call,
                                std::ptr::null_mut(),
                            )
                        };
                        if rc == 0 {
                            // SAFETY: a handle this thread got.
                            unsafe { yuebing_call_destroy(call, std::ptr::null_mut()) };
                        }
                    }
                });
                std::thread::sleep(Duration::from_millis(1));
                // SAFETY: a valid handle, destroyed once.
                unsafe { yuebing_master_destroy(h, std::ptr::null_mut()) };
            });
        }
        let _ = tx.send(());
    });
    let start = Instant::now();
    let finished = rx.recv_timeout(Duration::from_secs(60));
    assert!(
        finished.is_ok(),
        "an ABI call waited for its own callbacks ({:?})",
        start.elapsed()
    );
}
