//! The C form of ranged reads, `yuebing_store_batch_get_ranges` (blocking and callback):
//! fragments of several objects into registered memory, one code and length per fragment, a
//! bad fragment refused in its place.

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
