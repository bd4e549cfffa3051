//! The C forms of the puts that gather parts or replace values: `put_parts`, the put forms
//! with `YUEBING_OPT_UPSERT` in their options (`put_parts`, `put_from`, `batch_put` and
//! `batch_put_from` replace an existing value with it, and fail with
//! `YUEBING_ERR_OBJECT_ALREADY_EXISTS` without it), and `yuebing_store_upsert`, the shorthand
//! of `put` with that bit; each blocking and in callback form, against a master in this
//! process, and their bad input (a code, and nothing stored).

mod common;

use std::ffi::{c_char, c_void, CString};

use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::{store_handle, yuebing_store_destroy};
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_located::{yuebing_replicas_free, yuebing_store_replicas};
use yuebing_bridge::ffi::store_ops::*;
use yuebing_bridge::ffi::types::*;
use yuebing_bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing_store::master::PutConfig;
use yuebing_store::ClientConfig;

use common::{
    c_keys, exists, last, new_bridge, nul, on_done, on_each, outcome, put, value_of, Cluster,
    Registered, NO_CALL, NO_OPTS,
};

const INV: i32 = YUEBING_ERR_INVALID_ARGUMENT;
const HANDLE: i32 = YUEBING_ERR_INVALID_HANDLE;
const EXISTS: i32 = YUEBING_ERR_OBJECT_ALREADY_EXISTS;

/// The client's defaults, and a put that replaces an existing value.
const UPSERT: yuebing_options = yuebing_options {
    timeout_ms: 0,
    replica_num: 0,
    flags: YUEBING_OPT_UPSERT,
};

/// [`UPSERT`] as the calls take it.
const UP: *const yuebing_options = &UPSERT;

/// [`UPSERT`] with a bit no option has: refused.
const UNKNOWN: yuebing_options = yuebing_options {
    timeout_ms: 0,
    replica_num: 0,
    flags: YUEBING_OPT_UPSERT | 0x80,
};

/// Byte arrays as the C calls take them: pointers, lengths, how many.
type Arrays = (*const *const u8, *const usize, usize);

/// The pointers and lengths of `values` (keep them while the `Arrays` are used).
fn arrays(values: &[&[u8]]) -> (Vec<*const u8>, Vec<usize>) {
    values.iter().map(|v| (v.as_ptr(), v.len())).unzip()
}

/// `put_parts` of `parts` under `key` with `opts`.
///
/// # Safety
/// Every pointer is valid for what it claims, or NULL.
unsafe fn parts(
    store: yuebing_store_t,
    key: *const c_char,
    parts: Arrays,
    opts: *const yuebing_options,
) -> i32 {
    let (p, l, n) = parts;
    // SAFETY: forwarded.
    unsafe { yuebing_store_put_parts(store, key, p, l, n, opts, nul()) }
}

/// The callback form of [`parts`] with `cb`: its outcome's code, or the code it returned.
///
/// # Safety
/// As [`parts`].
unsafe fn parts_async(
    store: yuebing_store_t,
    key: *const c_char,
    parts: Arrays,
    opts: *const yuebing_options,
    cb: yuebing_done_cb,
) -> Result<i32, i32> {
    let (p, l, n) = parts;
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    let started = outcome(|ud| unsafe {
        yuebing_store_put_parts_async(store, key, p, l, n, opts, cb, ud, NO_CALL, nul())
    });
    started.map(|(code, ())| code)
}

