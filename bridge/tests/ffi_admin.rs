//! The C forms of the removals of many keys and the client's health: `batch_remove`,
//! `remove_by_regex` and `health_check`, each blocking and in callback form, against a master
//! in this process, and their bad input (a code, and nothing removed).

mod common;

use std::ffi::{c_char, CString};

use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::yuebing_store_destroy;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_whole::*;
use yuebing_bridge::ffi::types::*;

use common::{
    c_keys, exists, last, new_bridge, nul, on_each, on_number, outcome, put, value_of, Cluster,
    NO_CALL,
};

const INV: i32 = YUEBING_ERR_INVALID_ARGUMENT;
const HANDLE: i32 = YUEBING_ERR_INVALID_HANDLE;
const MISSING: i32 = YUEBING_ERR_OBJECT_NOT_FOUND;

/// `yuebing_store_batch_remove` of `n` keys: each key's code, or the code it returned.
///
/// # Safety
/// `keys` is NULL or valid for `n` NUL-terminated keys.
unsafe fn batch_remove(
    store: yuebing_store_t,
    (keys, n): (*const *const c_char, usize),
    force: u32,
) -> Result<Vec<i32>, i32> {
    let mut codes = vec![9i32; n];
    let none = std::ptr::null();
    // SAFETY: forwarded; `codes` has room for `n`.
    match unsafe {
        yuebing_store_batch_remove(store, keys, n, force, none, codes.as_mut_ptr(), nul())
    } {
        0 => Ok(codes),
        code => Err(code),
    }
}

/// The callback form of [`batch_remove`] with `cb`: the outcome's code and the keys' codes,
/// or the code it returned.
///
/// # Safety
/// As [`batch_remove`].
unsafe fn batch_remove_async(
    store: yuebing_store_t,
    (keys, n): (*const *const c_char, usize),
    force: u32,
    cb: yuebing_each_cb,
) -> Result<(i32, Vec<i32>), i32> {
    let none = std::ptr::null();
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    let started = outcome(|ud| unsafe {
        yuebing_store_batch_remove_async(store, keys, n, force, none, cb, ud, NO_CALL, nul())
    });
    started.map(|(code, (codes, _)): (i32, (Vec<i32>, Vec<u64>))| (code, codes))
}

#[test]
fn batch_remove_gives_each_key_its_code_and_force_passes_a_lease() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    for k in ["r/a", "r/b", "r/leased", "r/async", "r/kept"] {
        put(store, k, b"v");
    }
    let (_keys, k) = c_keys(&["r/a", "r/missing", "r/b"]);
    let (_leased, leased) = c_keys(&["r/leased"]);
    let (_later, later) = c_keys(&["r/async", "r/missing"]);
    let (_kept, kept) = c_keys(&["r/kept"]);
    // SAFETY: every array holds as many keys as its count says, or is NULL where the library
    // must check it.
    unsafe {
        assert_eq!(
            batch_remove(store, (k.as_ptr(), 3), 0),
            Ok(vec![0, MISSING, 0])
        );
        assert!(!exists(store, "r/a") && !exists(store, "r/b"));

        // A get takes a read lease: only `force` removes the object meanwhile.
        value_of(store, "r/leased").unwrap();
        let leased = (leased.as_ptr(), 1);
        assert_eq!(
            batch_remove(store, leased, 0),
            Ok(vec![YUEBING_ERR_OBJECT_HAS_LEASE])
        );
        assert_eq!(batch_remove(store, leased, 1), Ok(vec![0]));
        assert!(!exists(store, "r/leased"));

        // The callback form.
        let later = (later.as_ptr(), 2);
        assert_eq!(
            batch_remove_async(store, later, 0, Some(on_each)),
            Ok((0, vec![0, MISSING]))
        );
        assert!(!exists(store, "r/async"));

        // Bad input: force 2, NULL keys with items, a bad handle, no callback.
        let kept = (kept.as_ptr(), 1);
        assert_eq!(batch_remove(store, kept, 2), Err(INV));
        assert_eq!(batch_remove(store, (std::ptr::null(), 1), 0), Err(INV));
        assert_eq!(batch_remove(0, kept, 0), Err(HANDLE));
        assert_eq!(batch_remove_async(store, kept, 0, None), Err(INV));
        assert_eq!(
            batch_remove_async(store, kept, 3, Some(on_each)),
            Err(INV),
            "a bad force starts nothing"
        );
        // No room for the codes.
        let rc = yuebing_store_batch_remove(
            store,
            kept.0,
            1,
            0,
            std::ptr::null(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, INV);
    }
    assert!(
        exists(store, "r/kept"),
        "a refused removal removed something"
    );
}

/// `yuebing_store_remove_by_regex` of `pattern`: how many it removed, or its code.
///
/// # Safety
/// `pattern` is NULL or NUL-terminated.
unsafe fn remove_by_regex(
    store: yuebing_store_t,
    pattern: *const c_char,
    force: u32,
) -> Result<u64, i32> {
    let mut removed = 99u64;
    // SAFETY: forwarded; a valid output.
    match unsafe {
        yuebing_store_remove_by_regex(store, pattern, force, std::ptr::null(), &mut removed, nul())
    } {
        0 => Ok(removed),
        code => {
            assert_eq!(removed, 99, "a failure wrote its output");
            Err(code)
        }
    }
}

