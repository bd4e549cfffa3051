//! Eviction: watermark, no-space puts, pins, leases, and the rule that `exist` protects nothing.

use yuebing_store::master::{Effect, MasterConfig, PutConfig};

use super::*;

const K64: u64 = 64 * 1024;

/// One node of 1 MiB (16 objects of 64 KiB).
fn small(cfg: MasterConfig) -> Fx {
    let mut fx = Fx::new(cfg);
    fx.mount(A, 0, "n1", MIB);
    fx
}

fn fill(fx: &mut Fx, n: usize, from_t: u64) {
    for i in 0..n {
        fx.put(A, from_t + i as u64, &format!("k{i}"), K64, 1)
            .unwrap();
    }
}

#[test]
fn above_the_high_watermark_the_oldest_are_evicted() {
    let mut fx = small(cfg());
    fill(&mut fx, 14, 0);
    assert_eq!(
        fx.m.poll_timeout().map(|t| t > 14),
        Some(true),
        "87.5 %: nothing due"
    );
    fx.put(A, 20, "k14", K64, 1).unwrap();
    assert_eq!(
        fx.m.poll_timeout(),
        Some(20),
        "93.75 % > 90 %: eviction due now"
    );
    fx.m.handle_timeout(20);
    fx.check();
    // At least 5 % of 1 MiB: one 64 KiB object, the oldest.
    assert!(!fx.m.exist("k0").unwrap());
    assert!(fx.m.exist("k1").unwrap());
    assert!(fx.drain().contains(&Effect::Evicted {
        objects: 1,
        bytes: K64
    }));
    assert_eq!(fx.m.stats().evicted, 1);
}

#[test]
fn repeated_exist_does_not_keep_an_object_from_eviction_but_a_lease_does() {
    let mut fx = small(cfg());
    fill(&mut fx, 14, 0);
    for _ in 100..200 {
        assert!(fx.m.exist("k0").unwrap());
        assert!(fx.m.exist("k1").unwrap());
        fx.m.get_size("k0").unwrap();
    }
    fx.m.get_replica_list(200, "k1").unwrap();
    fx.put(A, 250, "k14", K64, 1).unwrap();
    fx.m.handle_timeout(250);
    assert!(
        !fx.m.exist("k0").unwrap(),
        "k0 is the oldest access whatever exist said"
    );
    assert!(fx.m.exist("k1").unwrap(), "k1 is leased until 300");
    // After its lease, k1 counts as accessed at 200: newer than k2..k13.
    fx.put(A, 400, "k15", K64, 1).unwrap();
    fx.m.handle_timeout(400);
    assert!(!fx.m.exist("k2").unwrap());
    assert!(fx.m.exist("k1").unwrap());
    fx.check();
}

#[test]
fn a_put_that_finds_no_space_evicts_in_the_same_call() {
    let mut fx = small(cfg());
    fill(&mut fx, 16, 0);
    assert_eq!(fx.m.stats().bytes_used, MIB);
    fx.put(A, 30, "new", K64, 1).expect("evicts, then places");
    assert!(!fx.m.exist("k0").unwrap());
    fx.check();
}

#[test]
fn pins_order_eviction_and_hard_pins_and_leases_are_never_evicted() {
    let mut fx = small(MasterConfig {
        eviction_ratio: 0.3,
        ..cfg()
    });
    let hard = PutConfig {
        hard_pin: true,
        ..PutConfig::default()
    };
    let soft = PutConfig {
        soft_pin: true,
        ..PutConfig::default()
    };
    fx.m.put_start(A, 0, "hard", K64, &hard, yuebing_store::Write::Put)
        .unwrap();
    fx.m.put_end(A, 0, "hard").unwrap();
    fx.m.put_start(A, 1, "soft", K64, &soft, yuebing_store::Write::Put)
        .unwrap();
    fx.m.put_end(A, 1, "soft").unwrap();
    fill(&mut fx, 13, 10);
    fx.m.handle_timeout(30);
    // 30 % of 1 MiB: five unpinned objects, oldest first; both pinned ones stay.
    for i in 0..5 {
        assert!(!fx.m.exist(&format!("k{i}")).unwrap(), "k{i}");
    }
    assert!(fx.m.exist("k5").unwrap());
    assert!(fx.m.exist("hard").unwrap() && fx.m.exist("soft").unwrap());
    // The soft pin lapses 10 s after its last access: then it is just the oldest object.
    ping_all(&mut fx, 20_000);
    fx.put(A, 20_000, "x1", 5 * K64, 1).unwrap();
    fx.m.handle_timeout(20_000);
    assert!(!fx.m.exist("soft").unwrap());
    assert!(fx.m.exist("hard").unwrap());
    fx.check();
}

#[test]
fn nothing_evictable_means_no_available_handle() {
    let mut fx = small(cfg());
    fill(&mut fx, 16, 0);
    for i in 0..16 {
        fx.m.get_replica_list(100, &format!("k{i}")).unwrap();
    }
    let e =
        fx.m.put_start(A, 150, "new", K64, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err();
    assert_eq!(e.code(), -200);
    assert_eq!(fx.m.stats().objects, 16, "leased objects were not evicted");
    fx.m.put_start(A, 200, "new", K64, &replicas(1), yuebing_store::Write::Put)
        .expect("leases over");
    fx.check();
}
