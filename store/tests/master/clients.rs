//! Store space and clients: mount errors, graceful unmount, expiry, remount.

use yuebing_store::master::{Effect, PingResult, PutConfig};
use yuebing_store::Write;

use super::*;

fn on(nodes: &[&str], n: u32) -> PutConfig {
    PutConfig {
        replica_num: n,
        preferred: nodes.iter().map(|s| s.to_string()).collect(),
        ..PutConfig::default()
    }
}

#[test]
fn mount_errors_are_typed_and_change_nothing() {
    let mut fx = Fx::new(cfg());
    fx.m.mount(A, 0, &[spec("n1", 0x1000, 4096)]).unwrap();
    let seq = fx.m.last_seq();
    let e = fx.m.mount(A, 0, &[spec("n1", 0x1800, 4096)]).unwrap_err();
    assert_eq!((e.name(), e.code()), ("SegmentAlreadyExists", -102));
    let e =
        fx.m.mount(A, 0, &[spec("n2", 0, 100), spec("n2", 50, 100)])
            .unwrap_err();
    assert_eq!(e.code(), -102, "overlap inside one call");
    assert_eq!(
        fx.m.mount(A, 0, &[spec("n2", 0, 0)]).unwrap_err().code(),
        -600
    );
    assert_eq!(
        fx.m.mount(A, 0, &[spec("", 0, 10)]).unwrap_err().code(),
        -600
    );
    assert_eq!(
        fx.m.mount(A, 0, &[spec("n2", u64::MAX, 10)])
            .unwrap_err()
            .code(),
        -600
    );
    assert_eq!(fx.m.last_seq(), seq);
    fx.m.mount(A, 0, &[spec("n1", 0x2000, 4096)])
        .expect("adjacent is fine");
    assert_eq!(fx.m.unmount(A, 1, MountId(99)).unwrap_err().code(), -101);
    assert_eq!(fx.m.unmount(B, 1, MountId(1)).unwrap_err().code(), -601);
}

/// As Mooncake's `MountSegment` answers OK for a segment already mounted: the same range
/// mounted again by the same client is its mount id, and nothing changes or is logged (so a
/// replay rebuilds the same state); an overlapping range, the same range by another client,
/// and a range on its way out (unmounting) are still refused.
#[test]
fn mounting_the_same_range_again_is_idempotent() {
    let mut fx = Fx::new(cfg());
    let s = spec("n1", 0x1000, 4096);
    let ids = fx.m.mount(A, 0, std::slice::from_ref(&s)).unwrap();
    fx.drain();
    let (seq, entries) = (fx.m.last_seq(), fx.log.len());
    assert_eq!(fx.m.mount(A, 5, std::slice::from_ref(&s)).unwrap(), ids);
    assert_eq!(
        fx.m.mount(A, 5, &[s.clone(), s.clone()]).unwrap(),
        [ids[0], ids[0]]
    );
    fx.drain();
    assert_eq!((fx.m.last_seq(), fx.log.len()), (seq, entries), "no record");
    assert_eq!(fx.m.stats().mounts, 1);
    let both = fx.m.mount(A, 6, &[s.clone(), spec("n1", 0x2000, 4096)]);
    let both = both.unwrap();
    assert_eq!(both[0], ids[0]);
    assert_ne!(both[1], ids[0]);
    let e = fx.m.mount(A, 7, &[spec("n1", 0x1800, 4096)]).unwrap_err();
    assert_eq!(e.code(), -102, "overlapping, same client");
    let e = fx.m.mount(B, 7, std::slice::from_ref(&s)).unwrap_err();
    assert_eq!(e.code(), -102, "the same range, another client");
    fx.m.unmount(A, 8, ids[0]).unwrap();
    let e = fx.m.mount(A, 9, std::slice::from_ref(&s)).unwrap_err();
    assert_eq!(e.code(), -102, "unmounting");
    fx.drain();
    fx.check();
    let replayed = Master::restore(fx.m.config().clone(), true, None, fx.log.clone(), 10);
    assert_eq!(replayed.unwrap().snapshot(), fx.m.snapshot());
}

