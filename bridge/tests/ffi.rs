//! The C ABI called from Rust through its exported functions: every bad-input case of the
//! header returns its code and changes nothing; every callback runs exactly once across
//! success, error, cancel, deadline and shutdown under 16 threads of load, and none after
//! `yuebing_bridge_destroy` returned; blocking or destroying from inside a callback is an error
//! code, never a hang.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use yuebing_bridge::ffi::batch_api::*;
use yuebing_bridge::ffi::bridge_api::*;
use yuebing_bridge::ffi::deliver::*;
use yuebing_bridge::ffi::engine_api::*;
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_ops::*;
use yuebing_bridge::ffi::types::*;

mod common;
use common::{copied, last, name, new_bridge, Cluster};
use yuebing_testkit::eventually;

#[test]
fn bad_input_returns_its_code_and_changes_nothing() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let key = CString::new("k").unwrap();
    let value = b"value";
    let nul = std::ptr::null_mut::<yuebing_error>();
    let mut err = yuebing_error {
        code: 0,
        message: [0; YUEBING_ERROR_MESSAGE_LEN],
    };
    // SAFETY: every pointer passed is valid or NULL; the library must check the NULLs.
    unsafe {
        let put = |s: yuebing_store_t, k: *const c_char, d: *const u8, n: usize, e| {
            yuebing_store_put(s, k, d, n, std::ptr::null(), e)
        };
        // Handles: null, wrong kind, destroyed, destroyed twice.
        assert_eq!(
            put(0, key.as_ptr(), value.as_ptr(), 5, &mut err),
            YUEBING_ERR_INVALID_HANDLE
        );
        assert_eq!(err.code, YUEBING_ERR_INVALID_HANDLE);
        assert!(CStr::from_ptr(err.message.as_ptr()).to_bytes().len() > 10);
        assert!(last().contains("handle"), "{}", last());
        assert_eq!(
            put(bridge, key.as_ptr(), value.as_ptr(), 5, nul),
            YUEBING_ERR_INVALID_HANDLE
        );
        let other = cluster.store(bridge);
        assert_eq!(yuebing_store_destroy(other, nul), 0);
        assert_eq!(
            put(other, key.as_ptr(), value.as_ptr(), 5, nul),
            YUEBING_ERR_INVALID_HANDLE
        );
        assert_eq!(
            yuebing_store_destroy(other, nul),
            YUEBING_ERR_INVALID_HANDLE
        );
        // Arguments: a null key, a null buffer with a length, an overflowing length, a key
        // that is not UTF-8, unknown option flags, a null output, a null callback.
        let inv = YUEBING_ERR_INVALID_ARGUMENT;
        assert_eq!(put(store, std::ptr::null(), value.as_ptr(), 5, nul), inv);
        assert_eq!(put(store, key.as_ptr(), std::ptr::null(), 5, nul), inv);
        assert_eq!(
            put(store, key.as_ptr(), value.as_ptr(), usize::MAX, nul),
            inv
        );
        let bad_key = [0xff_u8 as c_char, 0];
        assert_eq!(put(store, bad_key.as_ptr(), value.as_ptr(), 5, nul), inv);
        let opts = yuebing_options {
            timeout_ms: 0,
            replica_num: 0,
            flags: 0x80,
        };
        assert_eq!(
            yuebing_store_put(store, key.as_ptr(), value.as_ptr(), 5, &opts, nul),
            inv
        );
        assert_eq!(
            yuebing_store_get(
                store,
                key.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
                nul
            ),
            inv
        );
        assert_eq!(
            yuebing_store_get_async(
                store,
                key.as_ptr(),
                std::ptr::null(),
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                nul
            ),
            inv
        );
        // A range that overflows, a batch with a null array.
        let mut size = 0u64;
        assert_eq!(
            yuebing_store_get_into(
                store,
                key.as_ptr(),
                u64::MAX - 1,
                10,
                std::ptr::null(),
                &mut size,
                nul
            ),
            inv
        );
        let mut codes = [0i32; 2];
        assert_eq!(
            yuebing_store_batch_exist(
                store,
                std::ptr::null(),
                2,
                std::ptr::null(),
                codes.as_mut_ptr(),
                std::ptr::null_mut(),
                nul
            ),
            inv
        );
        // Engine: unknown access, unknown opcode, unknown transport, a null address.
        let mut engine = 0;
        assert_eq!(yuebing_store_engine(store, &mut engine, nul), 0);
        let mut addr = 0u64;
        assert_eq!(
            yuebing_engine_allocate(engine, 4096, 9, &mut addr, nul),
            inv
        );
        assert_eq!(
            yuebing_engine_register(engine, std::ptr::null_mut(), 4096, std::ptr::null(), 0, nul),
            inv
        );
        let mut batch = 0;
        assert_eq!(yuebing_batch_new(engine, 4, &mut batch, nul), 0);
        let request = yuebing_request {
            opcode: 7,
            source: 0,
            segment: 0,
            target_offset: 0,
            length: 1,
        };
        assert_eq!(
            yuebing_batch_submit(batch, &request, 1, std::ptr::null_mut(), nul),
            inv
        );
        assert_eq!(yuebing_batch_free(batch, nul), 0);
        assert_eq!(yuebing_batch_free(batch, nul), YUEBING_ERR_INVALID_HANDLE);
        let config = yuebing_engine_config {
            bind: std::ptr::null(),
            token: std::ptr::null(),
            transport: 42,
            flags: 0,
        };
        let mut e2 = 0;
        assert_eq!(yuebing_engine_new(bridge, &config, &mut e2, nul), inv);
        // A store config with a bad endpoint keeps the rpc code; with a bad token too.
        let bad = CString::new("not an endpoint").unwrap();
        let config = yuebing_store_config {
            master: bad.as_ptr(),
            token: std::ptr::null(),
            store_size: 0,
            staging_size: 0,
            timeout_ms: 0,
            bind: std::ptr::null(),
            flags: 0,
        };
        let mut s2 = 0;
        assert_eq!(
            yuebing_store_new(bridge, &config, &mut s2, nul),
            YUEBING_ERR_INVALID_ENDPOINT
        );
        // Nothing changed: the key was never stored.
        let mut exists = 7u64;
        assert_eq!(
            yuebing_store_exist(store, key.as_ptr(), std::ptr::null(), &mut exists, nul),
            0
        );
        assert_eq!(exists, 0);
        // A success clears the error.
        assert_eq!(put(store, key.as_ptr(), value.as_ptr(), 5, &mut err), 0);
        assert_eq!((err.code, err.message[0]), (0, 0));
        assert_eq!(last(), "");
        assert_eq!(
            put(store, key.as_ptr(), value.as_ptr(), 5, nul),
            YUEBING_ERR_OBJECT_ALREADY_EXISTS
        );
        assert_eq!(
            name(YUEBING_ERR_OBJECT_ALREADY_EXISTS),
            "ObjectAlreadyExists"
        );
        assert_eq!(name(1234), "Unknown");
        assert_eq!(yuebing_abi_version(), YUEBING_ABI_VERSION);
        yuebing_engine_destroy(engine, nul);
        yuebing_store_destroy(store, nul);
        assert_eq!(yuebing_bridge_destroy(bridge, nul), 0);
        assert_eq!(
            yuebing_bridge_destroy(bridge, nul),
            YUEBING_ERR_INVALID_HANDLE
        );
    }
}

