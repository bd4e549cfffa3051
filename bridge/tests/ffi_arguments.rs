//! Arguments through the C ABI (issue 25, item 7): an empty name, a zero address, a zero length
//! each come back as an invalid-argument code whose message names the argument, where they
//! enter — not as a later, misleading error (a segment not found, a range not registered) —
//! and change nothing.

mod common;

use std::ffi::CString;

use yuebing_bridge::ffi::engine_api::*;
use yuebing_bridge::ffi::error::*;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::store_ops::*;
use yuebing_bridge::ffi::types::*;

use common::{last, new_bridge, Cluster};

/// The codes that say "a bad argument": the C ABI's own, the store's (Mooncake's
/// INVALID_PARAMS) and the engine's.
const INVALID: [i32; 3] = [YUEBING_ERR_INVALID_ARGUMENT, -600, -3001];

/// Checks that `rc` is an invalid-argument code whose message names `what`.
fn refused(rc: i32, what: &str) {
    let message = last();
    assert!(
        INVALID.contains(&rc) && message.contains(what),
        "{what}: code {rc} ({}), {message:?}",
        common::name(rc)
    );
}

#[test]
fn empty_names_zero_addresses_and_zero_lengths_are_refused_where_they_enter() {
    let cluster = Cluster::start();
    let bridge = new_bridge();
    let store = cluster.store(bridge);
    let nul = std::ptr::null_mut();
    let (empty, key) = (CString::new("").unwrap(), CString::new("k").unwrap());
    let mut engine = 0;
    let mut memory = vec![0u8; 4096];
    let addr = memory.as_mut_ptr();
    // SAFETY: every pointer is valid for what it claims; `memory` is registered only while the
    // engine handle lives and is not touched through references meanwhile.
    unsafe {
        assert_eq!(yuebing_store_engine(store, &mut engine, nul), 0);
        let mut segment = 0;
        refused(
            yuebing_engine_open_segment(engine, empty.as_ptr(), &mut segment, nul),
            "segment name",
        );
        let data = [7u8; 16];
        let rc = yuebing_store_put(
            store,
            empty.as_ptr(),
            data.as_ptr(),
            16,
            std::ptr::null(),
            nul,
        );
        refused(rc, "key");
        let rc = yuebing_store_put(store, key.as_ptr(), data.as_ptr(), 0, std::ptr::null(), nul);
        refused(rc, "size");
        let mut got = 0u64;
        let rc = yuebing_store_get_into(
            store,
            key.as_ptr(),
            0,
            4096,
            std::ptr::null(),
            &mut got,
            nul,
        );
        refused(rc, "addr");
        let rc = yuebing_store_get_into(
            store,
            key.as_ptr(),
            addr as u64,
            0,
            std::ptr::null(),
            &mut got,
            nul,
        );
        refused(rc, "len");
        let rc = yuebing_engine_register(
            engine,
            addr.cast(),
            0,
            std::ptr::null(),
            YUEBING_ACCESS_LOCAL_ONLY,
            nul,
        );
        refused(rc, "length 0");
        let rc = yuebing_engine_register(
            engine,
            std::ptr::null_mut(),
            4096,
            std::ptr::null(),
            YUEBING_ACCESS_LOCAL_ONLY,
            nul,
        );
        refused(rc, "addr");
        // Nothing was stored or registered by the refused calls.
        let mut exists = 1u64;
        assert_eq!(
            yuebing_store_exist(store, key.as_ptr(), std::ptr::null(), &mut exists, nul),
            0
        );
        assert_eq!(exists, 0, "a refused put stored something");
        assert_eq!(
            yuebing_engine_unregister(engine, addr as u64, nul),
            YUEBING_ERR_ADDRESS_NOT_REGISTERED,
            "a refused registration registered something"
        );
        assert_eq!(yuebing_engine_destroy(engine, nul), 0);
        assert_eq!(yuebing_store_destroy(store, nul), 0);
    }
    drop(memory);
}
