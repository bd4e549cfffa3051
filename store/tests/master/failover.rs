//! A master that restarted or was promoted does not know the read leases granted before it
//! (soft state): for one lease TTL no space freed by a remove, an eviction or an upsert is
//! reused, and no upsert writes in place, so a reader still transferring under an old lease
//! never sees reused bytes. A promoted standby's entries carry its new epoch.

use yuebing_store::master::{Master, MasterConfig, Record};

use super::*;

/// One node with room for exactly one object of `MIB` bytes.
fn one_slot() -> Fx {
    let mut fx = Fx::new(cfg());
    fx.mount(A, 0, "n1", MIB);
    fx
}

/// The master rebuilt from `fx`'s log at `now`, its node (of `len` bytes) remounted.
fn restarted(fx: &Fx, now: u64, len: u64) -> Master {
    let mut m = Master::restore(fx.m.config().clone(), true, None, fx.log.clone(), now).unwrap();
    m.remount(A, now, &[spec("n1", base("n1"), len)]).unwrap();
    m
}

fn put(m: &mut Master, now: u64, key: &str) -> yuebing_store::Result<()> {
    m.put_start(A, now, key, MIB, &replicas(1), yuebing_store::Write::Put)?;
    m.put_end(A, now, key)
}

#[test]
fn after_a_restart_removed_space_is_reused_only_one_lease_ttl_later() {
    let mut fx = one_slot();
    fx.put(A, 10, "old", MIB, 1).unwrap();
    fx.drain();
    let t = 5_000;
    let ttl = cfg().lease_ttl_ms;
    let mut m = restarted(&fx, t, MIB);
    // No lease is known, so the remove is allowed; its space is held.
    m.remove(t + 1, "old", false).unwrap();
    assert_eq!(put(&mut m, t + 2, "new").unwrap_err().code(), -200);
    m.ping(A, t + ttl);
    m.handle_timeout(t + ttl);
    put(&mut m, t + ttl + 1, "new").expect("the space is free one lease TTL after the restart");
    m.check_invariants().unwrap();
}

#[test]
fn after_a_restart_an_upsert_is_not_in_place_and_holds_the_old_space() {
    let mut fx = Fx::new(cfg());
    fx.mount(A, 0, "n1", 2 * MIB);
    fx.put(A, 10, "a", MIB, 1).unwrap();
    fx.drain();
    let t = 9_000;
    let mut m = restarted(&fx, t, 2 * MIB);
    // Same size, no lease known: still not in place, new replicas while "a"'s stay held.
    let before = m.placement("a").unwrap();
    let descs = m
        .put_start(
            A,
            t + 1,
            "a",
            MIB,
            &replicas(1),
            yuebing_store::Write::Upsert,
        )
        .unwrap();
    assert_eq!(descs.len(), 1);
    m.put_end(A, t + 1, "a").unwrap();
    assert_ne!(m.placement("a").unwrap(), before, "not written in place");
    // Both slots are taken now (the new "a" and the held old one): a third put fails.
    assert_eq!(put(&mut m, t + 2, "b").unwrap_err().code(), -200);
    let log: Vec<_> = std::iter::from_fn(|| m.poll_effect()).collect();
    assert!(log.iter().any(|e| matches!(e,
        yuebing_store::master::Effect::Append(LogEntry { record: Record::WriteEnd { old_until, .. }, .. })
            if *old_until == t + cfg().lease_ttl_ms)), "{log:?}");
}

#[test]
fn a_promoted_standby_takes_the_new_epoch_and_holds_freed_space() {
    let mut fx = one_slot();
    fx.put(A, 10, "k", MIB, 1).unwrap();
    fx.drain();
    // A hot standby applied the leader's log as it came.
    let mut standby = Master::new(fx.m.config().clone(), true);
    for e in fx.log.clone() {
        standby.replay(e).unwrap();
    }
    let old = standby.epoch();
    assert_eq!(
        standby.promote(old, 2_000).unwrap_err().code(),
        -600,
        "an epoch must advance"
    );
    standby.promote(old + 5, 2_000).unwrap();
    assert_eq!(standby.epoch(), old + 5);
    standby
        .remount(A, 2_000, &[spec("n1", base("n1"), MIB)])
        .unwrap();
    standby.remove(2_001, "k", false).unwrap();
    let entries: Vec<LogEntry> = std::iter::from_fn(|| standby.poll_effect())
        .filter_map(|e| match e {
            yuebing_store::master::Effect::Append(entry) => Some(entry),
            _ => None,
        })
        .collect();
    assert!(entries.iter().all(|e| e.epoch == old + 5), "{entries:?}");
    let hold = entries.iter().find_map(|e| match &e.record {
        Record::Remove { hold_until, .. } => Some(*hold_until),
        _ => None,
    });
    assert_eq!(hold, Some(2_000 + cfg().lease_ttl_ms));
    assert_eq!(put(&mut standby, 2_002, "k2").unwrap_err().code(), -200);
    // A standby of the new leader replays the same records and holds the same space.
    let mut next = Master::new(MasterConfig { ..cfg() }, false);
    for e in fx.log.iter().cloned().chain(entries) {
        next.replay(e).unwrap();
    }
    assert_eq!(next.snapshot(), standby.snapshot());
}

