//! The C forms of reads located once and moved in ranges (`yuebing_store_batch_locate` and
//! `yuebing_store_batch_read_located`, Mooncake's get sessions), of writes reserved once and
//! moved in ranges (`yuebing_store_batch_reserve`, `_write_reserved`, `_publish`, `_revoke`:
//! its put sessions), of store space mounted at run time and of
//! `yuebing_store_batch_replica_clear`, blocking and in callback form, against a master in
//! this process.

mod common;

use yuebing_bridge::ffi::admin_api::*;
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::store_located::*;
use yuebing_bridge::ffi::store_reserved::*;
use yuebing_bridge::ffi::types::*;

use common::{
    c_keys, copied, exists, last, new_bridge, nul, on_done, on_each, on_number, outcome, put,
    Cluster, Registered, NO_CALL, NO_OPTS,
};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

#[test]
fn located_objects_are_read_in_ranges_through_the_c_abi() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let (a, b) = (pattern(1, 50_000), pattern(2, 4000));
    put(store, "s/a", &a);
    put(store, "s/b", &b);
    let (_keep, keys) = c_keys(&["s/a", "s/none", "s/b"]);
    let mut codes = [9i32; 3];
    let mut found: [yuebing_location_t; 3] = [9; 3];
    // SAFETY: arrays of 3; valid keys.
    let rc = unsafe {
        yuebing_store_batch_locate(
            store,
            keys.as_ptr(),
            3,
            NO_OPTS,
            codes.as_mut_ptr(),
            found.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_eq!(codes, [0, YUEBING_ERR_OBJECT_NOT_FOUND, 0]);
    assert_eq!(found[1], 0, "a failed item has no location");
    let dst = Registered::new(store, 1 << 17, 0);
    let f = |at: usize, offset: u64, len: u64| yuebing_fragment {
        addr: dst.addr(at),
        offset,
        len,
    };
    // a in two halves (one item), b whole, then a range past b's end refusing its item.
    let locations = [found[0], found[2], found[2]];
    let counts = [2usize, 1, 1];
    let fragments = [
        f(0, 0, 25_000),
        f(25_000, 25_000, 25_000),
        f(60_000, 0, 4000),
        f(70_000, 3999, 2),
    ];
    let (mut codes, mut lens) = ([9i32; 3], [9u64; 3]);
    // SAFETY: arrays as long as promised; the memory stays registered through the call.
    let rc = unsafe {
        yuebing_store_batch_read_located(
            store,
            locations.as_ptr(),
            counts.as_ptr(),
            fragments.as_ptr(),
            3,
            NO_OPTS,
            codes.as_mut_ptr(),
            lens.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_eq!(codes, [0, 0, YUEBING_ERR_INVALID_PARAMS]);
    assert_eq!(lens, [50_000, 4000, 0]);
    // SAFETY: the call is over: nothing writes the registered memory now.
    let got = unsafe { copied(dst.addr(0) as *const u8, 1 << 17) };
    assert_eq!(&got[..50_000], &a[..]);
    assert_eq!(&got[60_000..64_000], &b[..]);
    assert_eq!(
        &got[70_000..70_002],
        &[0, 0],
        "a refused item reads nothing"
    );

    // The callback forms: locations made for the callback, and ranges read.
    // SAFETY: valid keys; the outcome is awaited while its `user_data` lives.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_locate_async(
            store,
            keys.as_ptr(),
            3,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    let (code, (codes, again)): (i32, (Vec<i32>, Vec<u64>)) = done.unwrap();
    assert_eq!(
        (code, codes[1], again[1]),
        (0, YUEBING_ERR_OBJECT_NOT_FOUND, 0)
    );
    let one = [f(100_000, 10, 20)];
    // SAFETY: as above.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_read_located_async(
            store,
            &again[0],
            &1,
            one.as_ptr(),
            1,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![0], vec![20]))));
    // SAFETY: as above.
    assert_eq!(
        unsafe { copied(dst.addr(100_000) as *const u8, 20) },
        &a[10..30]
    );

    // A freed location, or one of another kind, refuses the whole call.
    for h in [found[0], found[2], again[0], again[2]] {
        // SAFETY: handles of this library.
        assert_eq!(unsafe { yuebing_location_free(h, nul()) }, 0);
    }
    // SAFETY: as above; the library checks the handles before anything is read.
    let rc = unsafe {
        yuebing_store_batch_read_located(
            store,
            &found[0],
            &1,
            one.as_ptr(),
            1,
            NO_OPTS,
            codes_buf().as_mut_ptr(),
            std::ptr::null_mut(),
            nul(),
        )
    };
    assert_eq!(rc, YUEBING_ERR_INVALID_HANDLE);
}

