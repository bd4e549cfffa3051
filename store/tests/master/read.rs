//! Reads, leases, removal, listing and statistics.

use super::*;

#[test]
fn get_grants_a_lease_that_blocks_remove_unless_forced() {
    let mut fx = three_nodes();
    fx.put(A, 0, "k", 100, 1).unwrap();
    let l = fx.m.get_replica_list(10, "k").unwrap();
    assert_eq!((l.size, l.lease_ms, l.replicas.len()), (100, 100, 1));
    let e = fx.m.remove(50, "k", false).unwrap_err();
    assert_eq!((e.name(), e.code()), ("ObjectHasLease", -706));
    assert_eq!(fx.m.remove_all(50, false), 0);
    // The lease (10 + 100) has ended.
    fx.m.remove(110, "k", false).unwrap();
    assert_eq!(fx.m.remove(111, "k", false).unwrap_err().code(), -704);
    fx.check();
}

#[test]
fn forced_remove_of_a_leased_object_holds_its_space_until_the_lease_ends() {
    let mut fx = three_nodes();
    fx.put(A, 0, "k", 4096, 1).unwrap();
    fx.m.get_replica_list(10, "k").unwrap();
    fx.m.remove(20, "k", true).unwrap();
    assert!(!fx.m.exist("k").unwrap());
    assert_eq!(fx.used(), 4096, "a reader may still be reading it");
    fx.m.handle_timeout(110);
    assert_eq!(fx.used(), 0);
    fx.check();
}

#[test]
fn remove_all_skips_leased_objects_unless_forced() {
    let mut fx = three_nodes();
    for k in ["a", "b", "c"] {
        fx.put(A, 0, k, 100, 1).unwrap();
    }
    fx.m.get_replica_list(1, "b").unwrap();
    assert_eq!(fx.m.remove_all(2, false), 2);
    assert!(fx.m.exist("b").unwrap());
    assert_eq!(fx.m.remove_all(3, true), 1);
    assert_eq!(fx.m.stats().objects, 0);
    fx.check();
}

#[test]
fn batch_remove_answers_per_key_and_needs_force_for_leased_ones() {
    let mut fx = three_nodes();
    for k in ["a", "b"] {
        fx.put(A, 0, k, 100, 1).unwrap();
    }
    fx.m.get_replica_list(1, "b").unwrap();
    let keys: Vec<String> = ["a", "nope", "b", ""]
        .iter()
        .map(|k| k.to_string())
        .collect();
    let codes: Vec<i32> =
        fx.m.batch_remove(2, &keys, false)
            .iter()
            .map(|r| r.as_ref().map_or_else(|e| e.code(), |_| 0))
            .collect();
    assert_eq!(codes, [0, -704, -706, -600]);
    assert!(!fx.m.exist("a").unwrap() && fx.m.exist("b").unwrap());
    assert!(fx.m.batch_remove(3, &keys[2..3], true)[0].is_ok());
    assert_eq!(fx.m.stats().objects, 0);
    fx.check();
}

#[test]
fn remove_by_regex_matches_anywhere_skips_leased_and_refuses_bad_patterns() {
    let mut fx = three_nodes();
    for k in ["b1", "b2", "xb3", "c1"] {
        fx.put(A, 0, k, 100, 1).unwrap();
    }
    fx.m.get_replica_list(1, "b2").unwrap();
    let before = fx.m.stats().last_seq;
    let e = fx.m.remove_by_regex(2, "(", true).unwrap_err();
    assert_eq!(
        (e.code(), fx.m.stats().last_seq),
        (-600, before),
        "nothing changed"
    );
    assert_eq!(fx.m.remove_by_regex(2, "^b[0-9]$", false).unwrap(), 1);
    assert!(fx.m.exist("b2").unwrap(), "leased: skipped without force");
    assert_eq!(fx.m.remove_by_regex(3, "b[0-9]", true).unwrap(), 2);
    assert_eq!(fx.m.remove_by_regex(4, "^zzz$", true).unwrap(), 0);
    let left: Vec<String> = fx.m.list("", 10).into_iter().map(|o| o.key).collect();
    assert_eq!(left, ["c1"]);
    fx.check();
}