#[test]
fn within_the_window_a_put_evicts_nothing_after_it_evicts_as_usual() {
    let mut fx = one_slot();
    fx.put(A, 10, "a", MIB, 1).unwrap();
    fx.drain();
    let t = 7_000;
    let ttl = cfg().lease_ttl_ms;
    let mut m = restarted(&fx, t, MIB);
    // Evicting "a" would only hold its space until the window ends: nothing is evicted.
    assert_eq!(put(&mut m, t + 1, "b").unwrap_err().code(), -200);
    assert!(m.exist("a").unwrap(), "not evicted within the window");
    m.ping(A, t + ttl);
    put(&mut m, t + ttl, "b").expect("after the window the put evicts \"a\"");
    assert!(!m.exist("a").unwrap());
    m.check_invariants().unwrap();
}

#[test]
fn held_space_does_not_count_toward_the_watermark() {
    // 20 slots of 1 MiB, 19 used: above the 90 % watermark.
    let mut fx = Fx::new(cfg());
    fx.mount(A, 0, "n1", 20 * MIB);
    for i in 0..19 {
        fx.put(A, 10, &format!("k{i}"), MIB, 1).unwrap();
    }
    fx.drain();
    let t = 9_000;
    let mut m = restarted(&fx, t, 20 * MIB);
    // Each round of timeouts within the window: one eviction (5 %) brings the live objects to
    // the watermark; their held space must not make the next rounds evict again.
    for step in 1..=10 {
        m.handle_timeout(t + step);
    }
    let left = (0..19)
        .filter(|i| m.exist(&format!("k{i}")).unwrap())
        .count();
    assert_eq!(left, 18, "one eviction, not one per round");
}

#[test]
fn space_held_before_a_restart_is_released_no_earlier_than_the_window_end() {
    let mut fx = one_slot();
    fx.put(A, 10, "x", MIB, 1).unwrap();
    fx.m.get_replica_list(100, "x").unwrap();
    // Forced while leased: held until the lease ends (200), by the old master's clock.
    fx.m.remove(150, "x", true).unwrap();
    fx.drain();
    let t = 180;
    let ttl = cfg().lease_ttl_ms;
    let mut m = restarted(&fx, t, MIB);
    assert_eq!(
        m.poll_timeout(),
        Some(t + ttl),
        "not before the window's end"
    );
    m.handle_timeout(250);
    assert_eq!(
        put(&mut m, 251, "y").unwrap_err().code(),
        -200,
        "still held"
    );
    m.ping(A, t + ttl);
    m.handle_timeout(t + ttl);
    put(&mut m, t + ttl + 1, "y").unwrap();
}

#[test]
fn a_range_removed_while_read_is_not_mounted_again_until_its_leases_end() {
    let mut fx = one_slot();
    fx.put(A, 10, "x", MIB, 1).unwrap();
    fx.m.get_replica_list(950, "x").unwrap(); // leased until 1_050
    fx.m.handle_timeout(1_000); // A missed its pings: its range goes, "x" with it
    assert!(!fx.m.exist("x").unwrap());
    let again = [spec("n1", base("n1"), MIB)];
    // A reader may still read "x" there: new objects must not be placed over it yet.
    assert_eq!(fx.m.remount(A, 1_001, &again).unwrap_err().code(), -706);
    assert_eq!(fx.m.mount(B, 1_002, &again).unwrap_err().code(), -706);
    fx.m.remount(A, 1_050, &again).expect("the lease has ended");
    fx.check();
}