/// A range restored from the log waits for its owner's `remount`: a `mount` of it is not
/// answered OK as if it were in use (it would stay unreadable and take no replicas), it is
/// refused as before, and the remount makes it usable.
#[test]
fn mounting_a_restored_range_again_is_refused_until_remounted() {
    let mut fx = Fx::new(cfg());
    let s = spec("n1", 0x1000, 4096);
    fx.m.mount(A, 0, std::slice::from_ref(&s)).unwrap();
    fx.drain();
    let mut restored =
        Master::restore(fx.m.config().clone(), true, None, fx.log.clone(), 10).unwrap();
    let e = restored.mount(A, 11, std::slice::from_ref(&s)).unwrap_err();
    assert_eq!(e.code(), -102, "a restored range answered as mounted");
    restored.remount(A, 12, std::slice::from_ref(&s)).unwrap();
    assert!(
        restored.mount(A, 13, std::slice::from_ref(&s)).is_ok(),
        "idempotent once in use"
    );
}

#[test]
fn a_graceful_unmount_takes_no_new_replicas_and_drops_its_own_after_the_grace() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 0, "k", 100, &on(&["n1"], 1), yuebing_store::Write::Put)
        .unwrap();
    fx.m.put_end(A, 0, "k").unwrap();
    fx.m.unmount(A, 10, MountId(1)).unwrap();
    fx.m.unmount(A, 11, MountId(1)).expect("repeat is Ok");
    let r =
        fx.m.put_start(
            A,
            20,
            "new",
            100,
            &on(&["n1"], 1),
            yuebing_store::Write::Put,
        )
        .unwrap();
    assert_ne!(r[0].node, "n1");
    ping_all(&mut fx, 500);
    fx.m.handle_timeout(509);
    assert_eq!(
        fx.m.get_replica_list(509, "k").unwrap().replicas[0].node,
        "n1"
    );
    fx.m.handle_timeout(510);
    assert_eq!(fx.m.get_replica_list(510, "k").unwrap_err().code(), -704);
    fx.check();
}

#[test]
fn an_unmount_may_shorten_its_grace_but_not_lengthen_it() {
    let mut fx = three_nodes();
    for (key, node) in [("k1", "n1"), ("k2", "n2")] {
        fx.m.put_start(A, 0, key, 100, &on(&[node], 1), yuebing_store::Write::Put)
            .unwrap();
        fx.m.put_end(A, 0, key).unwrap();
    }
    // Grace 0: gone at the next timer run. A grace past the configured 500 ms: 500 ms.
    fx.m.unmount_within(A, 10, MountId(1), 0).unwrap();
    fx.m.unmount_within(B, 10, MountId(2), 1_000_000).unwrap();
    fx.m.handle_timeout(10);
    assert_eq!(fx.m.get_replica_list(10, "k1").unwrap_err().code(), -704);
    ping_all(&mut fx, 500);
    fx.m.handle_timeout(509);
    assert!(fx.m.get_replica_list(509, "k2").is_ok());
    fx.m.handle_timeout(510);
    assert_eq!(fx.m.get_replica_list(510, "k2").unwrap_err().code(), -704);
    assert_eq!(
        fx.m.unmount_within(A, 510, MountId(3), 0)
            .unwrap_err()
            .code(),
        -601,
        "another client's range"
    );
    fx.check();
}

