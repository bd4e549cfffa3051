//! put / upsert: start, end, revoke, batches, and their error codes.

use std::collections::HashSet;

use yuebing_store::master::{MasterConfig, PutConfig};
use yuebing_store::Error;

use super::*;

#[test]
fn replicas_go_to_distinct_nodes_preferred_first() {
    let mut fx = three_nodes();
    let r = fx.put(A, 1, "two", 1000, 2).unwrap();
    assert_eq!(r.len(), 2);
    assert_ne!(r[0].node, r[1].node);
    let r = fx.put(A, 1, "many", 1000, 5).unwrap();
    let nodes: HashSet<_> = r.iter().map(|d| d.node.clone()).collect();
    assert_eq!(nodes.len(), 3, "min(5, 3 nodes) replicas on distinct nodes");
    let cfg = PutConfig {
        replica_num: 2,
        preferred: vec!["n3".into(), "n2".into()],
        ..PutConfig::default()
    };
    let r =
        fx.m.put_start(A, 1, "pref", 10, &cfg, yuebing_store::Write::Put)
            .unwrap();
    assert_eq!((r[0].node.as_str(), r[1].node.as_str()), ("n3", "n2"));
    assert!(r.iter().all(|d| d.len == 10 && d.addr % 64 == 0));
}

#[test]
fn free_ratio_first_picks_the_emptiest_node() {
    let mut fx = Fx::new(MasterConfig {
        placement: yuebing_store::master::PlacementStrategy::FreeRatioFirst,
        ..cfg()
    });
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    let first = fx.put(A, 1, "a", 8 * MIB, 1).unwrap()[0].node.clone();
    let second = fx.put(A, 1, "b", MIB, 1).unwrap()[0].node.clone();
    assert_ne!(first, second);
}

