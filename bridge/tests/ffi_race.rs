//! A callback-form call racing `yuebing_bridge_destroy`: its callback never runs inside the
//! `_async` function that started it (where a C caller may hold a lock the callback takes),
//! never after the destroy returned (when `user_data` may be freed), and exactly once for every
//! call that was accepted.

use std::cell::Cell;
use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use yuebing_bridge::ffi::bridge_api::*;
use yuebing_bridge::ffi::deliver::*;
use yuebing_bridge::ffi::master_api::*;
use yuebing_bridge::ffi::types::*;

thread_local! {
    /// Set while this thread is inside `yuebing_master_health_async`.
    static STARTING: Cell<bool> = const { Cell::new(false) };
}

#[derive(Default)]
struct Tally {
    destroyed: AtomicBool,
    accepted: AtomicU64,
    ran: AtomicU64,
    inside_start: AtomicU64,
    after_destroy: AtomicU64,
}

unsafe extern "C" fn on_health(
    ud: *mut c_void,
    _: i32,
    _: *const c_char,
    _: *const yuebing_health,
) {
    // SAFETY: `ud` is the round's `Tally`, alive until every thread of the round joined and
    // the destroy returned (after which, by the contract under test, no callback runs).
    let t = unsafe { &*(ud as *const Tally) };
    if STARTING.with(Cell::get) {
        t.inside_start.fetch_add(1, Ordering::SeqCst);
    }
    if t.destroyed.load(Ordering::SeqCst) {
        t.after_destroy.fetch_add(1, Ordering::SeqCst);
    }
    t.ran.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_call_racing_destroy_never_calls_back_inline_or_late() {
    // Nothing listens there: each health call waits for its connect, so calls are in flight
    // when the bridge goes.
    let endpoint = CString::new("127.0.0.1:1").unwrap();
    let nul = std::ptr::null_mut();
    for _round in 0..100 {
        let tally = Tally::default();
        let mut bridge = 0;
        let mut master = 0;
        // SAFETY: valid arguments and outputs.
        unsafe {
            assert_eq!(yuebing_bridge_new(std::ptr::null(), &mut bridge, nul), 0);
            let rc = yuebing_master_new(
                bridge,
                endpoint.as_ptr(),
                std::ptr::null(),
                &mut master,
                nul,
            );
            assert_eq!(rc, 0);
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (tally, stop) = (&tally, &stop);
                s.spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let mut call = 0;
                        STARTING.with(|c| c.set(true));
                        let ud = tally as *const Tally as *mut c_void;
                        // SAFETY: valid arguments; `tally` outlives the round.
                        let rc = unsafe {
                            yuebing_master_health_async(
                                master,
                                Some(on_health),
                                ud,
                                &mut call,
                                std::ptr::null_mut(),
                            )
                        };
                        STARTING.with(|c| c.set(false));
                        if rc == 0 {
                            tally.accepted.fetch_add(1, Ordering::SeqCst);
                            // SAFETY: a handle this thread got.
                            unsafe { yuebing_call_destroy(call, std::ptr::null_mut()) };
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(3));
            // SAFETY: a valid handle.
            assert_eq!(
                unsafe { yuebing_bridge_destroy(bridge, std::ptr::null_mut()) },
                0
            );
            tally.destroyed.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            stop.store(true, Ordering::SeqCst);
        });
        // SAFETY: a valid handle.
        unsafe { yuebing_master_destroy(master, nul) };
        assert_eq!(
            tally.inside_start.load(Ordering::SeqCst),
            0,
            "a callback ran inside _async"
        );
        assert_eq!(
            tally.after_destroy.load(Ordering::SeqCst),
            0,
            "a callback ran after destroy"
        );
        assert_eq!(
            tally.ran.load(Ordering::SeqCst),
            tally.accepted.load(Ordering::SeqCst)
        );
    }
}