/// A node that closed (a graceful unmount) may free its memory at once, as a client that
/// closes and is dropped does: its objects are leaving. A put of such a key writes a new object
/// into live space instead of answering that it exists (which Mooncake's API reports as a
/// success: the value would be lost), and an upsert of the same size is never done in place.
#[test]
fn a_put_over_a_leaving_object_writes_it_anew_in_live_space() {
    use yuebing_store::Write;
    let mut fx = three_nodes();
    for key in ["k", "same_size"] {
        fx.m.put_start(A, 0, key, 100, &on(&["n1"], 1), Write::Put)
            .unwrap();
        fx.m.put_end(A, 0, key).unwrap();
    }
    fx.m.put_start(B, 0, "both", 100, &on(&["n1", "n2"], 2), Write::Put)
        .unwrap();
    fx.m.put_end(B, 0, "both").unwrap();
    fx.m.unmount(A, 10, MountId(1)).unwrap();

    let r =
        fx.m.put_start(B, 20, "k", 100, &on(&["n1"], 1), Write::Put)
            .unwrap();
    assert_ne!(r[0].node, "n1", "a new replica in live space");
    fx.m.put_end(B, 20, "k").unwrap();
    let r =
        fx.m.put_start(B, 21, "same_size", 100, &on(&["n1"], 1), Write::Upsert);
    assert_ne!(
        r.unwrap()[0].node,
        "n1",
        "not in place into the leaving range"
    );
    fx.m.put_end(B, 21, "same_size").unwrap();
    // One replica is still live: the object is not leaving, and a put still finds it there.
    let e =
        fx.m.put_start(B, 22, "both", 100, &on(&["n2"], 1), Write::Put);
    assert_eq!(e.unwrap_err().code(), -705);

    // At the grace's end the range goes; the new objects stay.
    ping_all(&mut fx, 500);
    fx.m.handle_timeout(510);
    for key in ["k", "same_size", "both"] {
        let list = fx.m.get_replica_list(510, key).unwrap();
        assert!(
            list.replicas.iter().all(|r| r.node != "n1"),
            "{key}: {list:?}"
        );
    }
    fx.check();
}

#[test]
fn an_expired_client_loses_its_space_objects_and_writes_then_must_remount() {
    let mut fx = three_nodes();
    fx.m.put_start(
        B,
        0,
        "solo",
        100,
        &on(&["n1"], 1),
        yuebing_store::Write::Put,
    )
    .unwrap();
    fx.m.put_end(B, 0, "solo").unwrap();
    fx.m.put_start(
        B,
        0,
        "pair",
        100,
        &on(&["n1", "n2"], 2),
        yuebing_store::Write::Put,
    )
    .unwrap();
    fx.m.put_end(B, 0, "pair").unwrap();
    fx.m.put_start(A, 0, "wip", 100, &on(&["n2"], 1), yuebing_store::Write::Put)
        .unwrap();
    fx.m.get_replica_list(900, "solo").unwrap();
    fx.drain();
    // B and C keep pinging; A (node n1) goes silent.
    fx.m.ping(B, 900);
    fx.m.ping(C, 900);
    assert_eq!(fx.m.poll_timeout(), Some(1_000));
    fx.m.handle_timeout(999);
    assert!(fx.m.exist("solo").unwrap());
    fx.m.handle_timeout(1_000);
    fx.check();
    let effects = fx.drain();
    assert!(effects.contains(&Effect::ClientExpired {
        client: A,
        mounts: 1,
        writes: 1
    }));
    assert_eq!(
        fx.m.get_replica_list(1_001, "solo").unwrap_err().code(),
        -704,
        "its only node is gone, lease or not"
    );
    let pair = fx.m.get_replica_list(1_001, "pair").unwrap();
    assert_eq!(pair.replicas.len(), 1);
    assert_eq!(pair.replicas[0].node, "n2");
    assert_eq!(fx.m.put_end(A, 1_001, "wip").unwrap_err().code(), -704);
    assert_eq!(fx.m.ping(A, 1_002), PingResult::NeedRemount);
    assert_eq!(fx.m.ping(B, 1_002), PingResult::Ok);
    fx.m.remount(A, 1_003, &[spec("n1", 0x10, MIB)]).unwrap();
    assert_eq!(fx.m.ping(A, 1_004), PingResult::Ok);
    assert_eq!(fx.m.stats().clients, 3);
    fx.check();
}