fn codes_buf() -> [i32; 1] {
    [9]
}

#[test]
fn idle_objects_are_cleared_through_the_c_abi() {
    // A short lease: an object is idle a lease TTL after its put.
    let cluster = Cluster::start_with_lease_ms(200);
    let store = cluster.store(new_bridge());
    put(store, "c/a", b"one");
    put(store, "c/b", b"two");
    let (_keep, keys) = c_keys(&["c/a", "c/none"]);
    let (mut codes, mut cleared) = ([9i32; 2], [9u64; 2]);
    let clear = |codes: &mut [i32; 2], cleared: &mut [u64; 2]| {
        // SAFETY: arrays of 2; valid keys; a NULL node is every node.
        unsafe {
            yuebing_store_batch_replica_clear(
                store,
                keys.as_ptr(),
                2,
                std::ptr::null(),
                NO_OPTS,
                codes.as_mut_ptr(),
                cleared.as_mut_ptr(),
                nul(),
            )
        }
    };
    assert_eq!(clear(&mut codes, &mut cleared), 0, "{}", last());
    assert_eq!((codes, cleared), ([0, 0], [0, 0]), "just put: in use");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(clear(&mut codes, &mut cleared), 0, "{}", last());
    assert_eq!((codes, cleared), ([0, 0], [1, 0]));
    assert!(!exists(store, "c/a"));
    // The callback form, on a node that holds nothing of it: skipped.
    let (_keep_b, b) = c_keys(&["c/b"]);
    let node = std::ffi::CString::new("127.0.0.1:1").unwrap();
    // SAFETY: valid key and node; the outcome is awaited while its `user_data` lives.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_replica_clear_async(
            store,
            b.as_ptr(),
            1,
            node.as_ptr(),
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![0], vec![0]))));
    assert!(exists(store, "c/b"));
}

