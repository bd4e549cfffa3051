//! More of the C ABI's bad-input cases, each returning its code and changing nothing, and a
//! callback that sleeps a second while other calls are served.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use yuebing_bridge::ffi::batch_api::*;
use yuebing_bridge::ffi::bridge_api::*;
use yuebing_bridge::ffi::deliver::*;
use yuebing_bridge::ffi::engine_api::*;
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::master_api::*;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_ops::*;
use yuebing_bridge::ffi::store_whole::*;
use yuebing_bridge::ffi::types::*;

mod common;
use common::{new_bridge, Cluster};

const INV: i32 = YUEBING_ERR_INVALID_ARGUMENT;
const HANDLE: i32 = YUEBING_ERR_INVALID_HANDLE;

fn nul() -> *mut yuebing_error {
    std::ptr::null_mut()
}

#[test]
fn configs_batches_engines_calls_and_masters_refuse_bad_input() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let keys: Vec<CString> = ["a", "b", "c"]
        .iter()
        .map(|k| CString::new(*k).unwrap())
        .collect();
    let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let values: [&[u8]; 3] = [b"1", b"22", b"333"];
    let value_ptrs: Vec<*const u8> = values.iter().map(|v| v.as_ptr()).collect();
    let lens: Vec<usize> = values.iter().map(|v| v.len()).collect();
    let mut codes = [0i32; 3];
    // SAFETY: every pointer passed is valid for what it claims, or NULL where the library must
    // check it.
    unsafe {
        // Configs: unknown store flags, oversized thread counts.
        let mut config = yuebing_store_config {
            master: cluster.endpoint.as_ptr(),
            token: std::ptr::null(),
            store_size: 0,
            staging_size: 0,
            timeout_ms: 0,
            bind: std::ptr::null(),
            flags: 4,
        };
        let mut s2 = 0;
        assert_eq!(yuebing_store_new(bridge, &config, &mut s2, nul()), INV);
        config.flags = 0;
        let bad_token = CString::new("has space").unwrap();
        config.token = bad_token.as_ptr();
        assert_eq!(
            yuebing_store_new(bridge, &config, &mut s2, nul()),
            YUEBING_ERR_INVALID_TOKEN
        );
        let threads = yuebing_bridge_config {
            worker_threads: u32::MAX,
            callback_threads: 0,
        };
        let mut b2 = 0;
        assert_eq!(yuebing_bridge_new(&threads, &mut b2, nul()), INV);
        let engine_config = yuebing_engine_config {
            bind: std::ptr::null(),
            token: std::ptr::null(),
            transport: 0,
            flags: 0x40,
        };
        let mut e2 = 0;
        assert_eq!(
            yuebing_engine_new(bridge, &engine_config, &mut e2, nul()),
            INV
        );

        // Batches: NULL arrays with items, an overflowing count, a bad key in the middle.
        let put = |k: *const *const c_char,
                   v: *const *const u8,
                   l: *const usize,
                   n: usize,
                   c: *mut i32| {
            yuebing_store_batch_put(store, k, v, l, n, std::ptr::null(), c, nul())
        };
        assert_eq!(
            put(
                key_ptrs.as_ptr(),
                std::ptr::null(),
                lens.as_ptr(),
                3,
                codes.as_mut_ptr()
            ),
            INV
        );
        assert_eq!(
            put(
                key_ptrs.as_ptr(),
                value_ptrs.as_ptr(),
                std::ptr::null(),
                3,
                codes.as_mut_ptr()
            ),
            INV
        );
        assert_eq!(
            put(
                key_ptrs.as_ptr(),
                value_ptrs.as_ptr(),
                lens.as_ptr(),
                3,
                std::ptr::null_mut()
            ),
            INV
        );
        assert_eq!(
            put(
                key_ptrs.as_ptr(),
                value_ptrs.as_ptr(),
                lens.as_ptr(),
                usize::MAX / 2,
                codes.as_mut_ptr()
            ),
            INV
        );
        let bad = [0xfe_u8 as c_char, 0];
        let mixed = [key_ptrs[0], bad.as_ptr(), key_ptrs[2]];
        assert_eq!(
            put(
                mixed.as_ptr(),
                value_ptrs.as_ptr(),
                lens.as_ptr(),
                3,
                codes.as_mut_ptr()
            ),
            INV
        );
        let ulens = [1u64; 3];
        assert_eq!(
            yuebing_store_batch_put_from(
                store,
                key_ptrs.as_ptr(),
                std::ptr::null(),
                ulens.as_ptr(),
                3,
                std::ptr::null(),
                codes.as_mut_ptr(),
                nul()
            ),
            INV
        );
        let wrap = [u64::MAX; 3];
        assert_eq!(
            yuebing_store_batch_get_into(
                store,
                key_ptrs.as_ptr(),
                wrap.as_ptr(),
                ulens.as_ptr(),
                3,
                std::ptr::null(),
                codes.as_mut_ptr(),
                std::ptr::null_mut(),
                nul()
            ),
            INV
        );
        // Nothing of the refused batches was stored.
        let mut exists = [9u64; 3];
        assert_eq!(
            yuebing_store_batch_exist(
                store,
                key_ptrs.as_ptr(),
                3,
                std::ptr::null(),
                codes.as_mut_ptr(),
                exists.as_mut_ptr(),
                nul()
            ),
            0
        );
        assert_eq!((codes, exists), ([0; 3], [0; 3]));
        // An empty batch with NULL arrays is fine.
        let rc = put(
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
            0,
            std::ptr::null_mut(),
        );
        assert_eq!(rc, 0, "{}", common::last());
        let rc = put(
            key_ptrs.as_ptr(),
            value_ptrs.as_ptr(),
            lens.as_ptr(),
            3,
            codes.as_mut_ptr(),
        );
        assert_eq!(rc, 0, "{}", common::last());
        assert_eq!(codes, [0; 3]);
        // force must be 0 or 1.
        assert_eq!(
            yuebing_store_remove(store, key_ptrs[0], 2, std::ptr::null(), nul()),
            INV
        );
        assert_eq!(
            yuebing_store_remove_all(store, 7, std::ptr::null(), std::ptr::null_mut(), nul()),
            INV
        );

        // Engines: an overflowing range, a submit with an overflowing request, a name buffer
        // too small, unregistering memory the caller never registered.
        let mut engine = 0;
        assert_eq!(yuebing_store_engine(store, &mut engine, nul()), 0);
        let fake = (usize::MAX - 10) as *mut c_void;
        assert_eq!(
            yuebing_engine_register(engine, fake, 4096, std::ptr::null(), 0, nul()),
            INV
        );
        let loc = CString::new("gpu:9").unwrap();
        let mut buf = vec![0u8; 4096];
        let p = buf.as_mut_ptr().cast::<c_void>();
        assert_eq!(
            yuebing_engine_register(engine, p, buf.len(), loc.as_ptr(), 0, nul()),
            YUEBING_ERR_ENGINE_INVALID_ARGUMENT
        );
        let mut batch = 0;
        assert_eq!(yuebing_batch_new(engine, 2, &mut batch, nul()), 0);
        let request = yuebing_request {
            opcode: YUEBING_OP_READ,
            source: u64::MAX - 1,
            segment: 0,
            target_offset: 0,
            length: 8,
        };
        assert_eq!(
            yuebing_batch_submit(batch, &request, 1, std::ptr::null_mut(), nul()),
            INV
        );
        let mut status = yuebing_batch_status::default();
        assert_eq!(yuebing_batch_get_status(batch, &mut status, nul()), 0);
        assert_eq!(status.tasks, 0, "a refused submit adds no task");
        assert_eq!(
            yuebing_batch_task_status(
                batch,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                nul()
            ),
            YUEBING_ERR_ENGINE_INVALID_ARGUMENT
        );
        assert_eq!(yuebing_batch_free(batch, nul()), 0);
        let mut small = [0 as c_char; 4];
        let mut need = 0usize;
        assert_eq!(
            yuebing_engine_name(engine, small.as_mut_ptr(), small.len(), &mut need, nul()),
            INV
        );
        assert!(need > 4);
        assert_eq!(
            yuebing_engine_unregister(engine, 0x1000, nul()),
            YUEBING_ERR_ADDRESS_NOT_REGISTERED
        );
        assert_eq!(
            yuebing_engine_register(engine, p, buf.len(), std::ptr::null(), 0, nul()),
            0
        );
        assert_eq!(yuebing_engine_unregister(engine, p as u64, nul()), 0);
        assert_eq!(
            yuebing_engine_unregister(engine, p as u64, nul()),
            YUEBING_ERR_ADDRESS_NOT_REGISTERED
        );
        drop(buf);

        // Call handles: wrong kind, destroyed twice, cancelled after destroy.
        let mut call = 0;
        assert_eq!(
            yuebing_store_get_size_async(
                store,
                key_ptrs[0],
                std::ptr::null(),
                Some(ignore_number),
                std::ptr::null_mut(),
                &mut call,
                nul()
            ),
            0
        );
        assert_eq!(yuebing_call_cancel(store, nul()), HANDLE);
        assert_eq!(yuebing_call_destroy(call, nul()), 0);
        assert_eq!(yuebing_call_destroy(call, nul()), HANDLE);
        assert_eq!(yuebing_call_cancel(call, nul()), HANDLE);

        // Masters: a bad endpoint, a bad handle.
        let mut master = 0;
        let bad_ep = CString::new("nowhere").unwrap();
        assert_eq!(
            yuebing_master_new(
                bridge,
                bad_ep.as_ptr(),
                std::ptr::null(),
                &mut master,
                nul()
            ),
            YUEBING_ERR_INVALID_ENDPOINT
        );
        let mut health = yuebing_health::default();
        assert_eq!(yuebing_master_health(engine, &mut health, nul()), HANDLE);
        assert_eq!(
            yuebing_master_new(
                0,
                cluster.endpoint.as_ptr(),
                std::ptr::null(),
                &mut master,
                nul()
            ),
            0
        );
        assert_eq!(yuebing_master_health(master, &mut health, nul()), 0);
        assert!(health.ready);
        assert_eq!(yuebing_master_destroy(master, nul()), 0);

        // Frees: NULL, a zeroed buffer, a zeroed listing.
        yuebing_buf_free(std::ptr::null_mut());
        let mut zero = yuebing_buf {
            data: std::ptr::null_mut(),
            len: 0,
        };
        yuebing_buf_free(&mut zero);
        yuebing_list_free(std::ptr::null_mut());
        // A missing get leaves its output alone.
        let mut out = yuebing_buf {
            data: 7 as *mut u8,
            len: 7,
        };
        let missing = CString::new("missing").unwrap();
        let rc = yuebing_store_get(store, missing.as_ptr(), std::ptr::null(), &mut out, nul());
        assert_eq!(
            (rc, out.data as usize, out.len),
            (YUEBING_ERR_OBJECT_NOT_FOUND, 7, 7)
        );

        assert_eq!(yuebing_engine_destroy(engine, nul()), 0);
        assert_eq!(yuebing_store_destroy(store, nul()), 0);
        assert_eq!(yuebing_bridge_destroy(bridge, nul()), 0);
    }
}