/// The callback form of [`remove_by_regex`] with `cb`: the outcome, or the code it returned.
///
/// # Safety
/// As [`remove_by_regex`].
unsafe fn remove_by_regex_async(
    store: yuebing_store_t,
    pattern: *const c_char,
    force: u32,
    cb: yuebing_u64_cb,
) -> Result<(i32, u64), i32> {
    let none = std::ptr::null();
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    outcome(|ud| unsafe {
        yuebing_store_remove_by_regex_async(store, pattern, force, none, cb, ud, NO_CALL, nul())
    })
}

#[test]
fn remove_by_regex_removes_what_the_pattern_matches_and_counts_it() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    for k in ["re/a", "re/b", "other/re/c"] {
        put(store, k, b"v");
    }
    let (anchored, anywhere) = (
        CString::new("^re/").unwrap(),
        CString::new("re/c$").unwrap(),
    );
    let (bad, not_utf8) = (CString::new("(re").unwrap(), [0xff_u8 as c_char, 0]);
    // SAFETY: every pattern is NUL-terminated, or NULL where the library must check it.
    unsafe {
        assert_eq!(
            remove_by_regex(store, anchored.as_ptr(), 0),
            Ok(2),
            "{}",
            last()
        );
        assert!(!exists(store, "re/a") && !exists(store, "re/b"));
        assert!(exists(store, "other/re/c"), "the pattern is anchored");
        // The callback form: a pattern that matches anywhere in a key.
        assert_eq!(
            remove_by_regex_async(store, anywhere.as_ptr(), 0, Some(on_number)),
            Ok((0, 1))
        );
        assert!(!exists(store, "other/re/c"));

        // Bad input: a pattern that does not compile (the store's InvalidParams, before any
        // round trip, in both forms), NULL, not UTF-8; force 2; a bad handle; no callback.
        put(store, "re/kept", b"v");
        let params = YUEBING_ERR_INVALID_PARAMS;
        assert_eq!(remove_by_regex(store, bad.as_ptr(), 1), Err(params));
        assert_eq!(
            remove_by_regex_async(store, bad.as_ptr(), 1, Some(on_number)),
            Ok((params, 0))
        );
        assert_eq!(remove_by_regex(store, std::ptr::null(), 1), Err(INV));
        assert_eq!(remove_by_regex(store, not_utf8.as_ptr(), 1), Err(INV));
        assert_eq!(remove_by_regex(store, anchored.as_ptr(), 2), Err(INV));
        assert_eq!(remove_by_regex(0, anchored.as_ptr(), 1), Err(HANDLE));
        assert_eq!(
            remove_by_regex_async(store, anchored.as_ptr(), 1, None),
            Err(INV)
        );
        assert!(
            exists(store, "re/kept"),
            "a refused removal removed something"
        );
        // A NULL output: the count is not wanted.
        let rc = yuebing_store_remove_by_regex(
            store,
            anchored.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, 0);
    }
    assert!(!exists(store, "re/kept"));
}

/// `yuebing_store_health_check` in both forms, with this deadline: what each said.
fn health(store: yuebing_store_t, timeout_ms: u64) -> (Result<u64, i32>, Result<(i32, u64), i32>) {
    let opts = yuebing_options {
        timeout_ms,
        replica_num: 0,
        flags: 0,
    };
    let mut out = 99u64;
    // SAFETY: valid options and output; the outcome is awaited while its `user_data` lives.
    unsafe {
        let blocking = match yuebing_store_health_check(store, &opts, &mut out, nul()) {
            0 => Ok(out),
            code => Err(code),
        };
        let started = outcome(|ud| {
            yuebing_store_health_check_async(store, &opts, Some(on_number), ud, NO_CALL, nul())
        });
        (blocking, started)
    }
}

#[test]
fn health_check_says_healthy_closed_or_master_unreachable() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let (healthy, closed) = (YUEBING_CLIENT_HEALTHY, YUEBING_CLIENT_CLOSED);
    assert_eq!(health(store, 5_000), (Ok(healthy), Ok((0, healthy))));

    // A client whose master is gone: unreachable within the call's deadline.
    let gone = Cluster::start();
    let orphan = gone.store(new_bridge());
    drop(gone);
    let unreachable = YUEBING_CLIENT_MASTER_UNREACHABLE;
    assert_eq!(health(orphan, 300), (Ok(unreachable), Ok((0, unreachable))));

    // After close: closed, without asking the master.
    // SAFETY: valid handle.
    assert_eq!(
        unsafe { yuebing_store_close(store, std::ptr::null(), nul()) },
        0
    );
    assert_eq!(health(store, 5_000), (Ok(closed), Ok((0, closed))));

    // Bad input: a bad handle or options, no callback; the output left alone.
    let bad_opts = yuebing_options {
        timeout_ms: 0,
        replica_num: 0,
        flags: 0x80,
    };
    let mut out = 99u64;
    // SAFETY: every pointer is valid, or NULL where the library must check it.
    unsafe {
        assert_eq!(
            yuebing_store_health_check(store, &bad_opts, &mut out, nul()),
            INV
        );
        assert_eq!(out, 99);
        let rc = yuebing_store_health_check_async(
            store,
            std::ptr::null(),
            None,
            std::ptr::null_mut(),
            NO_CALL,
            nul(),
        );
        assert_eq!(rc, INV);
        assert_eq!(yuebing_store_destroy(store, nul()), 0);
        assert_eq!(yuebing_store_destroy(orphan, nul()), 0);
    }
    assert_eq!(
        health(store, 100),
        (Err(HANDLE), Err(HANDLE)),
        "a destroyed store"
    );
    assert_eq!(health(0, 100), (Err(HANDLE), Err(HANDLE)));
}