#[test]
fn remove_of_a_running_write_needs_force() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 0, "k", 100, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    assert_eq!(fx.m.remove(1, "k", false).unwrap_err().code(), -714);
    fx.m.remove(1, "k", true).unwrap();
    assert_eq!(fx.m.put_end(A, 2, "k").unwrap_err().code(), -704);
    fx.check();
}

#[test]
fn exist_size_list_and_stats() {
    let mut fx = three_nodes();
    fx.put(A, 0, "user/1", 100, 2).unwrap();
    fx.put(A, 0, "user/2", 200, 1).unwrap();
    fx.put(A, 0, "other", 300, 1).unwrap();
    fx.m.put_start(A, 0, "user/3", 50, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    assert!(fx.m.exist("user/1").unwrap());
    assert!(!fx.m.exist("missing").unwrap());
    assert!(
        !fx.m.exist("user/3").unwrap(),
        "a put in progress does not exist yet"
    );
    assert_eq!(fx.m.exist("").unwrap_err().code(), -600);
    let keys = vec!["user/1".to_string(), "nope".to_string()];
    let r = fx.m.batch_exist(&keys);
    assert_eq!(
        (r[0].clone().unwrap(), r[1].clone().unwrap()),
        (true, false)
    );
    assert_eq!(fx.m.get_size("user/2").unwrap(), 200);
    assert_eq!(fx.m.get_size("user/3").unwrap_err().code(), -703);
    assert_eq!(fx.m.get_size("nope").unwrap_err().code(), -704);
    let l = fx.m.list("user/", 10);
    assert_eq!(
        l.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(),
        ["user/1", "user/2"]
    );
    assert_eq!((l[0].size, l[0].replicas), (100, 2));
    assert_eq!(fx.m.list("", 1).len(), 1);
    let s = fx.m.stats();
    assert_eq!(
        (s.objects, s.pending_writes, s.nodes, s.mounts, s.clients),
        (3, 1, 3, 3, 3)
    );
    assert_eq!(s.bytes_capacity, 48 * MIB);
    assert_eq!(s.bytes_used, 128 * 2 + 256 + 320 + 64);
    assert!(s.fragmentation >= 0.0 && s.fragmentation < 1.0);
    let r = fx.m.batch_get_replica_list(1, &keys);
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), -704);
}

#[test]
fn replica_clear_drops_idle_objects_on_a_node_or_everywhere() {
    let mut fx = three_nodes();
    let two = fx.put(A, 0, "two", 1000, 2).unwrap();
    fx.put(A, 0, "one", 1000, 1).unwrap();
    fx.put(A, 0, "busy", 1000, 1).unwrap();
    let keys: Vec<String> = ["two", "one", "busy", "missing", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Within a lease TTL (100 ms) of its put an object is in use, as Mooncake's put leases it.
    assert!(fx.m.batch_replica_clear(99, &keys, "").is_empty());
    fx.m.get_replica_list(150, "busy").unwrap();
    let other = ["n1", "n2", "n3"]
        .into_iter()
        .find(|n| two.iter().all(|d| d.node != *n))
        .unwrap();
    assert!(
        fx.m.batch_replica_clear(200, &keys[..1], other).is_empty(),
        "no replica there"
    );
    let used = fx.used();
    assert_eq!(
        fx.m.batch_replica_clear(200, &keys[..1], &two[0].node),
        ["two"]
    );
    fx.check();
    assert!(fx.used() < used, "the dropped replica's space is free");
    let left = fx.m.get_replica_list(201, "two").unwrap().replicas;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].node, two[1].node);
    // "two" was just read (leased); "busy" is leased until 250.
    assert_eq!(fx.m.batch_replica_clear(240, &keys, ""), ["one"]);
    assert_eq!(fx.m.get_replica_list(241, "one").unwrap_err().code(), -704);
    assert_eq!(fx.m.batch_replica_clear(400, &keys, ""), ["two", "busy"]);
    assert_eq!(fx.m.stats().objects, 0);
    assert_eq!(fx.used(), 0);
    fx.check();
}