#[test]
fn reserved_objects_are_written_in_ranges_and_published_through_the_c_abi() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let value = pattern(5, 30_000);
    let mut src = Registered::new(store, 30_000, 0);
    // Filled before any transfer reads it.
    src.bytes.copy_from_slice(&value);
    let (_keep, keys) = c_keys(&["r/a", "r/b", ""]);
    let sizes = [30_000u64, 10, 5];
    let (mut codes, mut reserved) = ([9i32; 3], [9u64; 3]);
    // SAFETY: arrays of 3; valid keys.
    let rc = unsafe {
        yuebing_store_batch_reserve(
            store,
            keys.as_ptr(),
            sizes.as_ptr(),
            3,
            NO_OPTS,
            codes.as_mut_ptr(),
            reserved.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_eq!(codes, [0, 0, YUEBING_ERR_INVALID_PARAMS]);
    assert_eq!(reserved[2], 0);
    assert!(!exists(store, "r/a"), "not readable before its publication");
    // Two halves of a, in reverse; b from the start of the same memory; then a range past a.
    let f = |at: usize, offset: u64, len: u64| yuebing_fragment {
        addr: src.addr(at),
        offset,
        len,
    };
    let items = [reserved[0], reserved[1], reserved[0]];
    let counts = [2usize, 1, 1];
    let fragments = [
        f(15_000, 15_000, 15_000),
        f(0, 0, 15_000),
        f(0, 0, 10),
        f(0, 29_999, 2),
    ];
    let (mut codes, mut lens) = ([9i32; 3], [9u64; 3]);
    // SAFETY: arrays as long as promised; `src` stays registered through the call.
    let rc = unsafe {
        yuebing_store_batch_write_reserved(
            store,
            items.as_ptr(),
            counts.as_ptr(),
            fragments.as_ptr(),
            3,
            NO_OPTS,
            codes.as_mut_ptr(),
            lens.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_eq!(codes, [0, 0, YUEBING_ERR_INVALID_PARAMS]);
    assert_eq!(lens, [30_000, 10, 0]);
    let mut codes = [9i32; 1];
    // SAFETY: arrays of 1.
    let rc = unsafe {
        yuebing_store_batch_publish(store, &reserved[0], 1, NO_OPTS, codes.as_mut_ptr(), nul())
    };
    assert_eq!((rc, codes), (0, [0]), "{}", last());
    assert_eq!(common::value_of(store, "r/a"), Ok(value.clone()));
    // Published: sealed, a later write is refused (callback form).
    let one = [f(0, 0, 10)];
    // SAFETY: as above; the outcome is awaited while its `user_data` lives.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_write_reserved_async(
            store,
            &reserved[0],
            &1,
            one.as_ptr(),
            1,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![YUEBING_ERR_INVALID_PARAMS], vec![0]))));
    // b revoked (callback form): not stored.
    // SAFETY: as above.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_revoke_async(
            store,
            &reserved[1],
            1,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![0], vec![0]))));
    assert!(!exists(store, "r/b"));
    for h in &reserved[..2] {
        // SAFETY: handles of this library.
        assert_eq!(unsafe { yuebing_reservation_free(*h, nul()) }, 0);
        // SAFETY: as above.
        assert_eq!(
            unsafe { yuebing_reservation_free(*h, nul()) },
            YUEBING_ERR_INVALID_HANDLE
        );
    }
    // A freed reservation, or a location handle, refuses the call.
    let mut codes = [9i32; 1];
    // SAFETY: arrays of 1.
    let rc = unsafe {
        yuebing_store_batch_publish(store, &reserved[0], 1, NO_OPTS, codes.as_mut_ptr(), nul())
    };
    assert_eq!(rc, YUEBING_ERR_INVALID_HANDLE);
}

#[test]
fn store_space_is_mounted_and_unmounted_through_the_c_abi() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let mut id = 0u64;
    // SAFETY: a valid output.
    let rc = unsafe { yuebing_store_mount_space(store, 4 << 20, NO_OPTS, &mut id, nul()) };
    assert_eq!(rc, 0, "{}", last());
    assert_ne!(id, 0, "the configuration's own space is 0");
    // SAFETY: the outcome is awaited while its `user_data` lives.
    let second = outcome(|ud| unsafe {
        yuebing_store_mount_space_async(
            store,
            1 << 20,
            NO_OPTS,
            Some(on_number),
            ud,
            NO_CALL,
            nul(),
        )
    });
    let (code, other) = second.unwrap();
    assert_eq!(code, 0);
    assert_ne!(other, id);
    // SAFETY: no pointer arguments but the error.
    unsafe {
        assert_eq!(yuebing_store_unmount_space(store, id, 0, NO_OPTS, nul()), 0);
        assert_eq!(
            yuebing_store_unmount_space(store, id, 0, NO_OPTS, nul()),
            YUEBING_ERR_INVALID_PARAMS,
            "not mounted any more"
        );
        assert_eq!(
            yuebing_store_mount_space(store, 0, NO_OPTS, &mut id, nul()),
            YUEBING_ERR_INVALID_PARAMS
        );
    }
    // SAFETY: as above.
    let done = outcome(|ud| unsafe {
        yuebing_store_unmount_space_async(
            store,
            other,
            0,
            NO_OPTS,
            Some(on_done),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, ())));
}

