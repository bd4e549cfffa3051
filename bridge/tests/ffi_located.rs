//! The C forms of the calls that say where objects are: `locate`, `get_or_locate` and
//! `read_located` with their location handle (checked like every handle: a freed, NULL or
//! wrong-kind one is an error code), and `replicas` and `batch_replicas` with their structs,
//! each blocking and in callback form, against a master in this process.

mod common;

use std::ffi::{c_char, c_void, CStr, CString};

use yuebing_bridge::ffi::engine_api::yuebing_engine_name;
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::store_located::*;
use yuebing_bridge::ffi::store_ops::yuebing_store_remove;
use yuebing_bridge::ffi::types::*;

use common::{
    c_keys, copied, last, new_bridge, nul, on_number, outcome, put, send, Cluster, Registered,
    NO_CALL, NO_OPTS,
};

const INV: i32 = YUEBING_ERR_INVALID_ARGUMENT;
const HANDLE: i32 = YUEBING_ERR_INVALID_HANDLE;
const MISSING: i32 = YUEBING_ERR_OBJECT_NOT_FOUND;

/// A value of `n` bytes that differs from its neighbours'.
fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// The size of a location, or the call's code.
fn size_of(location: yuebing_location_t) -> Result<u64, i32> {
    let mut size = 0u64;
    // SAFETY: valid output.
    match unsafe { yuebing_location_size(location, &mut size, nul()) } {
        0 => Ok(size),
        code => Err(code),
    }
}

/// Releases a location: the call's code.
fn free(location: yuebing_location_t) -> i32 {
    // SAFETY: a checked handle.
    unsafe { yuebing_location_free(location, nul()) }
}

/// `yuebing_store_locate` of `key`: the location, or the code (the output left alone).
///
/// # Safety
/// `key` is NULL or NUL-terminated.
unsafe fn locate(store: yuebing_store_t, key: *const c_char) -> Result<yuebing_location_t, i32> {
    let mut out: yuebing_location_t = 77;
    // SAFETY: forwarded; a valid output.
    match unsafe { yuebing_store_locate(store, key, std::ptr::null(), &mut out, nul()) } {
        0 => Ok(out),
        code => {
            assert_eq!(out, 77, "a failure wrote its output");
            Err(code)
        }
    }
}

unsafe extern "C" fn on_location(ud: *mut c_void, code: i32, _: *const c_char, location: u64) {
    // SAFETY: `ud` is the `user_data` of an `outcome` of a `u64`.
    unsafe { send(ud, code, location) }
}

/// The callback form of [`locate`] with `cb`: the outcome, or the code it returned.
///
/// # Safety
/// As [`locate`].
unsafe fn locate_async(
    store: yuebing_store_t,
    key: *const c_char,
    cb: yuebing_location_cb,
) -> Result<(i32, u64), i32> {
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    outcome(|ud| unsafe {
        yuebing_store_locate_async(store, key, std::ptr::null(), cb, ud, NO_CALL, nul())
    })
}

/// `yuebing_store_read_located` into `(addr, len)`: the size read, or the code.
fn read(
    store: yuebing_store_t,
    location: yuebing_location_t,
    (addr, len): (u64, u64),
) -> Result<u64, i32> {
    let mut size = 0u64;
    // SAFETY: the library reads nothing through `addr`; the engine writes it only where it
    // is registered (else the call fails).
    match unsafe {
        yuebing_store_read_located(
            store,
            location,
            addr,
            len,
            std::ptr::null(),
            &mut size,
            nul(),
        )
    } {
        0 => Ok(size),
        code => Err(code),
    }
}

/// The callback form of [`read`] with `cb`: the outcome, or the code it returned.
fn read_async(
    store: yuebing_store_t,
    location: yuebing_location_t,
    (addr, len): (u64, u64),
    cb: yuebing_u64_cb,
) -> Result<(i32, u64), i32> {
    let none = std::ptr::null();
    // SAFETY: as in `read`; the outcome is awaited while its `user_data` lives.
    outcome(|ud| unsafe {
        yuebing_store_read_located_async(store, location, addr, len, none, cb, ud, NO_CALL, nul())
    })
}

/// The whole of `mem`, as a read's destination.
fn all(mem: &Registered) -> (u64, u64) {
    (mem.addr(0), mem.bytes.len() as u64)
}