#[test]
fn bad_parameters_are_invalid_params_and_change_nothing() {
    let mut fx = three_nodes();
    let seq = fx.m.last_seq();
    let huge = [u64::MAX, u64::MAX - 1, u64::MAX - 62];
    let bad = [("", 10, 1), ("k", 0, 1), ("k", 10, 0)];
    for (key, size, n) in bad.into_iter().chain(huge.map(|s| ("k", s, 1))) {
        let e =
            fx.m.put_start(A, 1, key, size, &replicas(n), yuebing_store::Write::Put)
                .unwrap_err();
        assert!(matches!(e, Error::InvalidParams { .. }), "{size}: {e}");
        assert_eq!(e.code(), -600);
    }
    for size in huge {
        let e =
            fx.m.put_start(A, 1, "k", size, &replicas(1), yuebing_store::Write::Upsert)
                .unwrap_err();
        assert_eq!(e.code(), -600, "upsert of {size}: {e}");
    }
    let long = "k".repeat(5000);
    assert_eq!(
        fx.m.put_start(A, 1, &long, 1, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err()
            .code(),
        -600
    );
    assert_eq!(fx.m.last_seq(), seq);
    assert_eq!(fx.used(), 0);
}

#[test]
fn no_store_space_is_no_available_handle() {
    let mut fx = Fx::new(cfg());
    let e =
        fx.m.put_start(A, 1, "k", 10, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err();
    assert_eq!(e.code(), -200);
    fx.mount(A, 0, "n1", MIB);
    assert_eq!(
        fx.m.put_start(
            A,
            1,
            "big",
            2 * MIB,
            &replicas(1),
            yuebing_store::Write::Put
        )
        .unwrap_err()
        .code(),
        -200
    );
}

#[test]
fn an_existing_key_is_object_already_exists_and_keeps_its_value() {
    let mut fx = three_nodes();
    let first = fx.put(A, 1, "k", 100, 1).unwrap();
    let e =
        fx.m.put_start(B, 2, "k", 200, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err();
    assert_eq!(e.code(), -705);
    let got = fx.m.get_replica_list(3, "k").unwrap();
    assert_eq!((got.size, got.replicas[0].addr), (100, first[0].addr));
}

#[test]
fn a_young_put_blocks_an_old_one_is_preempted_and_its_space_held() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 0, "k", MIB, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    let used = fx.used();
    // Younger than the discard timeout (300 ms).
    assert_eq!(
        fx.m.put_start(B, 299, "k", MIB, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err()
            .code(),
        -705
    );
    // Older: pre-empted; the old space stays held (its writer may still write).
    fx.m.put_start(B, 300, "k", MIB, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    fx.check();
    assert_eq!(fx.used(), 2 * used);
    // The first writer lost the key.
    assert_eq!(fx.m.put_end(A, 301, "k").unwrap_err().code(), -601);
    fx.m.put_end(B, 301, "k").unwrap();
    ping_all(&mut fx, 2_900);
    fx.m.handle_timeout(2_999);
    assert_eq!(fx.used(), 2 * used, "held until started + release (3 s)");
    assert_eq!(fx.m.poll_timeout().map(|t| t <= 3_000), Some(true));
    fx.m.handle_timeout(3_000);
    fx.check();
    assert_eq!(fx.used(), used);
}

#[test]
fn an_abandoned_put_is_revoked_at_its_release_time() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 0, "k", MIB, &replicas(2), yuebing_store::Write::Put)
        .unwrap();
    ping_all(&mut fx, 900);
    assert_eq!(fx.m.get_replica_list(10, "k").unwrap_err().code(), -703);
    assert!(!fx.m.exist("k").unwrap());
    // Keep clients alive until the release time.
    for t in (900..=3_000).step_by(900) {
        ping_all(&mut fx, t);
        fx.m.handle_timeout(t);
    }
    ping_all(&mut fx, 3_000);
    fx.m.handle_timeout(3_000);
    fx.check();
    assert_eq!(fx.used(), 0);
    assert_eq!(fx.m.put_end(A, 3_001, "k").unwrap_err().code(), -704);
}

#[test]
fn put_end_and_revoke_rules() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 1, "k", 100, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    assert_eq!(fx.m.put_end(B, 2, "k").unwrap_err().code(), -601);
    assert_eq!(fx.m.put_revoke(B, 2, "k").unwrap_err().code(), -601);
    fx.m.put_end(A, 2, "k").unwrap();
    fx.m.put_end(A, 3, "k").expect("a repeated put_end is Ok");
    let e = fx.m.put_revoke(A, 3, "k").unwrap_err();
    assert!(matches!(e, Error::InvalidWrite { .. }));
    assert_eq!(e.code(), -700);
    assert_eq!(fx.m.put_end(A, 3, "nope").unwrap_err().code(), -704);
    assert_eq!(fx.m.put_revoke(A, 3, "nope").unwrap_err().code(), -704);
    fx.m.put_start(A, 4, "r", 100, &replicas(3), yuebing_store::Write::Put)
        .unwrap();
    fx.m.put_revoke(A, 5, "r").unwrap();
    fx.check();
    assert!(!fx.m.exist("r").unwrap());
    fx.put(B, 6, "r", 100, 1)
        .expect("a revoked key is free again");
}

#[test]
fn upsert_in_place_when_same_size_and_unleased() {
    let mut fx = three_nodes();
    let old = fx.put(A, 1, "k", 4096, 1).unwrap();
    let new =
        fx.m.put_start(
            A,
            500,
            "k",
            4096,
            &replicas(1),
            yuebing_store::Write::Upsert,
        )
        .unwrap();
    assert_eq!(old, new, "same size: the same space");
    assert_eq!(fx.m.get_replica_list(501, "k").unwrap_err().code(), -703);
    fx.m.put_end(A, 502, "k").unwrap();
    assert_eq!(fx.m.get_replica_list(503, "k").unwrap().replicas, old);
    fx.check();
}

#[test]
fn upsert_of_another_size_reallocates_and_keeps_the_old_version_readable() {
    let mut fx = three_nodes();
    let old = fx.put(A, 1, "k", 4096, 1).unwrap();
    let lease = fx.m.get_replica_list(10, "k").unwrap();
    assert_eq!(lease.replicas, old);
    let new =
        fx.m.put_start(A, 20, "k", 8192, &replicas(1), yuebing_store::Write::Upsert)
            .unwrap();
    assert_ne!(new[0].addr, old[0].addr);
    assert_eq!(
        fx.m.get_replica_list(30, "k").unwrap().size,
        4096,
        "old version until the end"
    );
    fx.m.put_end(A, 40, "k").unwrap();
    assert_eq!(fx.m.get_replica_list(41, "k").unwrap().size, 8192);
    fx.check();
    // The old replica is held until the reader's lease (granted at 30, 100 ms) ends.
    let used = fx.used();
    fx.m.handle_timeout(129);
    assert_eq!(fx.used(), used);
    fx.m.handle_timeout(130);
    assert_eq!(fx.used(), used - 4096);
    fx.check();
}

#[test]
fn upsert_while_a_put_runs_is_write_in_progress() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 1, "k", 100, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    let e =
        fx.m.put_start(B, 2, "k", 100, &replicas(1), yuebing_store::Write::Upsert)
            .unwrap_err();
    assert_eq!((e.name(), e.code()), ("WriteInProgress", -714));
    // A missing key is simply put.
    fx.m.put_start(
        B,
        2,
        "fresh",
        100,
        &replicas(1),
        yuebing_store::Write::Upsert,
    )
    .unwrap();
    fx.m.put_end(B, 3, "fresh").unwrap();
    assert!(fx.m.exist("fresh").unwrap());
}

