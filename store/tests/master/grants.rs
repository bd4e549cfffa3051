//! Space granted ahead of puts: a put written into a grant is published in one call; what it
//! may name is checked; grants are counted as used, survive replay and snapshots, and go with
//! their client's lease.

use yuebing_store::master::{GrantDesc, PingResult, PutConfig};
use yuebing_store::Write;

use super::*;

const NONE: &PutConfig = &PutConfig {
    replica_num: 1,
    preferred: Vec::new(),
    soft_pin: false,
    hard_pin: false,
};

fn grant(fx: &mut Fx, client: ClientId, now: u64, len: u64, node: &str) -> GrantDesc {
    let g = fx.m.grant(client, now, len, &[node.to_string()]).unwrap();
    fx.check();
    g
}

#[test]
fn a_put_in_a_grant_is_published_in_one_call_and_its_space_counted_throughout() {
    let mut fx = three_nodes();
    let g = grant(&mut fx, A, 1, 4000, "n1");
    assert_eq!((g.node.as_str(), g.len, g.alignment), ("n1", 4032, 64));
    assert_eq!(fx.used(), 4032, "a grant is used space");
    fx.m.put_granted(A, 2, &gp("k", 100, &[(g.id, g.addr)]), NONE, Write::Put)
        .unwrap();
    fx.check();
    let r = fx.m.get_replica_list(3, "k").unwrap();
    assert_eq!((r.size, r.replicas[0].addr), (100, g.addr));
    assert_eq!(r.replicas[0].node, "n1");
    assert_eq!(fx.used(), 4032, "the object's space came out of the grant");
    fx.m.put_granted(
        A,
        4,
        &gp("k2", 64, &[(g.id, g.addr + 128)]),
        NONE,
        Write::Put,
    )
    .unwrap();
    fx.m.grant_end(A, 5, g.id, false).unwrap();
    fx.check();
    assert_eq!(fx.used(), 128 + 64, "the rest went back");
    fx.m.grant_end(A, 6, g.id, false).unwrap();
    fx.m.remove(7, "k2", false).unwrap();
    assert_eq!(fx.used(), 128);
    // A grant a write into failed ends dirty: its rest is held until the release time.
    let g = grant(&mut fx, A, 8, 4096, "n2");
    fx.m.grant_end(A, 9, g.id, true).unwrap();
    assert_eq!(fx.used(), 128 + 4096);
    ping_all(&mut fx, 900);
    fx.m.handle_timeout(900);
    ping_all(&mut fx, 1_800);
    ping_all(&mut fx, 2_700);
    ping_all(&mut fx, 3_009);
    fx.m.handle_timeout(3_009);
    assert_eq!(fx.used(), 128, "released at put_release_ms");
    fx.check();
}

