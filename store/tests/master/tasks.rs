//! Copy and move tasks: creation, take, end, failure, timeouts, leases, replay and snapshots.

use yuebing_store::master::{
    Master, MasterConfig, PingResult, PutConfig, Record, TaskId, TaskKind, TaskState,
};
use yuebing_store::Write;

use super::*;

/// Puts `key` (`size` bytes) with one replica on `node`.
fn put_on(fx: &mut Fx, now: u64, key: &str, size: u64, node: &str) {
    let cfg = PutConfig {
        preferred: vec![node.into()],
        ..PutConfig::default()
    };
    let d = fx.m.put_start(A, now, key, size, &cfg, Write::Put).unwrap();
    assert_eq!(d[0].node, node);
    fx.m.put_end(A, now, key).unwrap();
    fx.check();
}

/// The nodes holding `key`'s replicas (mounts 1, 2, 3 are n1, n2, n3, as the fixtures mount
/// them).
fn nodes_of(fx: &Fx, key: &str) -> Vec<String> {
    let mut nodes: Vec<String> =
        fx.m.placement(key)
            .unwrap_or_default()
            .into_iter()
            .map(|r| format!("n{}", r.mount.0))
            .collect();
    nodes.sort();
    nodes
}

fn targets(nodes: &[&str]) -> Vec<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_copy_task_runs_on_the_source_client_and_publishes_its_replicas() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    let before = fx.used();
    let id = fx.m.task_copy(2, "k", &targets(&["n2", "n3"])).unwrap();
    let info = fx.m.task_query(id).unwrap();
    assert_eq!(
        (info.state, info.client, info.key.as_str()),
        (TaskState::Pending, A, "k")
    );
    assert_eq!(info.created_ms, 2);
    assert_eq!(fx.m.ping(A, 3), PingResult::TasksWaiting);
    assert_eq!(fx.m.ping(B, 3), PingResult::Ok);
    assert!(fx.m.task_take(B, 3).unwrap().is_empty(), "not B's task");
    let works = fx.m.task_take(A, 4).unwrap();
    assert_eq!(works.len(), 1);
    let w = &works[0];
    assert_eq!(
        (w.id, w.source.node.as_str(), w.source.len),
        (id, "n1", 1000)
    );
    let mut dst: Vec<&str> = w.targets.iter().map(|t| t.node.as_str()).collect();
    dst.sort();
    assert_eq!(dst, ["n2", "n3"]);
    assert_eq!(fx.m.ping(A, 5), PingResult::Ok, "taken");
    assert!(fx.m.task_take(A, 5).unwrap().is_empty(), "taken once");
    assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Processing);
    assert_eq!(fx.used(), before + 2 * 1024);
    fx.check();
    fx.m.task_end(A, 6, id, None).unwrap();
    fx.check();
    let info = fx.m.task_query(id).unwrap();
    assert_eq!((info.state, info.updated_ms), (TaskState::Success, 6));
    assert_eq!(nodes_of(&fx, "k"), ["n1", "n2", "n3"]);
    assert_eq!(fx.used(), before + 2 * 1024);
    // A repeated end changes nothing.
    fx.m.task_end(A, 7, id, None).unwrap();
    assert_eq!(fx.m.task_query(id).unwrap().updated_ms, 6);
}

#[test]
fn a_move_task_drops_its_source_once_readers_are_done() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    let before = fx.used();
    fx.m.get_replica_list(2, "k").unwrap(); // a reader's lease, until 102
    let id = fx.m.task_move(3, "k", "n1", "n2").unwrap();
    let w = fx.m.task_take(A, 4).unwrap().remove(0);
    assert_eq!(w.targets.len(), 1);
    assert_eq!(w.targets[0].node, "n2");
    fx.m.task_end(A, 5, id, None).unwrap();
    fx.check();
    assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Success);
    assert_eq!(nodes_of(&fx, "k"), ["n2"]);
    assert_eq!(
        fx.used(),
        before + 1024,
        "the source is held for its reader"
    );
    ping_all(&mut fx, 200);
    fx.m.handle_timeout(200);
    fx.check();
    assert_eq!(fx.used(), before, "released after the reader's lease");
}

