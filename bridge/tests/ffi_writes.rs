//! The C forms of the puts that gather parts or replace values: `put_parts`, `upsert_parts`,
//! `upsert_from`, `batch_upsert` and `batch_upsert_from`, each blocking and in callback form,
//! against a master in this process, and their bad input (a code, and nothing stored).

mod common;

use std::ffi::{c_char, c_void, CString};

use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_ops::*;
use yuebing_bridge::ffi::types::*;

use common::{
    c_keys, exists, last, new_bridge, nul, on_done, on_each, outcome, put, value_of, Cluster,
    Registered, NO_CALL, NO_OPTS,
};

const INV: i32 = YUEBING_ERR_INVALID_ARGUMENT;
const HANDLE: i32 = YUEBING_ERR_INVALID_HANDLE;
const EXISTS: i32 = YUEBING_ERR_OBJECT_ALREADY_EXISTS;

/// Byte arrays as the C calls take them: pointers, lengths, how many.
type Arrays = (*const *const u8, *const usize, usize);

/// The pointers and lengths of `values` (keep them while the `Arrays` are used).
fn arrays(values: &[&[u8]]) -> (Vec<*const u8>, Vec<usize>) {
    values.iter().map(|v| (v.as_ptr(), v.len())).unzip()
}

type PartsFn = unsafe extern "C" fn(
    yuebing_store_t,
    *const c_char,
    *const *const u8,
    *const usize,
    usize,
    *const yuebing_options,
    *mut yuebing_error,
) -> i32;

type PartsAsyncFn = unsafe extern "C" fn(
    yuebing_store_t,
    *const c_char,
    *const *const u8,
    *const usize,
    usize,
    *const yuebing_options,
    yuebing_done_cb,
    *mut c_void,
    *mut yuebing_call_t,
    *mut yuebing_error,
) -> i32;

/// `f` (`put_parts` or `upsert_parts`) of `parts` under `key`.
///
/// # Safety
/// Every pointer is valid for what it claims, or NULL.
unsafe fn parts(f: PartsFn, store: yuebing_store_t, key: *const c_char, parts: Arrays) -> i32 {
    let (p, l, n) = parts;
    // SAFETY: forwarded.
    unsafe { f(store, key, p, l, n, std::ptr::null(), nul()) }
}

/// The callback form `f` of [`parts`] with `cb`: its outcome's code, or the code it returned.
///
/// # Safety
/// As [`parts`].
unsafe fn parts_async(
    f: PartsAsyncFn,
    store: yuebing_store_t,
    key: *const c_char,
    parts: Arrays,
    cb: yuebing_done_cb,
) -> Result<i32, i32> {
    let (p, l, n) = parts;
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    let started = outcome(|ud| unsafe {
        f(
            store,
            key,
            p,
            l,
            n,
            std::ptr::null(),
            cb,
            ud,
            NO_CALL,
            nul(),
        )
    });
    started.map(|(code, ())| code)
}

#[test]
fn put_parts_stores_the_parts_in_order_and_upsert_parts_replaces_them() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let (keys, k) = c_keys(&["parts/1", "parts/2", "parts/3"]);
    let (p, l) = arrays(&[b"kv-", b"layer", b"", b"7"]);
    let (np, nl) = arrays(&[b"new", b"er"]);
    let (old, new) = ((p.as_ptr(), l.as_ptr(), 4), (np.as_ptr(), nl.as_ptr(), 2));
    let (put_parts, upsert_parts) = (yuebing_store_put_parts, yuebing_store_upsert_parts);
    let (put_async, upsert_async) = (
        yuebing_store_put_parts_async,
        yuebing_store_upsert_parts_async,
    );
    // SAFETY: the keys, arrays and parts are valid for what they claim, or NULL where the
    // library must check them.
    unsafe {
        assert_eq!(parts(put_parts, store, k[0], old), 0, "{}", last());
        assert_eq!(value_of(store, "parts/1").unwrap(), b"kv-layer7");
        assert_eq!(parts(put_parts, store, k[0], new), EXISTS);
        assert_eq!(value_of(store, "parts/1").unwrap(), b"kv-layer7");
        assert_eq!(parts(upsert_parts, store, k[0], new), 0);
        assert_eq!(value_of(store, "parts/1").unwrap(), b"newer");

        // The callback forms.
        assert_eq!(
            parts_async(put_async, store, k[1], old, Some(on_done)),
            Ok(0)
        );
        assert_eq!(value_of(store, "parts/2").unwrap(), b"kv-layer7");
        assert_eq!(
            parts_async(put_async, store, k[1], new, Some(on_done)),
            Ok(EXISTS)
        );
        assert_eq!(
            parts_async(upsert_async, store, k[1], new, Some(on_done)),
            Ok(0)
        );
        assert_eq!(value_of(store, "parts/2").unwrap(), b"newer");

        // Bad input: a code, and nothing stored.
        let (hole_ptrs, hole_lens) = ([p[0], std::ptr::null()], [3usize, 5]);
        let holes = (hole_ptrs.as_ptr(), hole_lens.as_ptr(), 2);
        assert_eq!(parts(put_parts, 0, k[2], old), HANDLE);
        assert_eq!(parts(put_parts, store, std::ptr::null(), old), INV);
        assert_eq!(
            parts(put_parts, store, k[2], (std::ptr::null(), old.1, 4)),
            INV
        );
        assert_eq!(
            parts(upsert_parts, store, k[2], (old.0, std::ptr::null(), 4)),
            INV
        );
        assert_eq!(parts(upsert_parts, store, k[2], holes), INV);
        assert!(last().contains("a part"), "{}", last());
        // No parts: a value of 0 bytes, which the store refuses.
        let none = (std::ptr::null(), std::ptr::null(), 0);
        assert_eq!(
            parts(put_parts, store, k[2], none),
            YUEBING_ERR_INVALID_PARAMS
        );
        assert_eq!(parts_async(upsert_async, store, k[2], old, None), Err(INV));
        assert_eq!(
            parts_async(put_async, store, k[2], holes, Some(on_done)),
            Err(INV)
        );
    }
    assert!(!exists(store, "parts/3"), "a refused put stored something");
    drop(keys);
}

