//! After `fork()` a child's calls on the parent's clients are refused with `Forked` (−4005)
//! before they touch anything of the parent's. The staging memory of a store client is a
//! shared memfd mapping: a put that copied its value there before being refused would write
//! into the parent's staging, under ranges the parent hands to its own puts and gets.
//!
//! Nor may the child's destroy or unregister release what it inherited: releasing an exported
//! buffer clears its slot in the shared-memory transport's status page, a memfd page shared
//! with the parent, and the parent's same-host peers would then refuse to read it.
//!
//! One test in its own binary: `fork()` copies only the calling thread, and no other test may
//! hold a lock the child needs.

mod common;

use std::ffi::{CStr, CString};
use std::time::Duration;

use yuebing_bridge::ffi::engine_api::{
    yuebing_engine_allocate, yuebing_engine_destroy, yuebing_engine_name, yuebing_engine_unregister,
};
use yuebing_bridge::ffi::error::YUEBING_ERR_FORKED;
use yuebing_bridge::ffi::store_api::{yuebing_store_destroy, yuebing_store_engine};
use yuebing_bridge::ffi::store_ops::yuebing_store_put;
use yuebing_bridge::ffi::types::yuebing_store_t;
use yuebing_bridge::ffi::types::YUEBING_ACCESS_READ;
use yuebing_bridge::{BlockingClient, BlockingEngine, Bridge, BridgeConfig};
use yuebing_engine::{EngineConfig, TransportKind};
use yuebing_store::{ClientConfig, Options};

/// 4 KiB that no other test or call writes: the kit's pattern, seeded by this process's id.
fn pattern(seed: u64) -> Vec<u8> {
    yuebing_testkit::patterns::pattern(4096, seed ^ (u64::from(std::process::id()) << 20))
}

/// Whether any readable memfd mapping of this process (the engines' buffers and staging)
/// holds `needle` at an 8-byte aligned place (staging hands out 64-byte aligned ranges).
fn memfd_memory_holds(needle: &[u8]) -> bool {
    let needle: Vec<u64> = needle
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines().filter(|l| l.contains("/memfd:")) {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next().unwrap(), fields.next().unwrap());
        if !perms.starts_with('r') {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = usize::from_str_radix(start, 16).unwrap();
        let end = usize::from_str_radix(end, 16).unwrap();
        // SAFETY: the range is a readable, page-aligned mapping of this process (from
        // /proc/self/maps) that stays mapped: the clients that own it live until the end of the
        // test, and nothing transfers meanwhile. It is read word by word, through raw reads.
        let words = unsafe { common::copied(start as *const u64, (end - start) / 8) };
        if words.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
    }
    false
}

/// The wait status of child `pid`, which must end within `limit` (else it is killed).
fn reaped(pid: libc::pid_t, limit: Duration) -> i32 {
    let until = std::time::Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: `pid` is this process's child; `status` is a valid output.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 if std::time::Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            0 => {
                // SAFETY: `pid` is our child, not reaped yet: the pid cannot have been reused.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                // SAFETY: as above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                panic!("the child did not end within {limit:?}: a call blocked in the child");
            }
            got => {
                assert_eq!(got, pid, "waitpid failed");
                return status;
            }
        }
    }
}

/// An engine handle of `store`'s engine and a 4 KiB buffer it allocated for peers to read.
fn exported_buffer(store: yuebing_store_t) -> (u64, u64) {
    let (mut engine, mut addr) = (0, 0);
    // SAFETY: a valid store handle; valid outputs; NULL errors.
    unsafe {
        assert_eq!(
            yuebing_store_engine(store, &mut engine, std::ptr::null_mut()),
            0
        );
        let rc = yuebing_engine_allocate(
            engine,
            4096,
            YUEBING_ACCESS_READ,
            &mut addr,
            std::ptr::null_mut(),
        );
        assert_eq!(rc, 0, "{}", common::last());
    }
    (engine, addr)
}