#[test]
fn bad_tasks_are_refused_and_change_nothing() {
    let mut fx = Fx::new(MasterConfig {
        max_pending_tasks: 1,
        ..cfg()
    });
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    put_on(&mut fx, 1, "k", 100, "n1");
    fx.drain();
    let seq = fx.m.last_seq();
    let code = |r: yuebing_store::Result<TaskId>| r.unwrap_err().code();
    assert_eq!(code(fx.m.task_copy(2, "nope", &targets(&["n2"]))), -704);
    assert_eq!(code(fx.m.task_copy(2, "k", &[])), -600);
    assert_eq!(code(fx.m.task_copy(2, "k", &targets(&["n2", "n2"]))), -600);
    assert_eq!(code(fx.m.task_copy(2, "k", &targets(&["n9"]))), -600);
    assert_eq!(code(fx.m.task_copy(2, "k", &targets(&["n1"]))), -600);
    assert_eq!(code(fx.m.task_copy(2, "", &targets(&["n2"]))), -600);
    assert_eq!(code(fx.m.task_move(2, "k", "n1", "n1")), -600);
    assert_eq!(code(fx.m.task_move(2, "k", "n2", "n1")), -600);
    assert_eq!(code(fx.m.task_move(2, "nope", "n1", "n2")), -704);
    assert_eq!(fx.m.task_query(TaskId(42)).unwrap_err().code(), -1400);
    assert_eq!(fx.m.last_seq(), seq, "nothing logged");
    fx.m.task_copy(3, "k", &targets(&["n2"])).unwrap();
    assert_eq!(code(fx.m.task_move(3, "k", "n1", "n2")), -1401);
    fx.check();
}

#[test]
fn ends_come_from_the_tasks_own_client_after_its_take() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 100, "n1");
    let id = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    assert_eq!(fx.m.task_end(A, 3, id, None).unwrap_err().code(), -600);
    fx.m.task_take(A, 3).unwrap();
    assert_eq!(fx.m.task_end(B, 4, id, None).unwrap_err().code(), -601);
    assert_eq!(
        fx.m.task_end(A, 4, TaskId(7), None).unwrap_err().code(),
        -1400
    );
    fx.m.task_end(A, 5, id, None).unwrap();
    fx.check();
}

#[test]
fn a_failed_copy_holds_its_space_until_late_bytes_cannot_land() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    let before = fx.used();
    let id = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    fx.m.task_take(A, 10).unwrap();
    fx.m.task_end(A, 20, id, Some((-3001, "peer gone".into())))
        .unwrap();
    let info = fx.m.task_query(id).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("peer gone"), "{}", info.message);
    assert_eq!(nodes_of(&fx, "k"), ["n1"]);
    assert_eq!(fx.used(), before + 1024, "held");
    ping_all(&mut fx, 2_900);
    fx.m.handle_timeout(2_900);
    assert_eq!(fx.used(), before + 1024, "before the release time");
    ping_all(&mut fx, 3_010);
    fx.m.handle_timeout(3_010);
    fx.check();
    assert_eq!(fx.used(), before, "released at start + put_release_ms");
}