/// One callback's slot: how many times it ran, and with which code.
struct Slot {
    runs: AtomicU32,
    code: AtomicI32,
}

/// Callbacks that ran somewhere else than a thread of a bridge's callback pool.
static OFF_POOL: AtomicU32 = AtomicU32::new(0);

fn record(slot: &Slot, code: i32) {
    let on_pool = std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("yuebing-cb"));
    if !on_pool {
        OFF_POOL.fetch_add(1, Ordering::SeqCst);
    }
    slot.code.store(code, Ordering::SeqCst);
    slot.runs.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn count_bytes(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    _: *const u8,
    _: usize,
) {
    // SAFETY: `ud` is a `Slot` the test keeps alive until every callback ran.
    record(unsafe { &*(ud as *const Slot) }, code);
}

unsafe extern "C" fn count_done(ud: *mut c_void, code: i32, _: *const c_char) {
    // SAFETY: as in `count_bytes`.
    record(unsafe { &*(ud as *const Slot) }, code);
}

/// A slot whose call was refused at its start (after the destroy): no callback is due.
const REFUSED: i32 = 1000;

#[test]
fn every_callback_runs_exactly_once_and_none_after_destroy() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let nul = std::ptr::null_mut::<yuebing_error>();
    let present = CString::new("present").unwrap();
    let missing = CString::new("missing").unwrap();
    let big = vec![7u8; 1 << 20];
    // SAFETY: valid arguments.
    assert_eq!(
        unsafe {
            yuebing_store_put(
                store,
                present.as_ptr(),
                big.as_ptr(),
                big.len(),
                std::ptr::null(),
                nul,
            )
        },
        0
    );
    const THREADS: usize = 16;
    const PER_THREAD: usize = 200;
    let slots: Arc<Vec<Slot>> = Arc::new(
        (0..THREADS * PER_THREAD)
            .map(|_| Slot {
                runs: AtomicU32::new(0),
                code: AtomicI32::new(1),
            })
            .collect(),
    );
    let started = Arc::new(AtomicU32::new(0));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (slots, started) = (slots.clone(), started.clone());
            let (present, missing, big) = (&present, &missing, &big);
            s.spawn(move || {
                let nul = std::ptr::null_mut::<yuebing_error>();
                for i in 0..PER_THREAD {
                    let slot = &slots[t * PER_THREAD + i] as *const Slot as *mut c_void;
                    let mut call = 0;
                    let tight = yuebing_options {
                        timeout_ms: 1,
                        replica_num: 0,
                        flags: 0,
                    };
                    // SAFETY: valid arguments; the slots outlive every callback (checked below).
                    let rc = unsafe {
                        match i % 5 {
                            0 => yuebing_store_get_async(
                                store,
                                present.as_ptr(),
                                std::ptr::null(),
                                Some(count_bytes),
                                slot,
                                std::ptr::null_mut(),
                                nul,
                            ),
                            1 => yuebing_store_get_async(
                                store,
                                missing.as_ptr(),
                                std::ptr::null(),
                                Some(count_bytes),
                                slot,
                                std::ptr::null_mut(),
                                nul,
                            ),
                            2 => {
                                let rc = yuebing_store_get_async(
                                    store,
                                    present.as_ptr(),
                                    std::ptr::null(),
                                    Some(count_bytes),
                                    slot,
                                    &mut call,
                                    nul,
                                );
                                if rc == 0 {
                                    yuebing_call_cancel(call, nul);
                                    yuebing_call_cancel(call, nul);
                                    yuebing_call_destroy(call, nul);
                                }
                                rc
                            }
                            3 => {
                                let key = CString::new(format!("t{t}/{i}")).unwrap();
                                yuebing_store_put_async(
                                    store,
                                    key.as_ptr(),
                                    big.as_ptr(),
                                    big.len(),
                                    &tight,
                                    Some(count_done),
                                    slot,
                                    std::ptr::null_mut(),
                                    nul,
                                )
                            }
                            _ => {
                                let key = CString::new(format!("r{t}/{i}")).unwrap();
                                yuebing_store_remove_async(
                                    store,
                                    key.as_ptr(),
                                    0,
                                    std::ptr::null(),
                                    Some(count_done),
                                    slot,
                                    std::ptr::null_mut(),
                                    nul,
                                )
                            }
                        }
                    };
                    match rc {
                        0 => {
                            started.fetch_add(1, Ordering::SeqCst);
                        }
                        // The bridge was destroyed under us: no callback will come for it.
                        YUEBING_ERR_SHUTDOWN => {
                            let slot = &slots[t * PER_THREAD + i];
                            slot.code.store(REFUSED, Ordering::SeqCst);
                            slot.runs.store(1, Ordering::SeqCst);
                        }
                        other => panic!("{other}: {}", name(other)),
                    }
                }
            });
        }
        // Destroy the bridge once every kind of outcome was seen (a success, a miss, a
        // deadline, a cancel), the rest still in flight.
        let until = Instant::now() + Duration::from_secs(60);
        let wanted = [
            0,
            YUEBING_ERR_OBJECT_NOT_FOUND,
            YUEBING_ERR_STORE_TIMEOUT,
            YUEBING_ERR_CANCELED,
        ];
        while !wanted.iter().all(|&code| {
            slots
                .iter()
                .any(|s| s.runs.load(Ordering::SeqCst) > 0 && s.code.load(Ordering::SeqCst) == code)
        }) {
            assert!(
                Instant::now() < until,
                "not every outcome came within a minute"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // SAFETY: a valid handle.
        assert_eq!(unsafe { yuebing_bridge_destroy(bridge, nul) }, 0);
        // From here no callback runs: a slot changes only if its call is refused at its start.
        let at_destroy: Vec<u32> = slots
            .iter()
            .map(|s| s.runs.load(Ordering::SeqCst))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        for (slot, before) in slots.iter().zip(at_destroy) {
            let now = slot.runs.load(Ordering::SeqCst);
            assert!(
                now == before || slot.code.load(Ordering::SeqCst) == REFUSED,
                "a callback ran after yuebing_bridge_destroy returned"
            );
        }
    });
    // Every call that started got exactly one callback; after the destroy returned and the
    // threads finished, no callback ran (a call started after it was refused).
    let runs: Vec<u32> = slots
        .iter()
        .map(|s| s.runs.load(Ordering::SeqCst))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let again: Vec<u32> = slots
        .iter()
        .map(|s| s.runs.load(Ordering::SeqCst))
        .collect();
    assert_eq!(runs, again, "a callback ran after destroy returned");
    assert!(
        runs.iter().all(|&r| r == 1),
        "a callback ran {:?} times",
        runs.iter().find(|&&r| r != 1)
    );
    let mut by_code = std::collections::BTreeMap::new();
    for s in slots.iter() {
        *by_code.entry(s.code.load(Ordering::SeqCst)).or_insert(0) += 1;
    }
    eprintln!(
        "outcomes by code: {by_code:?}; started {}",
        started.load(Ordering::SeqCst)
    );
    assert!(by_code.contains_key(&0), "some succeeded");
    assert!(
        by_code.contains_key(&YUEBING_ERR_OBJECT_NOT_FOUND),
        "some failed"
    );
    assert!(
        by_code.contains_key(&YUEBING_ERR_CANCELED),
        "some were cancelled"
    );
    assert!(
        by_code.contains_key(&YUEBING_ERR_STORE_TIMEOUT),
        "some ran out of time"
    );
    assert!(
        by_code.contains_key(&YUEBING_ERR_SHUTDOWN),
        "some were ended by the destroy"
    );
    assert!(!by_code.contains_key(&1), "a slot was never reached");
    assert_eq!(
        OFF_POOL.load(Ordering::SeqCst),
        0,
        "a callback ran off the callback pool"
    );
    // SAFETY: a valid handle.
    unsafe { yuebing_store_destroy(store, nul) };
}

