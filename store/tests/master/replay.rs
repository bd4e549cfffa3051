//! Snapshots, replay of the operation log, and a restarted master.

use yuebing_store::master::{LogEntry, Master, PingResult, PutConfig, Record, Snapshot};

use super::*;

/// A scripted history touching every kind of record.
fn history(fx: &mut Fx, from: u64) {
    let t = from;
    fx.put(A, t, &format!("a{t}"), 1000, 2).unwrap();
    fx.put(B, t + 1, &format!("b{t}"), 5000, 1).unwrap();
    fx.m.put_start(
        C,
        t + 2,
        &format!("wip{t}"),
        300,
        &replicas(3),
        yuebing_store::Write::Put,
    )
    .unwrap();
    fx.m.put_start(
        A,
        t + 3,
        &format!("a{t}"),
        2000,
        &replicas(1),
        yuebing_store::Write::Upsert,
    )
    .unwrap();
    fx.m.put_end(A, t + 4, &format!("a{t}")).unwrap();
    let soft = PutConfig {
        soft_pin: true,
        ..PutConfig::default()
    };
    fx.m.put_start(
        A,
        t + 5,
        &format!("s{t}"),
        10,
        &soft,
        yuebing_store::Write::Put,
    )
    .unwrap();
    fx.m.put_end(A, t + 5, &format!("s{t}")).unwrap();
    fx.m.get_replica_list(t + 6, &format!("b{t}")).unwrap();
    fx.m.remove(t + 7, &format!("b{t}"), true).unwrap();
    let two = fx.put(A, t + 8, &format!("r{t}"), 100, 2).unwrap();
    let r = [format!("r{t}")];
    assert!(
        fx.m.batch_replica_clear(t + 8, &r, &two[0].node).is_empty(),
        "just put: as if leased"
    );
    fx.drain();
}

fn restored(fx: &Fx, snap: Option<Snapshot>, from: usize, now: u64) -> Master {
    Master::restore(
        fx.m.config().clone(),
        true,
        snap,
        fx.log[from..].to_vec(),
        now,
    )
    .unwrap()
}

#[test]
fn replaying_the_log_after_a_snapshot_rebuilds_the_same_state() {
    let mut fx = three_nodes();
    history(&mut fx, 10);
    let snap = fx.m.snapshot();
    let cut = fx.log.len();
    history(&mut fx, 100);
    // One of r10's two replicas dropped (a `ReplicasDrop`): the first node holding one.
    let r10 = ["r10".to_string()];
    let dropped = ["n1", "n2", "n3"]
        .iter()
        .any(|n| !fx.m.batch_replica_clear(150, &r10, n).is_empty());
    assert!(dropped);
    fx.drain();
    assert!(fx
        .log
        .iter()
        .any(|e| matches!(e.record, Record::ReplicasDrop { .. })));
    fx.check();
    fx.m.unmount(C, 200, MountId(3)).unwrap();
    ping_all(&mut fx, 300);
    fx.m.handle_timeout(700);
    fx.drain();
    assert!(fx
        .log
        .iter()
        .any(|e| matches!(e.record, Record::MountRemoved { .. })));
    let want = fx.m.snapshot();
    assert_eq!(restored(&fx, Some(snap.clone()), cut, 800).snapshot(), want);
    assert_eq!(
        restored(&fx, None, 0, 800).snapshot(),
        want,
        "from the very start"
    );
    // Entries the snapshot already holds are skipped.
    assert_eq!(restored(&fx, Some(snap), 0, 800).snapshot(), want);
    let sequence: Vec<u64> = fx.log.iter().map(|e| e.seq).collect();
    assert_eq!(sequence, (1..=fx.log.len() as u64).collect::<Vec<_>>());
}

#[test]
fn a_restored_master_serves_replicas_only_after_their_node_remounts() {
    let mut fx = three_nodes();
    fx.put(A, 0, "x", 100, 3).unwrap();
    fx.drain();
    let mut m = restored(&fx, None, 0, 50_000);
    let r = m.get_replica_list(50_001, "x");
    assert_eq!(r.unwrap_err().code(), -703, "no node has remounted yet");
    assert!(m.exist("x").unwrap());
    assert_eq!(m.ping(A, 50_001), PingResult::NeedRemount);
    m.remount(A, 50_002, &[spec("n1", base("n1"), 16 * MIB)])
        .unwrap();
    assert_eq!(m.ping(A, 50_003), PingResult::Ok);
    let r = m.get_replica_list(50_004, "x").unwrap();
    assert_eq!(r.replicas.len(), 1);
    assert_eq!(r.replicas[0].node, "n1");
    // B and C never come back: after the client TTL their space and replicas go.
    m.ping(A, 50_900);
    m.handle_timeout(51_000);
    m.check_invariants().unwrap();
    assert_eq!(m.snapshot().object_count(), 1);
    assert_eq!(m.stats().nodes, 1);
    assert_eq!(m.get_replica_list(51_001, "x").unwrap().replicas.len(), 1);
}

#[test]
fn timers_restored_from_the_log_resume_against_the_new_clock() {
    let mut fx = three_nodes();
    fx.m.put_start(A, 1_000, "k", 100, &replicas(1), yuebing_store::Write::Put)
        .unwrap();
    fx.drain();
    // Restarted 100 ms later: the put is still younger than the discard timeout (300 ms).
    let mut m = restored(&fx, None, 0, 1_100);
    assert_eq!(
        m.put_start(B, 1_299, "k", 100, &replicas(1), yuebing_store::Write::Put)
            .unwrap_err()
            .code(),
        -705
    );
    m.remount(B, 1_299, &[spec("n2", base("n2"), 16 * MIB)])
        .unwrap();
    m.put_start(B, 1_300, "k", 100, &replicas(1), yuebing_store::Write::Put)
        .expect("pre-empted after discard");
}

#[test]
fn a_gap_or_foreign_entry_is_corrupt_and_an_old_format_is_refused() {
    let mut fx = three_nodes();
    fx.put(A, 0, "x", 100, 1).unwrap();
    fx.drain();
    let mut log = fx.log.clone();
    log.remove(1);
    let e = Master::restore(cfg(), false, None, log, 10).unwrap_err();
    assert_eq!((e.name(), e.code()), ("Corrupt", -1500));
    let bad = LogEntry {
        seq: fx.log.len() as u64 + 1,
        epoch: 1,
        now: 5,
        record: Record::WriteEnd {
            key: "never-started".into(),
            old_until: 0,
        },
    };
    let mut log = fx.log.clone();
    log.push(bad);
    assert_eq!(
        Master::restore(cfg(), false, None, log, 10)
            .unwrap_err()
            .code(),
        -1500
    );
    let mut snap = fx.m.snapshot();
    snap.version = 99;
    let e = Master::restore(cfg(), false, Some(snap), Vec::new(), 10).unwrap_err();
    assert_eq!(e.code(), -300);
}