#[test]
fn an_object_rewritten_or_removed_under_a_copy_fails_it() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    put_on(&mut fx, 1, "gone", 1000, "n1");
    let id = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    let gone = fx.m.task_copy(2, "gone", &targets(&["n3"])).unwrap();
    assert_eq!(fx.m.task_take(A, 3).unwrap().len(), 2);
    // The task's lease keeps an upsert out of the replicas being copied: it writes new ones.
    let d =
        fx.m.put_start(A, 4, "k", 1000, &replicas(1), Write::Upsert)
            .unwrap();
    fx.m.put_end(A, 5, "k").unwrap();
    assert_eq!(d.len(), 1);
    // And a removal needs force while the task runs.
    assert_eq!(fx.m.remove(6, "gone", false).unwrap_err().code(), -706);
    fx.m.remove(6, "gone", true).unwrap();
    let before = fx.used();
    fx.m.task_end(A, 7, id, None).unwrap();
    fx.m.task_end(A, 7, gone, None).unwrap();
    fx.check();
    for t in [id, gone] {
        let info = fx.m.task_query(t).unwrap();
        assert_eq!(info.state, TaskState::Failed, "{}", info.message);
    }
    assert_eq!(
        fx.used(),
        before - 2 * 1024,
        "the copies' space freed at once"
    );
    assert_eq!(fx.m.placement("k").unwrap().len(), 1);
}

#[test]
fn tasks_nobody_ends_fail_at_their_timeouts() {
    let mut fx = Fx::new(MasterConfig {
        pending_task_timeout_ms: 1_000,
        processing_task_timeout_ms: 2_000,
        ..cfg()
    });
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    put_on(&mut fx, 1, "k", 100, "n1");
    put_on(&mut fx, 1, "j", 100, "n1");
    let untaken = fx.m.task_copy(10, "k", &targets(&["n2"])).unwrap();
    assert_eq!(fx.m.poll_timeout(), Some(1_000), "the clients' TTL first");
    fx.m.ping(A, 500);
    fx.m.ping(B, 500);
    assert_eq!(fx.m.poll_timeout(), Some(1_010));
    fx.m.handle_timeout(1_010);
    let info = fx.m.task_query(untaken).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("not taken"), "{}", info.message);
    let running = fx.m.task_copy(1_020, "j", &targets(&["n2"])).unwrap();
    fx.m.ping(A, 1_030);
    fx.m.ping(B, 1_030);
    fx.m.task_take(A, 1_030).unwrap();
    // The task's lease keeps the object from a removal without force.
    assert_eq!(fx.m.remove(1_040, "j", false).unwrap_err().code(), -706);
    for t in [1_500, 2_000, 2_500, 3_000] {
        fx.m.ping(A, t);
        fx.m.ping(B, t);
    }
    fx.m.handle_timeout(3_030);
    let info = fx.m.task_query(running).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("not ended"), "{}", info.message);
    fx.check();
    // Its end after that is answered, and changes nothing.
    fx.m.task_end(A, 3_040, running, None).unwrap();
    assert_eq!(fx.m.task_query(running).unwrap().state, TaskState::Failed);
    // The lease ended with the task (within a reader's TTL).
    fx.m.remove(3_200, "j", false).unwrap();
    fx.check();
}

#[test]
fn the_tasks_of_a_client_that_expires_fail() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 100, "n1");
    put_on(&mut fx, 1, "j", 100, "n2");
    let a = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    fx.m.task_take(A, 3).unwrap();
    // j's only replica is B's: B runs it.
    let b = fx.m.task_copy(4, "j", &targets(&["n3"])).unwrap();
    assert_eq!(fx.m.task_query(b).unwrap().client, B);
    fx.m.ping(B, 900);
    fx.m.ping(C, 900);
    fx.m.handle_timeout(1_001);
    fx.check();
    let info = fx.m.task_query(a).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("expired"), "{}", info.message);
    assert_eq!(fx.m.task_query(b).unwrap().state, TaskState::Pending);
}

#[test]
fn a_full_target_is_retried_then_fails() {
    let mut fx = Fx::new(MasterConfig {
        max_task_retries: 2,
        ..cfg()
    });
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", MIB);
    put_on(&mut fx, 1, "big", 2 * MIB, "n1");
    let id = fx.m.task_copy(2, "big", &targets(&["n2"])).unwrap();
    for t in 3..5 {
        assert!(fx.m.task_take(A, t).unwrap().is_empty());
        assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Pending);
    }
    assert!(fx.m.task_take(A, 5).unwrap().is_empty());
    let info = fx.m.task_query(id).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("no room"), "{}", info.message);
    fx.check();
}