#[test]
fn a_located_object_is_read_into_registered_memory_and_its_location_freed_once() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let value = payload(1 << 20, 1);
    put(store, "loc/big", &value);
    let (key, missing) = (
        CString::new("loc/big").unwrap(),
        CString::new("loc/missing").unwrap(),
    );
    // SAFETY: valid keys.
    let location = unsafe { locate(store, key.as_ptr()) }.unwrap();
    assert_ne!(location, 0);
    assert_eq!(size_of(location), Ok(1 << 20));
    // Locating took a read lease, as a get does.
    // SAFETY: valid key.
    let rc = unsafe { yuebing_store_remove(store, key.as_ptr(), 0, std::ptr::null(), nul()) };
    assert_eq!(rc, YUEBING_ERR_OBJECT_HAS_LEASE);

    // Read into registered memory with room to spare, then again: the location stays usable.
    let roomy = Registered::new(store, 2 << 20, 0);
    assert_eq!(
        read(store, location, all(&roomy)),
        Ok(1 << 20),
        "{}",
        last()
    );
    assert_eq!(roomy.bytes[..1 << 20], value[..]);
    assert!(
        roomy.bytes[1 << 20..].iter().all(|&b| b == 0),
        "written past the object"
    );
    let exact = Registered::new(store, 1 << 20, 0);
    assert_eq!(read(store, location, all(&exact)), Ok(1 << 20));
    assert_eq!(exact.bytes, value);
    // Too little room: InvalidParams, and nothing written.
    let small = Registered::new(store, 512 << 10, 0xaa);
    assert_eq!(
        read(store, location, all(&small)),
        Err(YUEBING_ERR_INVALID_PARAMS)
    );
    assert!(
        small.bytes.iter().all(|&b| b == 0xaa),
        "a refused read wrote"
    );
    // The callback form.
    let third = Registered::new(store, 1 << 20, 0);
    assert_eq!(
        read_async(store, location, all(&third), Some(on_number)),
        Ok((0, 1 << 20))
    );
    assert_eq!(third.bytes, value);

    // Bad input: a range that wraps, no callback, no output for the size (a NULL one for the
    // read is allowed: the size is not wanted).
    assert_eq!(read(store, location, (u64::MAX - 1, 10)), Err(INV));
    assert_eq!(read_async(store, location, all(&third), None), Err(INV));
    // SAFETY: a NULL output is checked (location_size) or allowed (read_located).
    unsafe {
        assert_eq!(
            yuebing_location_size(location, std::ptr::null_mut(), nul()),
            INV
        );
        let (addr, len) = all(&third);
        let rc = yuebing_store_read_located(
            store,
            location,
            addr,
            len,
            std::ptr::null(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, 0);
    }

    // Handles: 0, a store handle as a location, a location as a store handle, a freed one.
    assert_eq!(size_of(0), Err(HANDLE));
    assert_eq!(size_of(store), Err(HANDLE));
    assert_eq!(read(store, store, all(&roomy)), Err(HANDLE));
    assert_eq!(read(location, location, all(&roomy)), Err(HANDLE));
    assert_eq!(free(store), HANDLE);
    assert_eq!(free(location), 0);
    assert_eq!(free(location), HANDLE, "freed twice");
    assert_eq!(free(0), HANDLE);
    assert_eq!(size_of(location), Err(HANDLE));
    assert_eq!(read(store, location, all(&roomy)), Err(HANDLE));
    let started = read_async(store, location, all(&roomy), Some(on_number));
    assert_eq!(started, Err(HANDLE), "a freed location starts nothing");

    // SAFETY: valid keys, or NULL where the library must check it.
    unsafe {
        // A miss, no key, a bad handle: the code, and the output left alone.
        assert_eq!(locate(store, missing.as_ptr()), Err(MISSING));
        assert_eq!(locate(store, std::ptr::null()), Err(INV));
        assert_eq!(locate(0, key.as_ptr()), Err(HANDLE));
        let rc = yuebing_store_locate(
            store,
            key.as_ptr(),
            std::ptr::null(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, INV);
        // The callback form: the location is the callback's; a miss gives 0.
        let (code, location) = locate_async(store, key.as_ptr(), Some(on_location)).unwrap();
        assert_eq!((code, size_of(location)), (0, Ok(1 << 20)));
        assert_eq!(free(location), 0);
        assert_eq!(
            locate_async(store, missing.as_ptr(), Some(on_location)),
            Ok((MISSING, 0))
        );
        assert_eq!(locate_async(store, key.as_ptr(), None), Err(INV));
    }
}

/// What a `yuebing_fetched_cb` was handed: the value's bytes and the location.
unsafe extern "C" fn on_fetched(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    data: *const u8,
    len: usize,
    location: yuebing_location_t,
) {
    // SAFETY: `data` holds `len` bytes or is NULL; `ud` is the `user_data` of an `outcome` of
    // `(Vec<u8>, u64)`.
    unsafe { send(ud, code, (copied(data, len), location)) }
}

/// `yuebing_store_get_or_locate` of `key`: the value and the location, or the code (the
/// outputs left alone).
///
/// # Safety
/// `key` is NULL or NUL-terminated.
unsafe fn get_or_locate(
    store: yuebing_store_t,
    key: *const c_char,
    inline_max: u64,
) -> Result<(Vec<u8>, u64), i32> {
    let mut value = yuebing_buf {
        data: 7 as *mut u8,
        len: 7,
    };
    let mut location: yuebing_location_t = 77;
    let none = std::ptr::null();
    // SAFETY: forwarded; valid outputs; the buffer is freed once, after its bytes were copied.
    unsafe {
        match yuebing_store_get_or_locate(
            store,
            key,
            inline_max,
            none,
            &mut value,
            &mut location,
            nul(),
        ) {
            0 => {
                let bytes = copied(value.data, value.len);
                yuebing_buf_free(&mut value);
                Ok((bytes, location))
            }
            code => {
                assert_eq!(
                    (value.data as usize, value.len, location),
                    (7, 7, 77),
                    "a failure wrote"
                );
                Err(code)
            }
        }
    }
}

/// The callback form of [`get_or_locate`] with `cb`: the outcome, or the code it returned.
///
/// # Safety
/// As [`get_or_locate`].
unsafe fn get_or_locate_async(
    store: yuebing_store_t,
    key: *const c_char,
    inline_max: u64,
    cb: yuebing_fetched_cb,
) -> Result<(i32, (Vec<u8>, u64)), i32> {
    let none = std::ptr::null();
    // SAFETY: forwarded; the outcome is awaited while its `user_data` lives.
    outcome(|ud| unsafe {
        yuebing_store_get_or_locate_async(store, key, inline_max, none, cb, ud, NO_CALL, nul())
    })
}

#[test]
fn get_or_locate_gives_small_values_inline_and_locates_large_ones() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let large = payload(256 << 10, 2);
    put(store, "gol/small", b"abc");
    put(store, "gol/large", &large);
    let (_keys, k) = c_keys(&["gol/small", "gol/large", "gol/missing"]);
    let (small_key, large_key, missing) = (k[0], k[1], k[2]);
    let mem = Registered::new(store, 256 << 10, 0);
    // SAFETY: valid keys, or NULL where the library must check it.
    unsafe {
        assert_eq!(
            get_or_locate(store, small_key, 1024),
            Ok((b"abc".to_vec(), 0))
        );
        assert_eq!(
            get_or_locate(store, small_key, 3),
            Ok((b"abc".to_vec(), 0)),
            "at most inline_max"
        );
        let (value, location) = get_or_locate(store, large_key, 1024).unwrap();
        assert!(value.is_empty());
        assert_eq!(size_of(location), Ok(256 << 10));
        assert_eq!(
            read(store, location, all(&mem)),
            Ok(256 << 10),
            "{}",
            last()
        );
        assert_eq!(mem.bytes, large);
        assert_eq!(free(location), 0);
        assert_eq!(
            get_or_locate(store, large_key, 256 << 10),
            Ok((large.clone(), 0))
        );
        assert_eq!(get_or_locate(store, missing, 1024), Err(MISSING));
        assert_eq!(get_or_locate(0, small_key, 1024), Err(HANDLE));
        assert_eq!(get_or_locate(store, std::ptr::null(), 1024), Err(INV));

        // The callback form: a small value lent, a large one located.
        let fetched = |key| get_or_locate_async(store, key, 1024, Some(on_fetched));
        assert_eq!(fetched(small_key), Ok((0, (b"abc".to_vec(), 0))));
        let (code, (data, location)) = fetched(large_key).unwrap();
        assert_eq!((code, data.len(), size_of(location)), (0, 0, Ok(256 << 10)));
        assert_eq!(free(location), 0);
        assert_eq!(fetched(missing), Ok((MISSING, (Vec::new(), 0))));
        assert_eq!(get_or_locate_async(store, small_key, 1024, None), Err(INV));

        // No output for the value or for the location.
        let mut value = yuebing_buf {
            data: std::ptr::null_mut(),
            len: 0,
        };
        let mut location = 0;
        let none = std::ptr::null();
        let rc = yuebing_store_get_or_locate(
            store,
            small_key,
            1024,
            none,
            std::ptr::null_mut(),
            &mut location,
            nul(),
        );
        assert_eq!(rc, INV);
        let rc = yuebing_store_get_or_locate(
            store,
            small_key,
            1024,
            none,
            &mut value,
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!(rc, INV);
        assert!(value.data.is_null() && location == 0);
    }
}

/// Where an object's replicas are, copied out of the C struct: size, lease, and each
/// replica's node, address and length.
type Where = (u64, u64, Vec<(String, u64, u64)>);

/// # Safety
/// `r` is a `yuebing_replicas` the library filled, not freed.
unsafe fn where_of(r: &yuebing_replicas) -> Where {
    // SAFETY: `items` holds `len` replicas, each node NUL-terminated (the caller's promise).
    let replicas = (0..r.len)
        .map(|i| unsafe {
            let item = &*r.items.add(i);
            let node = CStr::from_ptr(item.node).to_str().unwrap().to_string();
            (node, item.addr, item.len)
        })
        .collect();
    (r.size, r.lease_ms, replicas)
}

unsafe extern "C" fn on_replicas(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    r: *const yuebing_replicas,
) {
    // SAFETY: `r` is NULL or valid until this returns; `ud` is the `user_data` of an
    // `outcome` of `Option<Where>`.
    unsafe { send(ud, code, r.as_ref().map(|r| where_of(r))) }
}

unsafe extern "C" fn on_each_replicas(
    ud: *mut c_void,
    code: i32,
    _: *const c_char,
    n: usize,
    codes: *const i32,
    values: *const yuebing_replicas,
) {
    // SAFETY: both arrays hold `n` elements or are NULL, valid until this returns; `ud` is
    // the `user_data` of an `outcome` of `(Vec<i32>, Vec<Where>)`.
    unsafe {
        let wheres: Vec<Where> = (0..n).map(|i| where_of(&*values.add(i))).collect();
        send(ud, code, (copied(codes, n), wheres))
    }
}

/// A `yuebing_replicas` for an output, with marks a write would change.
fn unwritten() -> yuebing_replicas {
    yuebing_replicas {
        size: 9,
        lease_ms: 9,
        items: std::ptr::null_mut(),
        len: 0,
    }
}

/// `yuebing_store_replicas` of `key`: where it is (the struct freed), or the code (the output
/// left alone).
///
/// # Safety
/// `key` is NULL or NUL-terminated.
unsafe fn replicas(store: yuebing_store_t, key: *const c_char) -> Result<Where, i32> {
    let mut out = unwritten();
    // SAFETY: forwarded; a valid output, freed once (a second free is a no-op).
    unsafe {
        match yuebing_store_replicas(store, key, std::ptr::null(), &mut out, nul()) {
            0 => {
                let w = where_of(&out);
                yuebing_replicas_free(&mut out);
                assert!(out.items.is_null() && out.len == 0, "freed and emptied");
                yuebing_replicas_free(&mut out);
                Ok(w)
            }
            code => {
                assert_eq!((out.size, out.len), (9, 0), "a failure wrote its output");
                Err(code)
            }
        }
    }
}

/// `yuebing_store_batch_replicas` of `n` keys: each key's code and where it is (the structs
/// freed), or the code.
///
/// # Safety
/// `keys` is NULL or valid for `n` NUL-terminated keys.
unsafe fn batch_replicas(
    store: yuebing_store_t,
    (keys, n): (*const *const c_char, usize),
) -> Result<Vec<(i32, Where)>, i32> {
    let mut codes = vec![9i32; n];
    let mut each: Vec<yuebing_replicas> = (0..n).map(|_| unwritten()).collect();
    let (c, e) = (codes.as_mut_ptr(), each.as_mut_ptr());
    // SAFETY: forwarded; both outputs have room for `n`; each struct is freed once.
    unsafe {
        match yuebing_store_batch_replicas(store, keys, n, std::ptr::null(), c, e, nul()) {
            0 => Ok(codes
                .into_iter()
                .zip(&mut each)
                .map(|(code, r)| {
                    let w = where_of(r);
                    yuebing_replicas_free(r);
                    (code, w)
                })
                .collect()),
            code => Err(code),
        }
    }
}

#[test]
fn replicas_and_batch_replicas_say_where_objects_are() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    put(store, "rep/k", b"ten bytes!");
    let (_keys, k) = c_keys(&["rep/k", "rep/missing"]);
    // The only node is the client itself: its engine's name.
    let mut engine = 0;
    let mut name = [0 as c_char; 256];
    let mut name_len = 0usize;
    // SAFETY: valid outputs.
    let node = unsafe {
        assert_eq!(yuebing_store_engine(store, &mut engine, nul()), 0);
        assert_eq!(
            yuebing_engine_name(engine, name.as_mut_ptr(), 256, &mut name_len, nul()),
            0
        );
        CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_string()
    };
    // SAFETY: valid keys, or NULL where the library must check it; the outcomes are awaited
    // while their `user_data` live.
    unsafe {
        let (size, lease_ms, where_) = replicas(store, k[0]).unwrap();
        assert_eq!((size, lease_ms > 0, where_.len()), (10, true, 1));
        assert_eq!((&where_[0].0, where_[0].2), (&node, 10));
        assert_eq!(replicas(store, k[1]), Err(MISSING));
        assert_eq!(replicas(store, std::ptr::null()), Err(INV));
        assert_eq!(replicas(0, k[0]), Err(HANDLE));
        assert_eq!(
            yuebing_store_replicas(store, k[0], std::ptr::null(), std::ptr::null_mut(), nul()),
            INV
        );
        let mut zeroed = unwritten();
        yuebing_replicas_free(&mut zeroed);
        yuebing_replicas_free(std::ptr::null_mut());

        // The callback form lends the same answer.
        let lent = |key, cb| {
            outcome(|ud| {
                yuebing_store_replicas_async(store, key, std::ptr::null(), cb, ud, NO_CALL, nul())
            })
        };
        let (code, answer): (i32, Option<Where>) = lent(k[0], Some(on_replicas)).unwrap();
        let (lent_size, _, lent_where) = answer.unwrap();
        assert_eq!((code, lent_size, &lent_where), (0, 10, &where_));
        assert_eq!(lent(k[1], Some(on_replicas)), Ok((MISSING, None)));
        assert_eq!(lent(k[0], None), Err(INV));

        // A batch: a code and replicas per key, a missing key's empty.
        let each = batch_replicas(store, (k.as_ptr(), 2)).unwrap();
        assert_eq!((each[0].0, &each[0].1 .2), (0, &where_));
        assert_eq!(each[1], (MISSING, (0, 0, Vec::new())));
        assert_eq!(batch_replicas(store, (std::ptr::null(), 2)), Err(INV));
        assert_eq!(batch_replicas(0, (k.as_ptr(), 2)), Err(HANDLE));
        let mut codes = [9i32; 2];
        let rc = yuebing_store_batch_replicas(
            store,
            k.as_ptr(),
            2,
            std::ptr::null(),
            codes.as_mut_ptr(),
            std::ptr::null_mut(),
            nul(),
        );
        assert_eq!((rc, codes), (INV, [9, 9]));
        let kp = k.as_ptr();
        let batch_lent = |cb| {
            outcome(|ud| {
                yuebing_store_batch_replicas_async(store, kp, 2, NO_OPTS, cb, ud, NO_CALL, nul())
            })
        };
        let (code, (codes, wheres)): (i32, (Vec<i32>, Vec<Where>)) =
            batch_lent(Some(on_each_replicas)).unwrap();
        assert_eq!((code, codes), (0, vec![0, MISSING]));
        assert_eq!((wheres[0].0, &wheres[0].2), (10, &where_));
        assert_eq!(wheres[1], (0, 0, Vec::new()));
        assert_eq!(
            batch_lent(None).map(|_: (i32, (Vec<i32>, Vec<Where>))| ()),
            Err(INV)
        );
    }
}