#[test]
fn put_parts_stores_the_parts_in_order_and_replaces_them_with_the_upsert_flag() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let (keys, k) = c_keys(&["parts/1", "parts/2", "parts/3"]);
    let (p, l) = arrays(&[b"kv-", b"layer", b"", b"7"]);
    let (np, nl) = arrays(&[b"new", b"er"]);
    let (old, new) = ((p.as_ptr(), l.as_ptr(), 4), (np.as_ptr(), nl.as_ptr(), 2));
    // SAFETY: the keys, arrays and parts are valid for what they claim, or NULL where the
    // library must check them.
    unsafe {
        assert_eq!(parts(store, k[0], old, NO_OPTS), 0, "{}", last());
        assert_eq!(value_of(store, "parts/1").unwrap(), b"kv-layer7");
        assert_eq!(parts(store, k[0], new, NO_OPTS), EXISTS);
        assert_eq!(value_of(store, "parts/1").unwrap(), b"kv-layer7");
        assert_eq!(parts(store, k[0], new, UP), 0, "{}", last());
        assert_eq!(value_of(store, "parts/1").unwrap(), b"newer");

        // The callback forms.
        assert_eq!(parts_async(store, k[1], old, NO_OPTS, Some(on_done)), Ok(0));
        assert_eq!(value_of(store, "parts/2").unwrap(), b"kv-layer7");
        assert_eq!(
            parts_async(store, k[1], new, NO_OPTS, Some(on_done)),
            Ok(EXISTS)
        );
        assert_eq!(value_of(store, "parts/2").unwrap(), b"kv-layer7");
        assert_eq!(parts_async(store, k[1], new, UP, Some(on_done)), Ok(0));
        assert_eq!(value_of(store, "parts/2").unwrap(), b"newer");

        // Bad input: a code, and nothing stored.
        let (hole_ptrs, hole_lens) = ([p[0], std::ptr::null()], [3usize, 5]);
        let holes = (hole_ptrs.as_ptr(), hole_lens.as_ptr(), 2);
        assert_eq!(parts(0, k[2], old, NO_OPTS), HANDLE);
        assert_eq!(parts(0, k[2], old, UP), HANDLE);
        assert_eq!(parts(store, std::ptr::null(), old, NO_OPTS), INV);
        assert_eq!(
            parts(store, k[2], (std::ptr::null(), old.1, 4), NO_OPTS),
            INV
        );
        assert_eq!(parts(store, k[2], (old.0, std::ptr::null(), 4), UP), INV);
        assert_eq!(parts(store, k[2], holes, UP), INV);
        assert!(last().contains("a part"), "{}", last());
        assert_eq!(parts(store, k[2], old, &UNKNOWN), INV);
        // No parts: a value of 0 bytes, which the store refuses.
        let none = (std::ptr::null(), std::ptr::null(), 0);
        assert_eq!(
            parts(store, k[2], none, NO_OPTS),
            YUEBING_ERR_INVALID_PARAMS
        );
        assert_eq!(parts(store, k[2], none, UP), YUEBING_ERR_INVALID_PARAMS);
        assert_eq!(parts_async(store, k[2], old, UP, None), Err(INV));
        assert_eq!(
            parts_async(store, k[2], holes, NO_OPTS, Some(on_done)),
            Err(INV)
        );
        assert_eq!(
            parts_async(store, k[2], old, &UNKNOWN, Some(on_done)),
            Err(INV)
        );

        // Refused upserts of an existing key leave its value.
        assert_eq!(parts(store, k[0], holes, UP), INV);
        assert_eq!(parts(store, k[0], none, UP), YUEBING_ERR_INVALID_PARAMS);
        assert_eq!(parts(store, k[0], old, &UNKNOWN), INV);
        assert_eq!(value_of(store, "parts/1").unwrap(), b"newer");
    }
    assert!(!exists(store, "parts/3"), "a refused put stored something");
    drop(keys);
}