struct Inside {
    bridge: yuebing_bridge_t,
    store: yuebing_store_t,
    results: Mutex<Vec<i32>>,
}

unsafe extern "C" fn block_inside(ud: *mut c_void, _: i32, _: *const c_char) {
    // SAFETY: `ud` is the test's `Inside`, alive until the callback signalled.
    let inside = unsafe { &*(ud as *const Inside) };
    let key = CString::new("inside").unwrap();
    let mut size = 0u64;
    let nul = std::ptr::null_mut();
    // SAFETY: valid arguments.
    let (a, b) = unsafe {
        (
            yuebing_store_get_size(inside.store, key.as_ptr(), std::ptr::null(), &mut size, nul),
            yuebing_bridge_destroy(inside.bridge, nul),
        )
    };
    inside.results.lock().unwrap().extend([a, b]);
}

#[test]
fn blocking_or_destroying_inside_a_callback_is_an_error_never_a_hang() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let inside = Inside {
        bridge,
        store,
        results: Mutex::new(Vec::new()),
    };
    let key = CString::new("inside").unwrap();
    let nul = std::ptr::null_mut();
    // SAFETY: valid arguments; `inside` outlives the callback (waited for below).
    let rc = unsafe {
        yuebing_store_put_async(
            store,
            key.as_ptr(),
            b"v".as_ptr(),
            1,
            std::ptr::null(),
            Some(block_inside),
            &inside as *const Inside as *mut c_void,
            std::ptr::null_mut(),
            nul,
        )
    };
    assert_eq!(rc, 0);
    eventually::blocking("both callbacks", Duration::from_secs(10), || {
        inside.results.lock().unwrap().len() >= 2
    });
    assert_eq!(
        *inside.results.lock().unwrap(),
        [YUEBING_ERR_WOULD_BLOCK_BRIDGE; 2]
    );
    // The bridge still works, and is destroyed from here.
    let mut size = 0;
    // SAFETY: valid arguments.
    unsafe {
        assert_eq!(
            yuebing_store_get_size(store, key.as_ptr(), std::ptr::null(), &mut size, nul),
            0
        );
        assert_eq!(size, 1);
        yuebing_store_destroy(store, nul);
        assert_eq!(yuebing_bridge_destroy(bridge, nul), 0);
    }
}

