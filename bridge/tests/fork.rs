//! After `fork()` a child's calls on the parent's clients are refused with `Forked` (−4005)
//! before they touch anything of the parent's. The staging memory of a store client is a
//! shared memfd mapping: a put that copied its value there before being refused would write
//! into the parent's staging, under ranges the parent hands to its own puts and gets.
//!
//! One test in its own binary: `fork()` copies only the calling thread, and no other test may
//! hold a lock the child needs.

mod common;

use std::ffi::{CStr, CString};
use std::time::Duration;

use yuebing_bridge::ffi::error::YUEBING_ERR_FORKED;
use yuebing_bridge::ffi::store_ops::yuebing_store_put;
use yuebing_bridge::ffi::types::yuebing_store_t;
use yuebing_bridge::{BlockingClient, Bridge, BridgeConfig};
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
fn a_forked_childs_put_writes_nothing_into_the_parents_staging() {
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
        let refused = rc == YUEBING_ERR_FORKED
            && rust.is_err_and(|e| e.code() == -4005)
            && call.is_err_and(|e| e.code() == -4005);
        // SAFETY: `_exit` ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let status = reaped(pid, Duration::from_secs(30));
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's calls were not refused with Forked (status {status:#x})"
    );
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
