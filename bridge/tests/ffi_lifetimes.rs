//! What an engine's C handles own, and when it ends: the destroy of the last handle returns only
//! once the calls changing that memory on other threads returned, and unregisters what C
//! registered, and nothing else (a range unregistered through the Rust API since and
//! registered again there is left alone).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use yuebing_bridge::ffi::engine_api::*;
use yuebing_bridge::ffi::error::YUEBING_ERR_INVALID_HANDLE;
use yuebing_bridge::ffi::store_api::*;
use yuebing_bridge::ffi::types::*;
use yuebing_bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing_engine::Location;
use yuebing_store::ClientConfig;

use common::Cluster;

/// A store client made in Rust (so that the test sees its engine's registrations) on `bridge`.
fn client(cluster: &Cluster, bridge: &Bridge) -> BlockingClient {
    let cfg = ClientConfig {
        masters: vec![cluster.endpoint.to_str().unwrap().parse().unwrap()],
        store_size: 0,
        ..ClientConfig::default()
    };
    BlockingClient::start(bridge, cfg).unwrap()
}

/// An engine handle of `client`'s engine that is the last C handle of it.
fn last_engine_handle(client: &BlockingClient) -> yuebing_engine_t {
    let store = store_handle(client).unwrap();
    let mut engine = 0;
    // SAFETY: valid handles and outputs.
    unsafe {
        assert_eq!(
            yuebing_store_engine(store, &mut engine, std::ptr::null_mut()),
            0
        );
        assert_eq!(yuebing_store_destroy(store, std::ptr::null_mut()), 0);
    }
    engine
}

#[test]
fn the_last_destroy_waits_for_an_allocation_in_flight_and_unregisters_it() {
    let cluster = Cluster::start();
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let client = client(&cluster, &bridge);
    let engine = client.client().engine().clone();
    let before = engine.memory().regions();
    for round in 0..4u64 {
        let h = last_engine_handle(&client);
        // The order in which the allocation and the destroy returned.
        let clock = AtomicU64::new(0);
        let (allocated, destroyed) = std::thread::scope(|s| {
            let allocating = s.spawn(|| {
                let mut addr = 0u64;
                // SAFETY: a handle that may be destroyed meanwhile (then an error code); a
                // valid output. 256 MiB prefaulted: long enough to be in flight.
                let rc = unsafe {
                    yuebing_engine_allocate(
                        h,
                        256 << 20,
                        YUEBING_ACCESS_READ_WRITE,
                        &mut addr,
                        std::ptr::null_mut(),
                    )
                };
                (rc, addr, clock.fetch_add(1, Ordering::SeqCst))
            });
            std::thread::sleep(Duration::from_millis(5 * round));
            // SAFETY: a valid handle, destroyed once.
            let rc = unsafe { yuebing_engine_destroy(h, std::ptr::null_mut()) };
            assert_eq!(rc, 0);
            let at = clock.fetch_add(1, Ordering::SeqCst);
            // What is registered the moment the destroy returned.
            let regions = engine.memory().regions();
            (allocating.join().unwrap(), (at, regions))
        });
        let ((rc, addr, allocated_at), (destroyed_at, regions)) = (allocated, destroyed);
        if rc == 0 {
            assert!(
                allocated_at < destroyed_at,
                "round {round}: the destroy returned while an allocation on its handle ran"
            );
            assert!(
                regions.iter().all(|r| r.addr != addr),
                "round {round}: memory allocated through C outlived the destroy"
            );
        } else {
            assert_eq!(rc, YUEBING_ERR_INVALID_HANDLE, "round {round}");
        }
        assert_eq!(regions, before, "round {round}");
    }
}

#[test]
fn the_last_destroy_leaves_a_registration_it_did_not_make() {
    let cluster = Cluster::start();
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let client = client(&cluster, &bridge);
    let engine = client.client().engine().clone();
    let h = last_engine_handle(&client);
    let mut memory = vec![0u8; 1 << 16];
    let (addr, len) = (memory.as_mut_ptr(), memory.len());
    // SAFETY: `memory` outlives both registrations (it is unregistered below, before it is
    // dropped) and is not touched through references meanwhile.
    unsafe {
        let rc = yuebing_engine_register(
            h,
            addr.cast(),
            len,
            std::ptr::null(),
            YUEBING_ACCESS_LOCAL_ONLY,
            std::ptr::null_mut(),
        );
        assert_eq!(rc, 0);
        // Rust code holding the same client unregisters it, and registers it again.
        engine.unregister(addr as u64).unwrap();
        engine.register(addr, len, Location::default()).unwrap();
        assert_eq!(yuebing_engine_destroy(h, std::ptr::null_mut()), 0);
    }
    assert!(
        engine.memory().find(addr as u64, len as u64).is_some(),
        "the destroy unregistered a registration made through Rust"
    );
    engine.unregister(addr as u64).unwrap();
    drop(memory);
}