#[test]
fn upsert_from_replaces_a_value_from_registered_memory() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let mut mem = Registered::new(store, 128 << 10, 0);
    for (i, b) in mem.bytes.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let (first, second, len) = (mem.addr(0), mem.addr(64 << 10), 64 << 10);
    let key = CString::new("from/1").unwrap();
    let from = |f: unsafe extern "C" fn(_, _, _, _, _, _) -> i32, key: *const c_char, addr, len| {
        // SAFETY: the key is NULL or valid; the range is registered, or refused unread.
        unsafe { f(store, key, addr, len, std::ptr::null(), nul()) }
    };
    let (put_from, upsert_from) = (yuebing_store_put_from, yuebing_store_upsert_from);
    assert_eq!(from(put_from, key.as_ptr(), first, len), 0, "{}", last());
    assert_eq!(from(put_from, key.as_ptr(), second, len), EXISTS);
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
    assert_eq!(from(upsert_from, key.as_ptr(), second, len), 0);
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[64 << 10..]);

    // The callback form, replacing it back; and without a callback.
    let upsert_async = |addr, cb| {
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        outcome(|ud| unsafe {
            yuebing_store_upsert_from_async(
                store,
                key.as_ptr(),
                addr,
                len,
                std::ptr::null(),
                cb,
                ud,
                NO_CALL,
                nul(),
            )
        })
        .map(|(code, ())| code)
    };
    assert_eq!(upsert_async(first, Some(on_done)), Ok(0));
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
    assert_eq!(upsert_async(second, None), Err(INV));

    // Bad input: a range that wraps, a bad handle, a NULL key; the value stays.
    assert_eq!(from(upsert_from, key.as_ptr(), u64::MAX - 1, 10), INV);
    assert_eq!(from(upsert_from, std::ptr::null(), second, len), INV);
    // SAFETY: the handle is checked before anything is read.
    let rc =
        unsafe { yuebing_store_upsert_from(0, key.as_ptr(), second, len, std::ptr::null(), nul()) };
    assert_eq!(rc, HANDLE);
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
}

/// The codes of a blocking batch call, or the code it returned.
fn codes_of<const N: usize>(call: impl FnOnce(*mut i32) -> i32) -> Result<[i32; N], i32> {
    let mut codes = [9i32; N];
    match call(codes.as_mut_ptr()) {
        0 => Ok(codes),
        code => Err(code),
    }
}

/// The codes a batch's callback was handed, or the code its start returned.
fn each_codes(start: impl FnOnce(*mut c_void) -> i32) -> Result<(i32, Vec<i32>), i32> {
    outcome(start).map(|(code, (codes, _)): (i32, (Vec<i32>, Vec<u64>))| (code, codes))
}

