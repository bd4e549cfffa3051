//! The C forms of moving objects in parts: ranged reads, `yuebing_store_batch_get_ranges`
//! (fragments of several objects into registered memory, one code and length per fragment, a
//! bad fragment refused in its place), and the multi-buffer batches
//! `yuebing_store_batch_put_from_buffers` / `yuebing_store_batch_get_into_buffers`, blocking
//! and in callback form.

mod common;

use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::store_batch::*;
use yuebing_bridge::ffi::types::*;

use common::{
    c_keys, copied, last, new_bridge, nul, on_each, outcome, put, Cluster, Registered, NO_CALL,
    NO_OPTS,
};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

#[test]
fn ranged_reads_through_the_c_abi() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let (a, b) = (pattern(1, 70_000), pattern(2, 300));
    put(store, "a", &a);
    put(store, "b", &b);
    let dst = Registered::new(store, 1 << 17, 0);
    let f = |at: usize, offset: u64, len: u64| yuebing_fragment {
        addr: dst.addr(at),
        offset,
        len,
    };
    let (_keep, keys) = c_keys(&["a", "b", "nope"]);
    let counts = [3usize, 1, 1];
    let fragments = [
        f(0, 5, 100),
        f(1000, 60_000, 10_000),
        f(20_000, 69_999, 2),
        f(30_000, 0, 300),
        f(40_000, 0, 8),
    ];
    let mut codes = [9i32; 5];
    let mut lens = [9u64; 5];
    // SAFETY: arrays as long as promised; the memory stays registered through the call.
    let rc = unsafe {
        yuebing_store_batch_get_ranges(
            store,
            keys.as_ptr(),
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
    let params = YUEBING_ERR_INVALID_PARAMS;
    assert_eq!(codes, [0, 0, params, 0, YUEBING_ERR_OBJECT_NOT_FOUND]);
    assert_eq!(lens, [100, 10_000, 0, 300, 0]);
    // SAFETY: the call is over: nothing writes the registered memory now.
    let got = unsafe { copied(dst.addr(0) as *const u8, 1 << 17) };
    assert_eq!(&got[..100], &a[5..105]);
    assert_eq!(&got[1000..11_000], &a[60_000..]);
    assert_eq!(&got[20_000..20_002], &[0, 0]);
    assert_eq!(&got[30_000..30_300], &b[..]);
    assert_eq!(&got[40_000..40_008], &[0; 8]);

    // The callback form: one code and length per fragment.
    let counts = [1usize, 0];
    let one = [f(50_000, 10, 20)];
    // SAFETY: as above; the outcome is awaited while its `user_data` lives.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_get_ranges_async(
            store,
            keys.as_ptr(),
            counts.as_ptr(),
            one.as_ptr(),
            2,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![0], vec![20]))));
    // SAFETY: as above.
    let got = unsafe { copied(dst.addr(50_000) as *const u8, 20) };
    assert_eq!(got, &a[10..30]);

    // Counts whose sum overflows are refused before anything is read.
    let huge = [usize::MAX, 1];
    // SAFETY: the function refuses the counts before it reads `fragments`.
    let rc = unsafe {
        yuebing_store_batch_get_ranges(
            store,
            keys.as_ptr(),
            huge.as_ptr(),
            one.as_ptr(),
            2,
            NO_OPTS,
            codes.as_mut_ptr(),
            std::ptr::null_mut(),
            nul(),
        )
    };
    assert_eq!(rc, YUEBING_ERR_INVALID_ARGUMENT);
    drop(dst);
    // SAFETY: valid handles, freed once.
    unsafe {
        yuebing_store_destroy(store, nul());
        yuebing_bridge::ffi::bridge_api::yuebing_bridge_destroy(bridge, nul());
    }
}

#[test]
fn multi_buffer_batches_through_the_c_abi() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let mut src = Registered::new(store, 1 << 16, 0);
    // Key "p0": layers of 100 and 50 bytes; key "p1": one of 10, one of 200. Written before
    // any call: local-only memory that nothing else writes between calls.
    let a = pattern(3, 150);
    let b = pattern(4, 210);
    for (at, part) in [
        (0, &a[..100]),
        (1000, &a[100..]),
        (2000, &b[..10]),
        (3000, &b[10..]),
    ] {
        src.bytes[at..at + part.len()].copy_from_slice(part);
    }
    let (_keep, keys) = c_keys(&["p0", "p1"]);
    let counts = [2usize, 2];
    let addrs = [src.addr(0), src.addr(1000), src.addr(2000), src.addr(3000)];
    let lens = [100u64, 50, 10, 200];
    let mut codes = [9i32; 2];
    // SAFETY: arrays as long as promised; the memory stays registered through the call.
    let rc = unsafe {
        yuebing_store_batch_put_from_buffers(
            store,
            keys.as_ptr(),
            counts.as_ptr(),
            addrs.as_ptr(),
            lens.as_ptr(),
            2,
            NO_OPTS,
            codes.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!((rc, codes), (0, [0, 0]), "{}", last());
    assert_eq!(common::value_of(store, "p0"), Ok(a.clone()));
    assert_eq!(common::value_of(store, "p1"), Ok(b.clone()));

    // Back into one buffer each, then (callback form) into buffers too small in all.
    let dst = Registered::new(store, 1 << 16, 0);
    let counts = [1usize, 1];
    let addrs = [dst.addr(0), dst.addr(4096)];
    let lens = [4096u64, 4096];
    let mut sizes = [0u64; 2];
    // SAFETY: as above.
    let rc = unsafe {
        yuebing_store_batch_get_into_buffers(
            store,
            keys.as_ptr(),
            counts.as_ptr(),
            addrs.as_ptr(),
            lens.as_ptr(),
            2,
            NO_OPTS,
            codes.as_mut_ptr(),
            sizes.as_mut_ptr(),
            nul(),
        )
    };
    assert_eq!((rc, codes, sizes), (0, [0, 0], [150, 210]), "{}", last());
    // SAFETY: the call is over: nothing writes the registered memory now.
    let got = unsafe { copied(dst.addr(0) as *const u8, 8192) };
    assert_eq!(&got[..150], &a[..]);
    assert_eq!(&got[4096..4306], &b[..]);
    let small = [100u64, 40];
    let addrs = [dst.addr(10_000), dst.addr(20_000)];
    let one = [2usize];
    // SAFETY: as above; the outcome is awaited while its `user_data` lives.
    let done = outcome(|ud| unsafe {
        yuebing_store_batch_get_into_buffers_async(
            store,
            keys.as_ptr(),
            one.as_ptr(),
            addrs.as_ptr(),
            small.as_ptr(),
            1,
            NO_OPTS,
            Some(on_each),
            ud,
            NO_CALL,
            nul(),
        )
    });
    assert_eq!(done, Ok((0, (vec![YUEBING_ERR_INVALID_PARAMS], vec![0]))));
    drop((src, dst));
    // SAFETY: valid handles, freed once.
    unsafe {
        yuebing_store_destroy(store, nul());
        yuebing_bridge::ffi::bridge_api::yuebing_bridge_destroy(bridge, nul());
    }
}