#[test]
fn put_from_with_the_upsert_flag_replaces_a_value_from_registered_memory() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let mut mem = Registered::new(store, 128 << 10, 0);
    for (i, b) in mem.bytes.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let (first, second, len) = (mem.addr(0), mem.addr(64 << 10), 64 << 10);
    let key = CString::new("from/1").unwrap();
    let from = |key: *const c_char, addr, len, opts: *const yuebing_options| {
        // SAFETY: the key is NULL or valid; the range is registered, or refused unread; the
        // options are NULL or valid.
        unsafe { yuebing_store_put_from(store, key, addr, len, opts, nul()) }
    };
    assert_eq!(from(key.as_ptr(), first, len, NO_OPTS), 0, "{}", last());
    assert_eq!(from(key.as_ptr(), second, len, NO_OPTS), EXISTS);
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
    assert_eq!(from(key.as_ptr(), second, len, UP), 0, "{}", last());
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[64 << 10..]);

    // The callback form, replacing it back; without the flag; and without a callback.
    let put_async = |addr, opts: *const yuebing_options, cb| {
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        outcome(|ud| unsafe {
            yuebing_store_put_from_async(
                store,
                key.as_ptr(),
                addr,
                len,
                opts,
                cb,
                ud,
                NO_CALL,
                nul(),
            )
        })
        .map(|(code, ())| code)
    };
    assert_eq!(put_async(first, UP, Some(on_done)), Ok(0));
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
    assert_eq!(put_async(second, NO_OPTS, Some(on_done)), Ok(EXISTS));
    assert_eq!(value_of(store, "from/1").unwrap(), mem.bytes[..64 << 10]);
    assert_eq!(put_async(second, UP, None), Err(INV));
    assert_eq!(put_async(second, &UNKNOWN, Some(on_done)), Err(INV));

    // Bad input: a range that wraps, a bad handle, a NULL key, an unknown flag; the value
    // stays.
    assert_eq!(from(key.as_ptr(), u64::MAX - 1, 10, UP), INV);
    assert_eq!(from(std::ptr::null(), second, len, UP), INV);
    assert_eq!(from(key.as_ptr(), second, len, &UNKNOWN), INV);
    // SAFETY: the handle is checked before anything is read.
    let rc = unsafe { yuebing_store_put_from(0, key.as_ptr(), second, len, UP, nul()) };
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
fn batch_puts_with_the_upsert_flag_replace_and_add_with_a_code_per_item() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    put(store, "b/a", b"old a");
    let (_keys, k) = c_keys(&["b/a", "b/c"]);
    let (p, l) = arrays(&[b"new a", b"new c"]);
    let (np, nl) = arrays(&[b"newer a", b"newer c"]);
    let batch = |opts: *const yuebing_options, (p, l, n): Arrays| {
        // SAFETY: every array holds `n` elements, each value its length, or is NULL; the
        // codes have room for 2; the options are NULL or valid.
        codes_of::<2>(|c| unsafe {
            yuebing_store_batch_put(store, k.as_ptr(), p, l, n, opts, c, nul())
        })
    };
    let (old, new) = ((p.as_ptr(), l.as_ptr(), 2), (np.as_ptr(), nl.as_ptr(), 2));
    assert_eq!(
        batch(NO_OPTS, old),
        Ok([EXISTS, 0]),
        "a put keeps the existing value"
    );
    assert_eq!(value_of(store, "b/a").unwrap(), b"old a");
    assert_eq!(batch(UP, new), Ok([0, 0]), "{}", last());
    assert_eq!(value_of(store, "b/a").unwrap(), b"newer a");
    assert_eq!(value_of(store, "b/c").unwrap(), b"newer c");
    // The callback form, with the flag and without it; and bad input (a NULL array, no room
    // for the codes, no callback, an unknown flag).
    let put_async = |(p, l, n): Arrays, opts: *const yuebing_options, cb| {
        let kp = k.as_ptr();
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        each_codes(|ud| unsafe {
            yuebing_store_batch_put_async(store, kp, p, l, n, opts, cb, ud, NO_CALL, nul())
        })
    };
    assert_eq!(put_async(old, UP, Some(on_each)), Ok((0, vec![0, 0])));
    assert_eq!(value_of(store, "b/a").unwrap(), b"new a");
    assert_eq!(
        put_async(new, NO_OPTS, Some(on_each)),
        Ok((0, vec![EXISTS, EXISTS]))
    );
    assert_eq!(value_of(store, "b/a").unwrap(), b"new a");
    assert_eq!(value_of(store, "b/c").unwrap(), b"new c");
    assert_eq!(put_async(new, UP, None), Err(INV));
    assert_eq!(put_async(new, &UNKNOWN, Some(on_each)), Err(INV));
    assert_eq!(batch(UP, (std::ptr::null(), l.as_ptr(), 2)), Err(INV));
    assert_eq!(batch(&UNKNOWN, new), Err(INV));
    // SAFETY: valid arrays of 2; the NULL codes are refused before anything is read.
    let rc = unsafe {
        yuebing_store_batch_put(
            store,
            k.as_ptr(),
            np.as_ptr(),
            nl.as_ptr(),
            2,
            UP,
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
    let ranges = |opts: *const yuebing_options, addrs: [u64; 2]| {
        // SAFETY: the arrays hold 2 elements, the ranges registered (or refused unread); the
        // options are NULL or valid.
        codes_of::<2>(|c| unsafe {
            yuebing_store_batch_put_from(
                store,
                k.as_ptr(),
                addrs.as_ptr(),
                lens.as_ptr(),
                2,
                opts,
                c,
                nul(),
            )
        })
    };
    let addrs = [mem.addr(0), mem.addr(5)];
    assert_eq!(ranges(NO_OPTS, addrs), Ok([EXISTS, 0]));
    assert_eq!(value_of(store, "b/a").unwrap(), b"new a");
    assert_eq!(ranges(UP, addrs), Ok([0, 0]));
    assert_eq!(value_of(store, "b/a").unwrap(), b"fromD");
    assert_eq!(value_of(store, "b/d").unwrap(), b"EF!");
    let wraps = [u64::MAX - 1, mem.addr(0)];
    assert_eq!(ranges(UP, wraps), Err(INV), "a range that wraps");
    assert_eq!(ranges(&UNKNOWN, addrs), Err(INV));
    mem.bytes[..5].copy_from_slice(b"again");
    let (kp, ap, lp) = (k.as_ptr(), addrs.as_ptr(), lens.as_ptr());
    let from_async = |opts: *const yuebing_options, cb| {
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        each_codes(|ud| unsafe {
            yuebing_store_batch_put_from_async(store, kp, ap, lp, 1, opts, cb, ud, NO_CALL, nul())
        })
    };
    assert_eq!(from_async(NO_OPTS, Some(on_each)), Ok((0, vec![EXISTS])));
    assert_eq!(value_of(store, "b/a").unwrap(), b"fromD");
    assert_eq!(from_async(UP, Some(on_each)), Ok((0, vec![0])));
    assert_eq!(value_of(store, "b/a").unwrap(), b"again");
    assert_eq!(from_async(UP, None), Err(INV));
    assert_eq!(value_of(store, "b/a").unwrap(), b"again");
}

/// `yuebing_store_put` and `yuebing_store_upsert`.
type PutFn = unsafe extern "C" fn(
    yuebing_store_t,
    *const c_char,
    *const u8,
    usize,
    *const yuebing_options,
    *mut yuebing_error,
) -> i32;

/// How many replicas `key` has, through `yuebing_store_replicas`.
fn replica_count(store: yuebing_store_t, key: &str) -> usize {
    let key = CString::new(key).unwrap();
    let mut out = yuebing_replicas {
        size: 0,
        lease_ms: 0,
        items: std::ptr::null_mut(),
        len: 0,
    };
    // SAFETY: a valid key and output, freed once.
    unsafe {
        let rc = yuebing_store_replicas(store, key.as_ptr(), NO_OPTS, &mut out, nul());
        assert_eq!(rc, 0, "{}", last());
        let n = out.len;
        yuebing_replicas_free(&mut out);
        n
    }
}

#[test]
fn upsert_is_put_with_the_flag_and_the_flag_keeps_the_replica_settings() {
    let cluster = Cluster::start();
    // A client made in Rust whose puts want 2 replicas by default, handed to C, and a second
    // node for the second replica.
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let cfg = ClientConfig {
        masters: vec![cluster.endpoint.to_str().unwrap().parse().unwrap()],
        store_size: 32 << 20,
        put: PutConfig {
            replica_num: 2,
            ..PutConfig::default()
        },
        ..ClientConfig::default()
    };
    let client = BlockingClient::start(&bridge, cfg).unwrap();
    let store = store_handle(&client).unwrap();
    let _other = cluster.store(new_bridge());
    let key = CString::new("up/1").unwrap();
    let k = key.as_ptr();
    // `yuebing_store_upsert` or `yuebing_store_put` of `v` under the key with `opts`.
    let write = |f: PutFn, v: &[u8], opts: *const yuebing_options| {
        // SAFETY: a valid key and value; the options are NULL or valid.
        unsafe { f(store, k, v.as_ptr(), v.len(), opts, nul()) }
    };
    let (upsert, put_with) = (
        |v: &[u8], opts| write(yuebing_store_upsert, v, opts),
        |v: &[u8], opts| write(yuebing_store_put, v, opts),
    );

    // `upsert` stores a new key and replaces it, with the client's replica count.
    assert_eq!(upsert(b"one", NO_OPTS), 0, "{}", last());
    assert_eq!(value_of(store, "up/1").unwrap(), b"one");
    assert_eq!(replica_count(store, "up/1"), 2);
    assert_eq!(upsert(b"two, longer", NO_OPTS), 0, "{}", last());
    assert_eq!(value_of(store, "up/1").unwrap(), b"two, longer");
    assert_eq!(replica_count(store, "up/1"), 2);
    // Its options' other settings hold, and the bit in them changes nothing.
    let one_replica = yuebing_options {
        timeout_ms: 5_000,
        replica_num: 1,
        flags: 0,
    };
    assert_eq!(upsert(b"three", &one_replica), 0, "{}", last());
    assert_eq!(replica_count(store, "up/1"), 1);
    assert_eq!(upsert(b"four", UP), 0, "{}", last());
    assert_eq!(value_of(store, "up/1").unwrap(), b"four");
    assert_eq!(replica_count(store, "up/1"), 2);

    // `put` without the flag keeps the value; with the flag alone it replaces it, and the
    // client's replica count stays (the flag is no replica setting).
    assert_eq!(put_with(b"five", NO_OPTS), EXISTS);
    assert_eq!(value_of(store, "up/1").unwrap(), b"four");
    assert_eq!(put_with(b"five", UP), 0, "{}", last());
    assert_eq!(value_of(store, "up/1").unwrap(), b"five");
    assert_eq!(replica_count(store, "up/1"), 2);
    let one_upsert = yuebing_options {
        flags: YUEBING_OPT_UPSERT,
        ..one_replica
    };
    assert_eq!(put_with(b"six", &one_upsert), 0, "{}", last());
    assert_eq!(replica_count(store, "up/1"), 1);

    // The callback form.
    let upsert_async = |value: &[u8], cb| {
        // SAFETY: as above; the outcome is awaited while its `user_data` lives.
        outcome(|ud| unsafe {
            yuebing_store_upsert_async(
                store,
                key.as_ptr(),
                value.as_ptr(),
                value.len(),
                NO_OPTS,
                cb,
                ud,
                NO_CALL,
                nul(),
            )
        })
        .map(|(code, ())| code)
    };
    assert_eq!(upsert_async(b"seven", Some(on_done)), Ok(0));
    assert_eq!(value_of(store, "up/1").unwrap(), b"seven");
    assert_eq!(replica_count(store, "up/1"), 2);
    assert_eq!(upsert_async(b"eight", None), Err(INV));

    // Bad input: a code, and the value stays.
    assert_eq!(upsert(b"nine", &UNKNOWN), INV);
    // SAFETY: the handle is checked before anything is read; a NULL key is refused.
    unsafe {
        assert_eq!(
            yuebing_store_upsert(0, key.as_ptr(), b"x".as_ptr(), 1, NO_OPTS, nul()),
            HANDLE
        );
        assert_eq!(
            yuebing_store_upsert(store, std::ptr::null(), b"x".as_ptr(), 1, NO_OPTS, nul()),
            INV
        );
        assert_eq!(
            yuebing_store_upsert(store, key.as_ptr(), std::ptr::null(), 4, NO_OPTS, nul()),
            INV
        );
    }
    assert_eq!(value_of(store, "up/1").unwrap(), b"seven");
    // SAFETY: a handle made above, destroyed once.
    assert_eq!(unsafe { yuebing_store_destroy(store, nul()) }, 0);
}
