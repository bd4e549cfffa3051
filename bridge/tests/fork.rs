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
use yuebing_bridge::ffi::store_api::yuebing_buf_free;
use yuebing_bridge::ffi::store_ops::{yuebing_store_get, yuebing_store_put};
use yuebing_bridge::ffi::types::{yuebing_buf, yuebing_store_t};
use yuebing_bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing_store::{ClientConfig, Options};

/// 4 KiB that no other test or call writes: the kit's pattern, seeded by this process's id.
fn pattern(seed: u64) -> Vec<u8> {
    yuebing_testkit::patterns::pattern(4096, seed ^ (u64::from(std::process::id()) << 20))
}

/// Whether any readable memfd mapping of this process (the engines' buffers and staging)
/// holds `needle`.
fn memfd_memory_holds(needle: &[u8]) -> bool {
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
        let mut copy = vec![0u8; end - start];
        // SAFETY: the range is a readable mapping of this process (from /proc/self/maps) that
        // stays mapped: the clients that own it live until the end of the test, and nothing
        // transfers meanwhile. A raw copy forms no reference over the mapped memory.
        unsafe { std::ptr::copy_nonoverlapping(start as *const u8, copy.as_mut_ptr(), copy.len()) };
        if copy.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
    }
    false
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
    let (c_value, rust_value) = (pattern(1), pattern(2));
    let key = CString::new("from-c").unwrap();
    assert!(!memfd_memory_holds(&c_value) && !memfd_memory_holds(&rust_value));

    // SAFETY: the child calls only what the test checks and leaves with `_exit`, running no
    // destructor or atexit handler of the parent's.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let rc = c_put(c_store, &key, &c_value);
        let rust = client.put("from-rust", &rust_value, &opts);
        let refused = rc == YUEBING_ERR_FORKED && rust.is_err_and(|e| e.code() == -4005);
        // SAFETY: `_exit` ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid output.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
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

    // The parent's clients are untouched: its own puts and gets still round-trip.
    client.put("parent", &rust_value, &opts).unwrap();
    assert_eq!(client.get("parent", &opts).unwrap(), rust_value);
    let rc = c_put(c_store, &key, &c_value);
    assert_eq!(rc, 0, "{}", common::last());
    let mut buf = yuebing_buf {
        data: std::ptr::null_mut(),
        len: 0,
    };
    // SAFETY: valid handle and key; `buf` is a valid output, freed below.
    let rc = unsafe {
        yuebing_store_get(
            c_store,
            key.as_ptr(),
            std::ptr::null(),
            &mut buf,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "{}", common::last());
    // SAFETY: a successful get filled `buf` with `len` bytes it owns.
    let got = unsafe { std::slice::from_raw_parts(buf.data, buf.len) }.to_vec();
    // SAFETY: `buf` came from the get and is freed once.
    unsafe { yuebing_buf_free(&mut buf) };
    assert_eq!(got, c_value);
}