#[test]
fn revoking_an_in_place_upsert_removes_the_torn_object() {
    let mut fx = three_nodes();
    fx.put(A, 1, "k", 100, 1).unwrap();
    fx.m.put_start(A, 2, "k", 100, &replicas(1), yuebing_store::Write::Upsert)
        .unwrap();
    fx.m.put_revoke(A, 3, "k").unwrap();
    fx.check();
    assert!(!fx.m.exist("k").unwrap());
    // Held until the write's release time (started at 2, 3 s): late bytes may still land.
    assert_eq!(fx.used(), 128);
    ping_all(&mut fx, 2_500);
    fx.m.handle_timeout(3_001);
    assert_eq!(fx.used(), 128);
    fx.m.handle_timeout(3_002);
    assert_eq!(fx.used(), 0);
    fx.check();
}

#[test]
fn batches_keep_order_and_give_one_result_each() {
    let mut fx = three_nodes();
    fx.put(A, 1, "b", 10, 1).unwrap();
    let items = vec![
        ("a".to_string(), 10),
        ("b".to_string(), 10),
        ("".to_string(), 10),
        ("c".to_string(), 0),
    ];
    let r =
        fx.m.batch_put_start(A, 2, &items, &replicas(1), yuebing_store::Write::Put);
    let codes: Vec<i32> = r
        .iter()
        .map(|x| x.as_ref().map(|_| 0).unwrap_or_else(|e| e.code()))
        .collect();
    assert_eq!(codes, vec![0, -705, -600, -600]);
    let keys: Vec<String> = ["a", "b", "zz"].iter().map(|s| s.to_string()).collect();
    let r = fx.m.batch_put_end(A, 3, &keys);
    assert!(r[0].is_ok() && r[1].is_ok());
    assert_eq!(r[2].as_ref().unwrap_err().code(), -704);
    let r = fx.m.batch_put_start(
        A,
        4,
        &[("a".into(), 10), ("n".into(), 20)],
        &replicas(1),
        yuebing_store::Write::Upsert,
    );
    assert!(r.iter().all(|x| x.is_ok()));
    let r = fx.m.batch_put_revoke(A, 5, &["n".to_string()]);
    assert!(r[0].is_ok());
    let r =
        fx.m.batch_put_end(A, 5, &["a".to_string(), "n".to_string()]);
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), -704);
    let r = fx.m.batch_put_revoke(A, 6, &["a".to_string()]);
    assert_eq!(r[0].as_ref().unwrap_err().code(), -700);
    fx.check();
}