#[test]
fn a_client_that_leaves_loses_its_space_objects_and_writes_at_once() {
    let mut fx = three_nodes();
    fx.m.put_start(
        B,
        0,
        "solo",
        100,
        &on(&["n1"], 1),
        yuebing_store::Write::Put,
    )
    .unwrap();
    fx.m.put_end(B, 0, "solo").unwrap();
    fx.m.put_start(A, 0, "wip", 100, &on(&["n2"], 1), yuebing_store::Write::Put)
        .unwrap();
    fx.drain();
    // A (node n1) leaves long before its TTL.
    fx.m.leave(A, 10);
    fx.check();
    assert!(!fx.m.exist("solo").unwrap(), "its only replica was on n1");
    assert_eq!(fx.m.put_end(A, 11, "wip").unwrap_err().code(), -704);
    assert_eq!(fx.m.stats().clients, 2);
    assert_eq!(fx.m.stats().mounts, 2);
    // Leaving again, or as a client the master never knew, changes nothing.
    fx.m.leave(A, 12);
    fx.m.leave(ClientId(999), 12);
    assert_eq!(fx.m.stats().mounts, 2);
    // The revoked write's space on n2 is held until its release time: transfers the
    // leaving process had started may still land there.
    assert!(fx.m.stats().bytes_used > 0, "held, not freed");
    ping_all(&mut fx, 900);
    fx.m.handle_timeout(900);
    assert!(fx.m.stats().bytes_used > 0, "still held at 900");
    ping_all(&mut fx, 3_000);
    fx.m.handle_timeout(3_000);
    assert_eq!(fx.m.stats().bytes_used, 0, "released at put_release_ms");
    fx.check();
}

/// An expired client may be cut off from the master but not from its peers: transfers of its
/// puts may still land. Its revoked writes hold their space until their release time, as a
/// leaving client's do.
#[test]
fn an_expired_clients_writes_hold_their_space_until_their_release_time() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 0, "wip", 100, &on(&["n2"], 1), yuebing_store::Write::Put)
        .unwrap();
    fx.drain();
    // B and C ping; A stops, and expires at its TTL (1000 ms).
    for now in [500, 1_000] {
        fx.m.ping(B, now);
        fx.m.ping(C, now);
    }
    fx.m.handle_timeout(1_000);
    fx.check();
    assert_eq!(fx.m.stats().clients, 2, "A expired");
    assert_eq!(fx.m.put_end(A, 1_001, "wip").unwrap_err().code(), -704);
    assert!(fx.m.stats().bytes_used > 0, "held, not freed");
    for now in [1_500, 2_000, 2_500, 3_000] {
        fx.m.ping(B, now);
        fx.m.ping(C, now);
    }
    fx.m.handle_timeout(3_000);
    assert_eq!(fx.m.stats().bytes_used, 0, "released at put_release_ms");
    fx.check();
}

/// A remount the leaving process's heartbeat had on the wire, landing after its `leave`,
/// must not mount the space the process freed as it left: refused for a client TTL.
#[test]
fn a_client_that_left_cannot_mount_again_within_its_ttl() {
    let mut fx = three_nodes();
    fx.m.leave(A, 10);
    fx.drain();
    let seq = fx.m.last_seq();
    assert_eq!(fx.m.ping(A, 11), PingResult::NeedRemount);
    let e = fx.m.remount(A, 12, &[spec("n1", 0x10, MIB)]).unwrap_err();
    assert_eq!((e.name(), e.code()), ("IllegalClient", -601));
    let e = fx.m.mount(A, 12, &[spec("n1", 0x10, MIB)]).unwrap_err();
    assert_eq!(e.code(), -601);
    assert_eq!(fx.m.last_seq(), seq, "refusals change nothing");
    assert_eq!(fx.m.stats().mounts, 2);
    // Other clients are not affected; after the TTL the id is forgotten.
    fx.m.mount(B, 12, &[spec("n2", 0x4000_0000, MIB)]).unwrap();
    fx.m.remount(A, 10 + 1_000, &[spec("n1", 0x10, MIB)])
        .unwrap();
    assert_eq!(fx.m.stats().mounts, 4);
    fx.check();
}