/// `yuebing_store_new_tuned` turns on the lease cache and grants: values put through grants
/// read back, twice (the second time from cached locations), and with `YUEBING_OPT_UNCACHED`;
/// unknown tuning flags are refused.
#[test]
fn a_tuned_store_puts_through_grants_and_reads_through_its_cache() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let _node = cluster.store(bridge);
    let config = yuebing_store_config {
        master: cluster.endpoint.as_ptr(),
        token: std::ptr::null(),
        store_size: 0,
        staging_size: 0,
        timeout_ms: 10_000,
        bind: std::ptr::null(),
        flags: 0,
    };
    let mut tuning = yuebing_store_tuning {
        lease_cache: 64,
        grant_size: 1 << 20,
        flags: 1,
    };
    let nul = std::ptr::null_mut();
    // SAFETY: valid configs, keys, values and outputs; each buffer freed once, after its copy.
    unsafe {
        let mut store = 0;
        assert_eq!(
            yuebing_store_new_tuned(bridge, &config, &tuning, &mut store, nul),
            YUEBING_ERR_INVALID_ARGUMENT
        );
        tuning.flags = 0;
        assert_eq!(
            yuebing_store_new_tuned(bridge, &config, &tuning, &mut store, nul),
            0,
            "{}",
            last()
        );
        let keys: Vec<CString> = (0..4)
            .map(|i| CString::new(format!("t{i}")).unwrap())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            let v = vec![i as u8; 4096];
            let rc = yuebing_store_put(
                store,
                k.as_ptr(),
                v.as_ptr(),
                v.len(),
                std::ptr::null(),
                nul,
            );
            assert_eq!(rc, 0, "{}", last());
        }
        let uncached = yuebing_options {
            timeout_ms: 0,
            replica_num: 0,
            flags: YUEBING_OPT_UNCACHED,
        };
        for opts in [std::ptr::null(), std::ptr::null(), &uncached as *const _] {
            for (i, k) in keys.iter().enumerate() {
                let mut out = yuebing_buf {
                    data: std::ptr::null_mut(),
                    len: 0,
                };
                assert_eq!(yuebing_store_get(store, k.as_ptr(), opts, &mut out, nul), 0);
                let got = copied(out.data, out.len);
                yuebing_buf_free(&mut out);
                assert_eq!(got, vec![i as u8; 4096]);
            }
        }
        yuebing_store_destroy(store, nul);
    }
}