#[test]
fn batch_upserts_replace_and_add_with_a_code_per_item() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    put(store, "b/a", b"old a");
    let (_keys, k) = c_keys(&["b/a", "b/c"]);
    let (p, l) = arrays(&[b"new a", b"new c"]);
    let (np, nl) = arrays(&[b"newer a", b"newer c"]);
    let batch = |f: unsafe extern "C" fn(_, _, _, _, _, _, _, _) -> i32, (p, l, n): Arrays| {
        // SAFETY: every array holds `n` elements, each value its length, or is NULL; the
        // codes have room for 2.
        codes_of::<2>(|c| unsafe { f(store, k.as_ptr(), p, l, n, std::ptr::null(), c, nul()) })
    };
    let (batch_put, batch_upsert) = (yuebing_store_batch_put, yuebing_store_batch_upsert);
    let (old, new) = ((p.as_ptr(), l.as_ptr(), 2), (np.as_ptr(), nl.as_ptr(), 2));
    assert_eq!(
        batch(batch_put, old),
        Ok([EXISTS, 0]),
        "a put keeps the existing value"
    );
    assert_eq!(value_of(store, "b/a").unwrap(), b"old a");
    assert_eq!(batch(batch_upsert, new), Ok([0, 0]), "{}", last());
    assert_eq!(value_of(store, "b/a").unwrap(), b"newer a");
    assert_eq!(value_of(store, "b/c").unwrap(), b"newer c");
    // The callback form; and bad input (a NULL array, no room for the codes, no callback).
    let upsert_async = |(p, l, n): Arrays, cb| {
        let kp = k.as_ptr();
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        each_codes(|ud| unsafe {
            yuebing_store_batch_upsert_async(store, kp, p, l, n, NO_OPTS, cb, ud, NO_CALL, nul())
        })
    };
    assert_eq!(upsert_async(old, Some(on_each)), Ok((0, vec![0, 0])));
    assert_eq!(value_of(store, "b/a").unwrap(), b"new a");
    assert_eq!(upsert_async(new, None), Err(INV));
    assert_eq!(
        batch(batch_upsert, (std::ptr::null(), l.as_ptr(), 2)),
        Err(INV)
    );
    // SAFETY: valid arrays of 2; the NULL codes are refused before anything is read.
    let rc = unsafe {
        batch_upsert(
            store,
            k.as_ptr(),
            np.as_ptr(),
            nl.as_ptr(),
            2,
            std::ptr::null(),
            std::ptr::null_mut(),
            nul(),
        )
    };
    assert_eq!(rc, INV);
    assert_eq!(
        value_of(store, "b/a").unwrap(),
        b"new a",
        "a refused batch stored something"
    );

    // From registered memory: the first 5 bytes replace b/a, the next 3 are a new key.
    let mut mem = Registered::new(store, 4096, 0);
    mem.bytes[..8].copy_from_slice(b"fromDEF!");
    let (_keys, k) = c_keys(&["b/a", "b/d"]);
    let lens = [5u64, 3];
    let ranges = |f: unsafe extern "C" fn(_, _, _, _, _, _, _, _) -> i32, addrs: [u64; 2]| {
        // SAFETY: the arrays hold 2 elements, the ranges registered (or refused unread).
        codes_of::<2>(|c| unsafe {
            f(
                store,
                k.as_ptr(),
                addrs.as_ptr(),
                lens.as_ptr(),
                2,
                std::ptr::null(),
                c,
                nul(),
            )
        })
    };
    let (batch_put_from, batch_upsert_from) = (
        yuebing_store_batch_put_from,
        yuebing_store_batch_upsert_from,
    );
    let addrs = [mem.addr(0), mem.addr(5)];
    assert_eq!(ranges(batch_put_from, addrs), Ok([EXISTS, 0]));
    assert_eq!(ranges(batch_upsert_from, addrs), Ok([0, 0]));
    assert_eq!(value_of(store, "b/a").unwrap(), b"fromD");
    assert_eq!(value_of(store, "b/d").unwrap(), b"EF!");
    let wraps = [u64::MAX - 1, mem.addr(0)];
    assert_eq!(
        ranges(batch_upsert_from, wraps),
        Err(INV),
        "a range that wraps"
    );
    mem.bytes[..5].copy_from_slice(b"again");
    let (kp, ap, lp) = (k.as_ptr(), addrs.as_ptr(), lens.as_ptr());
    let upsert_from_async = |cb| {
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        each_codes(|ud| unsafe {
            yuebing_store_batch_upsert_from_async(
                store,
                kp,
                ap,
                lp,
                1,
                NO_OPTS,
                cb,
                ud,
                NO_CALL,
                nul(),
            )
        })
    };
    assert_eq!(upsert_from_async(Some(on_each)), Ok((0, vec![0])));
    assert_eq!(value_of(store, "b/a").unwrap(), b"again");
    assert_eq!(upsert_from_async(None), Err(INV));
    assert_eq!(value_of(store, "b/a").unwrap(), b"again");
}