#[test]
fn a_file_is_mounted_as_store_space_through_the_c_abi() {
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let path = format!("/dev/shm/yuebing-ffi-mount-{}", std::process::id());
    std::fs::File::create(&path)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let c_path = std::ffi::CString::new(path.clone()).unwrap();
    let mut id = 0u64;
    // SAFETY: a NUL-terminated path and a valid output.
    let rc = unsafe {
        yuebing_store_mount_file(
            store,
            c_path.as_ptr(),
            4 << 20,
            4 << 20,
            NO_OPTS,
            &mut id,
            nul(),
        )
    };
    assert_eq!(rc, 0, "{}", last());
    assert_ne!(id, 0);
    // SAFETY: as above; the outcome is awaited while its `user_data` lives.
    let second = outcome(|ud| unsafe {
        yuebing_store_mount_file_async(
            store,
            c_path.as_ptr(),
            0,
            4 << 20,
            NO_OPTS,
            Some(on_number),
            ud,
            NO_CALL,
            nul(),
        )
    });
    let (code, other) = second.unwrap();
    assert_eq!(code, 0);
    // SAFETY: NULL and NUL-terminated paths, valid outputs.
    unsafe {
        let null = std::ptr::null();
        for (at, len) in [(100, 4096), (4 << 20, 8 << 20), (0, 0)] {
            let rc =
                yuebing_store_mount_file(store, c_path.as_ptr(), at, len, NO_OPTS, &mut id, nul());
            assert_eq!(rc, YUEBING_ERR_INVALID_PARAMS, "{at}+{len}");
        }
        let rc = yuebing_store_mount_file(store, null, 0, 4096, NO_OPTS, &mut id, nul());
        assert_eq!(rc, YUEBING_ERR_INVALID_ARGUMENT, "a NULL path");
        assert_eq!(
            yuebing_store_unmount_space(store, other, 0, NO_OPTS, nul()),
            0
        );
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_stores_admin_server_is_started_read_and_stopped_through_the_c_abi() {
    use std::io::{Read, Write};
    let cluster = Cluster::start();
    let store = cluster.store(new_bridge());
    let bind = std::ffi::CString::new("127.0.0.1:0").unwrap();
    let mut admin: yuebing_admin_t = 0;
    // SAFETY: a NUL-terminated address and a valid output.
    let rc = unsafe { yuebing_store_serve_admin(store, bind.as_ptr(), NO_OPTS, &mut admin, nul()) };
    assert_eq!(rc, 0, "{}", last());
    let mut buf = [0 as std::ffi::c_char; 64];
    let mut len = 0usize;
    // SAFETY: a buffer of 64 bytes and a valid length output.
    let rc = unsafe { yuebing_admin_address(admin, buf.as_mut_ptr(), 64, &mut len, nul()) };
    assert_eq!(rc, 0, "{}", last());
    // SAFETY: NUL-terminated by the call.
    let addr = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(addr.len(), len);
    let get = |path: &str| -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(&addr)?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    };
    let ready = get("/ready").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    // SAFETY: a buffer too small: refused, the length still told.
    let rc = unsafe { yuebing_admin_address(admin, buf.as_mut_ptr(), 4, &mut len, nul()) };
    assert_eq!((rc, len), (YUEBING_ERR_INVALID_ARGUMENT, addr.len()));
    // SAFETY: no pointer arguments but the error.
    unsafe {
        assert_eq!(yuebing_admin_free(admin, nul()), 0);
        assert_eq!(yuebing_admin_free(admin, nul()), YUEBING_ERR_INVALID_HANDLE);
    }
    assert!(get("/ready").is_err(), "stopped");
    let bad = std::ffi::CString::new("not an address").unwrap();
    // SAFETY: NULL and NUL-terminated addresses, a valid output.
    unsafe {
        let rc = yuebing_store_serve_admin(store, bad.as_ptr(), NO_OPTS, &mut admin, nul());
        assert_eq!(rc, YUEBING_ERR_INVALID_PARAMS);
        let rc = yuebing_store_serve_admin(store, std::ptr::null(), NO_OPTS, &mut admin, nul());
        assert_eq!(rc, YUEBING_ERR_INVALID_ARGUMENT);
        let rc = yuebing_store_serve_admin(0, bind.as_ptr(), NO_OPTS, &mut admin, nul());
        assert_eq!(rc, YUEBING_ERR_INVALID_HANDLE);
    }
}