/// The segment name of C engine handle `engine`.
fn engine_name(engine: u64) -> String {
    let (mut buf, mut len) = ([0 as std::ffi::c_char; 256], 0usize);
    // SAFETY: `buf` holds 256 bytes; valid outputs; NULL error.
    let rc = unsafe {
        yuebing_engine_name(
            engine,
            buf.as_mut_ptr(),
            buf.len(),
            &mut len,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "{}", common::last());
    // SAFETY: a successful call wrote a NUL-terminated name into `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// `yuebing_store_put` of `value` under `key`, with the default options.
fn c_put(store: yuebing_store_t, key: &CStr, value: &[u8]) -> i32 {
    // SAFETY: a valid handle, key and value; NULL options and error are allowed.
    unsafe {
        yuebing_store_put(
            store,
            key.as_ptr(),
            value.as_ptr(),
            value.len(),
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    }
}

#[test]
fn a_forked_childs_calls_touch_nothing_of_its_parents() {
    let cluster = common::Cluster::start();
    let c_bridge = common::new_bridge();
    let c_store = cluster.store(c_bridge);
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let cfg = ClientConfig {
        masters: vec![cluster.endpoint.to_str().unwrap().parse().unwrap()],
        store_size: 16 << 20,
        ..ClientConfig::default()
    };
    let client = BlockingClient::start(&bridge, cfg).unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let (c_value, rust_value, call_value) = (pattern(1), pattern(2), pattern(3));
    let key = CString::new("from-c").unwrap();
    for value in [&c_value, &rust_value, &call_value] {
        assert!(!memfd_memory_holds(value));
    }
    // An exported buffer of the C store's engine, read over shm by another engine of this
    // process: its slot in the status page is held.
    let (c_engine, exported) = exported_buffer(c_store);
    let peer = BlockingEngine::start(&bridge, EngineConfig::default()).unwrap();
    let segment = peer.open_segment(&engine_name(c_engine)).unwrap();
    assert_eq!(
        peer.engine().selected_transport(segment).unwrap(),
        TransportKind::Shm
    );
    let local = peer.allocate(4096, true).unwrap();
    peer.read(local.addr(), segment, exported, 4096).unwrap();

    // SAFETY: the child calls only what the test checks and leaves with `_exit`, running no
    // destructor or atexit handler of the parent's.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let rc = c_put(c_store, &key, &c_value);
        let rust = client.put("from-rust", &rust_value, &opts);
        let call = client
            .call(|c| c.put("from-call", &call_value, &opts))
            .wait();
        // SAFETY: valid handles and address; NULL errors.
        let released = unsafe {
            [
                yuebing_engine_unregister(c_engine, exported, std::ptr::null_mut()),
                yuebing_engine_destroy(c_engine, std::ptr::null_mut()),
                yuebing_store_destroy(c_store, std::ptr::null_mut()),
            ]
        };
        let puts_refused = rc == YUEBING_ERR_FORKED
            && rust.is_err_and(|e| e.code() == -4005)
            && call.is_err_and(|e| e.code() == -4005);
        let releases_refused = released == [YUEBING_ERR_FORKED; 3];
        let code = i32::from(!puts_refused) | i32::from(!releases_refused) << 1;
        // SAFETY: `_exit` ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(code) };
    }
    let status = reaped(pid, Duration::from_secs(30));
    assert!(
        libc::WIFEXITED(status),
        "the child died (status {status:#x})"
    );
    // First what the child's calls did to the parent's memory, then what they answered.
    assert!(
        !memfd_memory_holds(&c_value),
        "the child's C put wrote its value into memory shared with the parent"
    );
    assert!(
        !memfd_memory_holds(&rust_value),
        "the child's blocking put wrote its value into memory shared with the parent"
    );
    assert!(
        !memfd_memory_holds(&call_value),
        "the child's BlockingClient::call put wrote its value into memory shared with the parent"
    );

    // The exported buffer is live still: the child released nothing of the parent's.
    peer.read(local.addr(), segment, exported, 4096)
        .expect("the child's unregister or destroy released the parent's exported buffer");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child's calls were not refused with Forked (1: its puts, 2: its releases)"
    );

    // The parent's clients are untouched: its own puts and gets still round-trip.
    client.put("parent", &rust_value, &opts).unwrap();
    assert_eq!(client.get("parent", &opts).unwrap(), rust_value);
    // The scan sees what a put leaves in the client's memfd-backed store space: without this,
    // a scan that missed the mappings would pass the checks above.
    assert!(
        memfd_memory_holds(&rust_value),
        "the scan does not see the store's memory"
    );
    let rc = c_put(c_store, &key, &c_value);
    assert_eq!(rc, 0, "{}", common::last());
    let got = common::value_of(c_store, "from-c").unwrap();
    assert_eq!(got, c_value);
}