/// A master that starts with no state cannot know the leases its previous life granted: a
/// range a node remounts takes no replicas for one lease TTL (readers may still read it
/// there), while a first mount takes them at once.
#[test]
fn a_range_remounted_at_a_master_started_without_state_waits_one_lease_ttl() {
    let mut fx = Fx::new(cfg());
    fx.m.start_stateless(1_000);
    assert_eq!(fx.m.ping(A, 1_010), PingResult::NeedRemount);
    fx.m.remount(A, 1_010, &[spec("n1", base("n1"), MIB)])
        .unwrap();
    let e = fx.put(A, 1_020, "early", 100, 1).unwrap_err();
    assert_eq!((e.name(), e.code()), ("NoAvailableHandle", -200));
    fx.mount(B, 1_020, "n2", MIB);
    let on_n2 = fx.put(A, 1_030, "fresh", 100, 1).unwrap();
    assert_eq!(on_n2[0].node, "n2", "a first mount is not held");
    assert_eq!(fx.m.poll_timeout(), Some(1_100));
    fx.m.handle_timeout(1_099);
    let e =
        fx.m.put_start(A, 1_099, "k", 100, &on(&["n1"], 1), Write::Put);
    assert_eq!(e.unwrap()[0].node, "n2", "n1 still held");
    fx.m.handle_timeout(1_100);
    let r =
        fx.m.put_start(A, 1_100, "k2", 100, &on(&["n1"], 1), Write::Put);
    assert_eq!(r.unwrap()[0].node, "n1");
    fx.check();
}

/// A range removed with its client keeps out new mounts while the space freed there under a
/// read lease is still held for its readers.
#[test]
fn a_removed_range_stays_unmountable_while_space_freed_there_is_leased() {
    let mut fx = Fx::new(MasterConfig {
        lease_ttl_ms: 5_000,
        ..cfg()
    });
    fx.mount(A, 0, "n1", MIB);
    fx.mount(B, 0, "n2", MIB);
    fx.m.put_start(B, 0, "k", 100, &on(&["n1"], 1), Write::Put)
        .unwrap();
    fx.m.put_end(B, 0, "k").unwrap();
    fx.m.get_replica_list(900, "k").unwrap();
    // The upsert moves k to n2; its old bytes on n1 are held for the reader until 5_900.
    fx.m.put_start(B, 900, "k", 100, &on(&["n2"], 1), Write::Upsert)
        .unwrap();
    fx.m.put_end(B, 900, "k").unwrap();
    fx.m.ping(B, 900);
    // A goes silent and expires at 1_000, with its range.
    fx.m.handle_timeout(1_000);
    assert_eq!(fx.m.stats().mounts, 1);
    let e = fx.m.remount(A, 1_100, &[spec("n1", base("n1"), MIB)]);
    assert_eq!(e.unwrap_err().name(), "ObjectHasLease");
    fx.m.remount(A, 5_900, &[spec("n1", base("n1"), MIB)])
        .unwrap();
    fx.check();
}

/// A range removed with its client keeps out new mounts until the writes placed there are
/// past their release time: their bytes may still land.
#[test]
fn a_removed_range_stays_unmountable_until_writes_placed_there_are_released() {
    let mut fx = Fx::new(cfg());
    fx.mount(A, 0, "n1", MIB);
    fx.mount(B, 0, "n2", MIB);
    fx.m.put_start(B, 0, "wip", 100, &on(&["n1"], 1), Write::Put)
        .unwrap();
    fx.m.ping(B, 900);
    fx.m.handle_timeout(1_000);
    assert_eq!(fx.m.stats().mounts, 1);
    let e = fx.m.remount(A, 1_100, &[spec("n1", base("n1"), MIB)]);
    assert_eq!(e.unwrap_err().name(), "ObjectHasLease");
    fx.m.ping(B, 1_800);
    fx.m.ping(B, 2_700);
    fx.m.remount(A, 3_000, &[spec("n1", base("n1"), MIB)])
        .unwrap();
    fx.check();
}