#[test]
fn finished_tasks_are_forgotten_past_the_limit() {
    let mut fx = Fx::new(MasterConfig {
        max_finished_tasks: 2,
        ..cfg()
    });
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    let mut ids = Vec::new();
    for i in 0..3 {
        let key = format!("k{i}");
        put_on(&mut fx, 1, &key, 100, "n1");
        let id = fx.m.task_copy(2, &key, &targets(&["n2"])).unwrap();
        fx.m.task_take(A, 3).unwrap();
        fx.m.task_end(A, 4, id, None).unwrap();
        ids.push(id);
    }
    assert_eq!(fx.m.task_query(ids[0]).unwrap_err().code(), -1400);
    assert!(fx.m.task_query(ids[1]).is_ok() && fx.m.task_query(ids[2]).is_ok());
}

#[test]
fn tasks_survive_replay_and_snapshots_in_every_state() {
    let mut fx = three_nodes();
    for k in ["done", "failed", "running", "waiting"] {
        put_on(&mut fx, 1, k, 500, "n1");
    }
    let done = fx.m.task_copy(2, "done", &targets(&["n2", "n3"])).unwrap();
    let failed = fx.m.task_move(2, "failed", "n1", "n2").unwrap();
    let running = fx.m.task_move(2, "running", "n1", "n3").unwrap();
    fx.m.task_take(A, 3).unwrap();
    fx.m.task_end(A, 4, done, None).unwrap();
    fx.m.task_end(A, 4, failed, Some((-1, "x".into()))).unwrap();
    let snap = fx.m.snapshot();
    let cut = {
        fx.drain();
        fx.log.len()
    };
    let waiting = fx.m.task_copy(5, "waiting", &targets(&["n3"])).unwrap();
    fx.drain();
    for kind in ["TaskCreate", "TaskStart", "TaskEnd"] {
        assert!(
            fx.log
                .iter()
                .any(|e| format!("{:?}", e.record).starts_with(kind)),
            "{kind}"
        );
    }
    let want = fx.m.snapshot();
    let from_log = Master::restore(cfg(), true, None, fx.log.clone(), 10).unwrap();
    let from_snap = Master::restore(cfg(), true, Some(snap), fx.log[cut..].to_vec(), 10).unwrap();
    for m in [from_log, from_snap] {
        assert_eq!(m.snapshot(), want);
        m.check_invariants().unwrap();
        let state = |id| m.task_query(id).unwrap().state;
        assert_eq!(state(done), TaskState::Success);
        assert_eq!(state(failed), TaskState::Failed);
        assert_eq!(state(running), TaskState::Processing);
        assert_eq!(state(waiting), TaskState::Pending);
        assert_eq!(
            m.task_query(running).unwrap().kind,
            TaskKind::Move {
                source: "n1".into(),
                target: "n3".into()
            }
        );
    }
    // The restarted master keeps the running task's object in place: its lease is renewed.
    let mut m = Master::restore(cfg(), true, None, fx.log.clone(), 10).unwrap();
    assert_eq!(m.remove(11, "running", false).unwrap_err().code(), -706);
    // Task ids are the records' positions: never handed out twice, also after a restart.
    let mut ids = vec![done, failed, running, waiting];
    m.remount(A, 12, &[spec("n1", base("n1"), 16 * MIB)])
        .unwrap();
    m.remount(B, 12, &[spec("n2", base("n2"), 16 * MIB)])
        .unwrap();
    ids.push(m.task_copy(13, "failed", &targets(&["n2"])).unwrap());
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5);
    assert!(matches!(
        fx.log.last().unwrap().record,
        Record::TaskCreate { .. }
    ));
}