unsafe extern "C" fn ignore_number(_: *mut c_void, _: i32, _: *const c_char, _: u64) {}

static FAST_DONE: AtomicU32 = AtomicU32::new(0);
static FAST_FAILED: AtomicU32 = AtomicU32::new(0);
static SLEEPER_IN: AtomicU32 = AtomicU32::new(0);
static SLEEPER_WAITED_OUT: AtomicU32 = AtomicU32::new(0);

/// Holds its callback thread until the 20 other callbacks ran (at most 10 s), then for the rest
/// of a second: the others must be served meanwhile, by the pool's other thread.
unsafe extern "C" fn block_the_pool(_: *mut c_void, _: i32, _: *const c_char, _: u64) {
    let start = Instant::now();
    SLEEPER_IN.store(1, Ordering::SeqCst);
    while FAST_DONE.load(Ordering::SeqCst) < 20 {
        if start.elapsed() > Duration::from_secs(10) {
            SLEEPER_WAITED_OUT.store(1, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_secs(1).saturating_sub(start.elapsed()));
}

unsafe extern "C" fn count_fast(_: *mut c_void, code: i32, _: *const c_char, _: u64) {
    if code != 0 {
        FAST_FAILED.fetch_add(1, Ordering::SeqCst);
    }
    FAST_DONE.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_callback_that_sleeps_leaves_other_calls_served() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let key = CString::new("k").unwrap();
    // SAFETY: valid arguments throughout; the callbacks use no user_data.
    unsafe {
        assert_eq!(
            yuebing_store_put(
                store,
                key.as_ptr(),
                b"v".as_ptr(),
                1,
                std::ptr::null(),
                nul()
            ),
            0
        );
        let start = Instant::now();
        let rc = yuebing_store_get_size_async(
            store,
            key.as_ptr(),
            std::ptr::null(),
            Some(block_the_pool),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, 0);
        while SLEEPER_IN.load(Ordering::SeqCst) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the first callback never ran"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // One pool thread is held now: the 20 calls below are served by the other, and the
        // blocking calls by no pool thread at all.
        for _ in 0..20 {
            let rc = yuebing_store_get_size_async(
                store,
                key.as_ptr(),
                std::ptr::null(),
                Some(count_fast),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                nul(),
            );
            assert_eq!(rc, 0);
            let mut size = 0;
            assert_eq!(
                yuebing_store_get_size(store, key.as_ptr(), std::ptr::null(), &mut size, nul()),
                0
            );
        }
        // All 20 are served while the first callback still holds its thread.
        while FAST_DONE.load(Ordering::SeqCst) < 20 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the other callbacks were not served"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(yuebing_store_destroy(store, nul()), 0);
        // The destroy waits for the held callback to return.
        assert_eq!(yuebing_bridge_destroy(bridge, nul()), 0);
        assert_eq!(
            SLEEPER_WAITED_OUT.load(Ordering::SeqCst),
            0,
            "the other callbacks waited for the held one"
        );
        assert_eq!(
            (
                FAST_DONE.load(Ordering::SeqCst),
                FAST_FAILED.load(Ordering::SeqCst)
            ),
            (20, 0)
        );
        assert!(start.elapsed() >= Duration::from_secs(1));
    }
}

unsafe extern "C" fn never(_: *mut c_void, _: i32, _: *const c_char, _: u64) {
    panic!("a refused call's callback ran");
}

#[test]
fn a_refused_call_writes_no_call_handle_and_never_calls_back() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let key = CString::new("k").unwrap();
    // SAFETY: valid arguments; `never` must not run.
    unsafe {
        assert_eq!(yuebing_bridge_destroy(bridge, nul()), 0);
        let mut call: yuebing_call_t = 12345;
        let rc = yuebing_store_get_size_async(
            store,
            key.as_ptr(),
            std::ptr::null(),
            Some(never),
            std::ptr::null_mut(),
            &mut call,
            nul(),
        );
        assert_eq!((rc, call), (YUEBING_ERR_SHUTDOWN, 12345));
        assert_eq!(yuebing_store_destroy(store, nul()), 0);
    }
}

#[test]
fn etcd_master_addresses_need_the_feature_and_a_well_formed_address() {
    let bridge = new_bridge();
    let store_new = |master: &str| {
        let master = CString::new(master).unwrap();
        let config = yuebing_store_config {
            master: master.as_ptr(),
            token: std::ptr::null(),
            store_size: 0,
            staging_size: 0,
            timeout_ms: 0,
            bind: std::ptr::null(),
            flags: 0,
        };
        let mut store = 0;
        // SAFETY: the config and its strings live through the call; `store` is writable.
        let code = unsafe { yuebing_store_new(bridge, &config, &mut store, nul()) };
        assert_eq!(store, 0, "{code}");
        code
    };
    let malformed = store_new("etcd://127.0.0.1:1/a/b");
    if cfg!(feature = "etcd") {
        assert_eq!(malformed, YUEBING_ERR_ETCD_INVALID_CONFIG);
    } else {
        let well_formed = store_new("etcd://127.0.0.1:1/c");
        assert_eq!(well_formed, YUEBING_ERR_ETCD_NOT_BUILT);
        assert_eq!(malformed, YUEBING_ERR_ETCD_NOT_BUILT);
        // SAFETY: a static NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(yuebing_error_name(well_formed)) };
        assert_eq!(name.to_str(), Ok("EtcdNotBuilt"));
    }
}