#[test]
fn a_publication_outside_what_is_left_of_the_clients_grant_is_refused_and_changes_nothing() {
    let mut fx = three_nodes();
    let g = grant(&mut fx, A, 1, 4096, "n1");
    let other = grant(&mut fx, A, 1, 4096, "n2");
    fx.m.put_granted(A, 2, &gp("k", 100, &[(g.id, g.addr)]), NONE, Write::Put)
        .unwrap();
    fx.drain();
    let seq = fx.m.last_seq();
    let put = |fx: &mut Fx, client, key: &str, size, parts: &[(GrantId, u64)]| {
        fx.m.put_granted(client, 3, &gp(key, size, parts), NONE, Write::Put)
            .unwrap_err()
    };
    type Case = (
        &'static str,
        ClientId,
        u64,
        Vec<(GrantId, u64)>,
        (&'static str, i32),
    );
    let cases: [Case; 9] = [
        (
            "taken",
            A,
            64,
            vec![(g.id, g.addr + 64)],
            ("InvalidWrite", -700),
        ),
        (
            "unaligned",
            A,
            64,
            vec![(g.id, g.addr + 129)],
            ("InvalidWrite", -700),
        ),
        (
            "past its end",
            A,
            128,
            vec![(g.id, g.addr + 4032)],
            ("InvalidWrite", -700),
        ),
        (
            "before it",
            A,
            64,
            vec![(g.id, g.addr - 64)],
            ("InvalidWrite", -700),
        ),
        (
            "in the other grant's range",
            A,
            64,
            vec![(g.id, other.addr)],
            ("InvalidWrite", -700),
        ),
        (
            "another client's",
            B,
            64,
            vec![(g.id, g.addr + 128)],
            ("IllegalClient", -601),
        ),
        (
            "an unknown grant",
            A,
            64,
            vec![(GrantId(99), g.addr)],
            ("InvalidWrite", -700),
        ),
        ("no replica", A, 64, vec![], ("InvalidParams", -600)),
        (
            "one grant twice",
            A,
            64,
            vec![(g.id, g.addr + 128), (g.id, g.addr + 256)],
            ("InvalidWrite", -700),
        ),
    ];
    for (what, client, size, parts, want) in cases {
        let e = put(&mut fx, client, "new", size, &parts);
        assert_eq!((e.name(), e.code()), want, "{what}: {e}");
    }
    let e = put(&mut fx, A, "k", 64, &[(g.id, g.addr + 128)]);
    assert_eq!(e.name(), "ObjectAlreadyExists");
    assert_eq!(fx.m.last_seq(), seq, "refusals change nothing");
    assert!(!fx.m.exist("new").unwrap());
    fx.check();
}

#[test]
fn grants_are_refused_past_the_clients_limit_and_to_clients_not_live_here() {
    let mut fx = Fx::new(MasterConfig {
        grant_max_bytes: 8192,
        ..cfg()
    });
    fx.mount(A, 0, "n1", MIB);
    grant(&mut fx, A, 1, 4096, "n1");
    grant(&mut fx, A, 1, 4096, "n1");
    let seq = fx.m.last_seq();
    let codes = |r: yuebing_store::Result<GrantDesc>| {
        let e = r.unwrap_err();
        (e.name(), e.code())
    };
    assert_eq!(
        codes(fx.m.grant(A, 2, 64, &[])),
        ("NoAvailableHandle", -200)
    );
    assert_eq!(codes(fx.m.grant(A, 2, 0, &[])), ("InvalidParams", -600));
    assert_eq!(codes(fx.m.grant(A, 2, 8193, &[])), ("InvalidParams", -600));
    assert_eq!(codes(fx.m.grant(B, 2, 64, &[])), ("IllegalClient", -601));
    assert_eq!(fx.m.last_seq(), seq);
    let mut off = Fx::new(MasterConfig {
        grant_max_bytes: 0,
        ..cfg()
    });
    off.mount(A, 0, "n1", MIB);
    assert_eq!(codes(off.m.grant(A, 1, 64, &[])), ("InvalidParams", -600));
}

/// A client whose lease on the cluster ends may still be writing into its grants: what is
/// left of them stays used until the write release time, then is freed.
#[test]
fn grants_end_with_their_clients_lease_and_their_space_is_held_until_the_release_time() {
    let mut fx = three_nodes();
    let g = grant(&mut fx, A, 0, 4096, "n2");
    fx.m.put_granted(A, 1, &gp("k", 64, &[(g.id, g.addr)]), NONE, Write::Put)
        .unwrap();
    // A (node n1) goes silent and expires at 1_000; B and C ping.
    for now in [500, 1_000] {
        fx.m.ping(B, now);
        fx.m.ping(C, now);
    }
    fx.m.handle_timeout(1_000);
    fx.check();
    assert!(fx.m.exist("k").unwrap(), "its published object stays on n2");
    assert_eq!(fx.used(), 4096, "the rest is held");
    let e =
        fx.m.put_granted(
            A,
            1_001,
            &gp("late", 64, &[(g.id, g.addr + 64)]),
            NONE,
            Write::Put,
        )
        .unwrap_err();
    assert_eq!(e.name(), "InvalidWrite", "{e}");
    for now in [1_500, 2_000, 2_500, 3_000, 3_500, 4_000] {
        fx.m.ping(B, now);
        fx.m.ping(C, now);
    }
    fx.m.handle_timeout(4_000);
    assert_eq!(fx.used(), 64, "released at put_release_ms");
    fx.check();
}

/// A grant on store space that goes (its node's client expired) goes with it; the range
/// cannot be mounted again while the grant's holder may still be writing there.
#[test]
fn a_grant_goes_with_its_store_space_which_stays_unmountable_until_the_release_time() {
    let mut fx = three_nodes();
    let g = grant(&mut fx, B, 0, 4096, "n1");
    for now in [500, 1_000] {
        fx.m.ping(B, now);
        fx.m.ping(C, now);
    }
    fx.m.handle_timeout(1_000);
    fx.check();
    let e =
        fx.m.put_granted(B, 1_001, &gp("k", 64, &[(g.id, g.addr)]), NONE, Write::Put)
            .unwrap_err();
    assert_eq!(e.name(), "InvalidWrite", "{e}");
    assert_eq!(fx.m.ping(A, 1_002), PingResult::NeedRemount);
    let e =
        fx.m.remount(A, 1_002, &[spec("n1", base("n1"), 16 * MIB)])
            .unwrap_err();
    assert_eq!(e.name(), "ObjectHasLease", "{e}");
    fx.m.remount(A, 4_000, &[spec("n1", base("n1"), 16 * MIB)])
        .unwrap();
    fx.check();
}

/// An upsert through a grant replaces the object in new space; a reader's lease on the old
/// version holds its space until the lease ends.
#[test]
fn an_upsert_through_a_grant_holds_the_leased_old_version() {
    let mut fx = three_nodes();
    fx.put(A, 0, "k", 100, 1).unwrap();
    let old = fx.m.get_replica_list(10, "k").unwrap();
    let g = grant(&mut fx, A, 10, 4096, "n3");
    let e =
        fx.m.put_granted(A, 11, &gp("k", 100, &[(g.id, g.addr)]), NONE, Write::Put)
            .unwrap_err();
    assert_eq!(e.name(), "ObjectAlreadyExists");
    fx.m.put_granted(A, 11, &gp("k", 100, &[(g.id, g.addr)]), NONE, Write::Upsert)
        .unwrap();
    fx.check();
    let now = fx.m.get_replica_list(12, "k").unwrap();
    assert_eq!(now.replicas[0].addr, g.addr);
    assert_ne!(old.replicas[0].addr, g.addr);
    assert_eq!(
        fx.used(),
        4096 + 128,
        "the old version is held for its reader"
    );
    ping_all(&mut fx, 200);
    fx.m.handle_timeout(200);
    assert_eq!(fx.used(), 4096, "freed after the lease");
    fx.check();
}

/// Grants are durable state: replaying the log, or a snapshot plus the rest of the log,
/// rebuilds them; after a restart their client must come back within its TTL.
#[test]
fn grants_survive_replay_and_snapshots_and_end_if_their_client_does_not_return() {
    let mut fx = three_nodes();
    let g = grant(&mut fx, A, 1, 4096, "n2");
    fx.m.put_granted(A, 2, &gp("k", 100, &[(g.id, g.addr)]), NONE, Write::Put)
        .unwrap();
    fx.drain();
    let snap = fx.m.snapshot();
    let at = fx.log.len();
    let g2 = grant(&mut fx, A, 3, 8192, "n3");
    fx.m.put_granted(
        A,
        4,
        &gp("k2", 100, &[(g2.id, g2.addr + 64)]),
        NONE,
        Write::Put,
    )
    .unwrap();
    fx.m.grant_end(A, 5, g.id, false).unwrap();
    fx.drain();
    let cfg = fx.m.config().clone();
    let replayed = Master::restore(cfg.clone(), true, None, fx.log.clone(), 10).unwrap();
    assert_eq!(replayed.snapshot(), fx.m.snapshot());
    let mut restored = Master::restore(cfg, true, Some(snap), fx.log[at..].to_vec(), 10).unwrap();
    assert_eq!(restored.snapshot(), fx.m.snapshot());
    restored.check_invariants().unwrap();
    assert_eq!(restored.ping(A, 11), PingResult::NeedRemount);
    // B and C come back (their space takes replicas again); A does not remount, but within
    // its TTL what is left of its grant g2 on n3 is still its own.
    for (c, node) in [(B, "n2"), (C, "n3")] {
        restored
            .remount(c, 12, &[spec(node, base(node), 16 * MIB)])
            .unwrap();
    }
    restored
        .put_granted(A, 13, &gp("k3", 64, &[(g2.id, g2.addr)]), NONE, Write::Put)
        .unwrap();
    let e = restored
        .put_granted(
            A,
            13,
            &gp("k4", 64, &[(g.id, g.addr + 128)]),
            NONE,
            Write::Put,
        )
        .unwrap_err();
    assert_eq!(e.name(), "InvalidWrite", "g ended before the restart: {e}");
    // A's TTL runs out: its grant ends, what is left of it held (k on n2: 128 bytes; g2 on
    // n3: 8192, with k2 and k3 in it).
    restored.handle_timeout(1_010);
    restored.check_invariants().unwrap();
    assert_eq!(restored.stats().bytes_used, 128 + 8192);
    for now in [1_900, 2_800, 3_700, 4_010] {
        restored.ping(B, now);
        restored.ping(C, now);
    }
    restored.handle_timeout(4_010);
    assert_eq!(restored.stats().bytes_used, 128 + 128 + 64);
    restored.check_invariants().unwrap();
}
