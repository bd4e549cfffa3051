//! Copy and move tasks: creation, take, end, failure, timeouts, leases, replay and snapshots.

use yuebing_store::master::{
    Master, MasterConfig, MountId, PingResult, PutConfig, Record, TaskId, TaskKind, TaskState,
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
    let code = |r: yuebing_store::Result<TaskId>| r.unwrap_err().code();
    assert_eq!(code(fx.m.task_copy(2, "nope", &targets(&["n2"]))), -704);
    assert_eq!(code(fx.m.task_copy(2, "k", &[])), -600);
    assert_eq!(code(fx.m.task_copy(2, "k", &targets(&["n2", "n2"]))), -600);
    assert_eq!(code(fx.m.task_copy(2, "k", &targets(&["n9"]))), -600);
    assert_eq!(code(fx.m.task_copy(2, "", &targets(&["n2"]))), -600);
    assert_eq!(code(fx.m.task_move(2, "k", "n1", "n1")), -600);
    assert_eq!(code(fx.m.task_move(2, "k", "n2", "n1")), -600);
    assert_eq!(code(fx.m.task_move(2, "nope", "n1", "n2")), -704);
    fx.mount(C, 0, "n3", 16 * MIB);
    put_on(&mut fx, 1, "two", 100, "n3");
    fx.m.task_copy(2, "two", &targets(&["n1"])).unwrap();
    fx.drain();
    let seq = fx.m.last_seq();
    assert_eq!(
        code(fx.m.task_move(2, "two", "n1", "n3")),
        -600,
        "n3 holds one"
    );
    assert_eq!(fx.m.task_query(TaskId(42)).unwrap_err().code(), -1400);
    assert_eq!(fx.m.last_seq(), seq, "nothing logged");
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
    // A processing timeout (2 s) inside the release time (3 s): the release time counts.
    let mut fx = Fx::new(MasterConfig {
        processing_task_timeout_ms: 2_000,
        ..cfg()
    });
    for (c, n) in [(A, "n1"), (B, "n2"), (C, "n3")] {
        fx.mount(c, 0, n, 16 * MIB);
    }
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
    // The running task keeps an upsert out of the replicas being copied: it writes new ones.
    let d =
        fx.m.put_start(A, 4, "k", 1000, &replicas(1), Write::Upsert)
            .unwrap();
    fx.m.put_end(A, 5, "k").unwrap();
    assert_eq!(d.len(), 1);
    // And a removal needs force while the task runs.
    assert_eq!(fx.m.remove(6, "gone", false).unwrap_err().code(), -708);
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
    // The running task keeps the object from a removal without force.
    assert_eq!(fx.m.remove(1_040, "j", false).unwrap_err().code(), -708);
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
    // Its protection ended with the task.
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
    // The restarted master keeps the running task's object in place (the task is durable).
    let mut m = Master::restore(cfg(), true, None, fx.log.clone(), 10).unwrap();
    assert_eq!(m.remove(11, "running", false).unwrap_err().code(), -708);
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

#[test]
fn a_copy_to_nodes_holding_replicas_already_copies_only_to_the_others() {
    let mut fx = three_nodes();
    let cfg = PutConfig {
        replica_num: 2,
        preferred: targets(&["n1", "n2"]),
        ..PutConfig::default()
    };
    fx.m.put_start(A, 1, "two", 1000, &cfg, Write::Put).unwrap();
    fx.m.put_end(A, 1, "two").unwrap();
    let before = fx.used();
    // Every target holds one: it succeeds at the take, without a copy (as Mooncake's does).
    let none = fx.m.task_copy(2, "two", &targets(&["n2"])).unwrap();
    let some = fx.m.task_copy(2, "two", &targets(&["n2", "n3"])).unwrap();
    // A second copy to n3 races the first: whichever ends last keeps no second replica there.
    let race = fx.m.task_copy(2, "two", &targets(&["n3"])).unwrap();
    // Each runs on the client of a replica chosen at random: A's or B's.
    let mut works = fx.m.task_take(A, 3).unwrap();
    works.extend(fx.m.task_take(B, 3).unwrap());
    assert_eq!(fx.m.task_query(none).unwrap().state, TaskState::Success);
    assert_eq!(works.len(), 2, "{works:?}");
    assert!(works
        .iter()
        .all(|w| w.targets.len() == 1 && w.targets[0].node == "n3"));
    for id in [some, race] {
        let client = fx.m.task_query(id).unwrap().client;
        fx.m.task_end(client, 4, id, None).unwrap();
    }
    fx.check();
    for id in [some, race] {
        assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Success);
    }
    assert_eq!(nodes_of(&fx, "two"), ["n1", "n2", "n3"]);
    assert_eq!(fx.used(), before + 1024, "the loser's space is free again");
}

/// Copies `key` (on n1) to n2 and ends it: the object then has replicas on n1 and n2.
fn copy_to_n2(fx: &mut Fx, now: u64, key: &str) {
    let id = fx.m.task_copy(now, key, &targets(&["n2"])).unwrap();
    let client = fx.m.task_query(id).unwrap().client;
    fx.m.task_take(client, now).unwrap();
    fx.m.task_end(client, now, id, None).unwrap();
}

#[test]
fn a_move_into_a_range_being_unmounted_fails_and_keeps_its_source() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    let id = fx.m.task_move(2, "k", "n1", "n2").unwrap();
    assert_eq!(fx.m.task_take(A, 3).unwrap().len(), 1);
    // n2 starts leaving while A copies: the new replica would leave with it.
    fx.m.unmount(B, 4, MountId(2)).unwrap();
    fx.m.task_end(A, 5, id, None).unwrap();
    fx.check();
    let info = fx.m.task_query(id).unwrap();
    assert_eq!(info.state, TaskState::Failed);
    assert!(info.message.contains("unmounted"), "{}", info.message);
    for t in (100..=1_000).step_by(100) {
        ping_all(&mut fx, t);
        fx.m.handle_timeout(t);
    }
    fx.check();
    assert_eq!(nodes_of(&fx, "k"), ["n1"], "the source stays");
}

#[test]
fn a_failed_tasks_space_is_held_past_its_clients_window_whatever_the_settings() {
    // A release time shorter than the processing timeout is a valid setting.
    let mut fx = Fx::new(MasterConfig {
        processing_task_timeout_ms: 5_000,
        ..cfg()
    });
    fx.m.config().validate().unwrap();
    fx.mount(A, 0, "n1", 16 * MIB);
    fx.mount(B, 0, "n2", 16 * MIB);
    put_on(&mut fx, 1, "k", 1000, "n1");
    let before = fx.used();
    let id = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    assert_eq!(fx.m.task_take(A, 10).unwrap()[0].deadline_ms, 5_000);
    let mut t = 500;
    while t <= 5_300 {
        ping_all2(&mut fx, t);
        fx.m.handle_timeout(t);
        t += 100;
    }
    assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Failed);
    assert!(
        fx.used() > before,
        "held until its end of time + the discard timeout"
    );
    ping_all2(&mut fx, 5_400);
    fx.m.handle_timeout(5_400);
    assert_eq!(fx.used(), before, "then freed");
    fx.check();
}

/// Pings A and B (the two clients of a two-node fixture).
fn ping_all2(fx: &mut Fx, now: u64) {
    fx.m.ping(A, now);
    fx.m.ping(B, now);
}

#[test]
fn a_running_task_is_no_readers_lease_a_removed_range_must_wait_for() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    copy_to_n2(&mut fx, 2, "k");
    let running = fx.m.task_copy(5, "k", &targets(&["n3"])).unwrap();
    let runner = fx.m.task_query(running).unwrap().client;
    fx.m.task_take(runner, 6).unwrap();
    // The node of the replica not copied from unmounts at once, and mounts the same range
    // again once any reader's lease (100 ms) has ended, while the task still runs.
    let (other, node, mount) = match runner {
        A => (B, "n2", MountId(2)),
        _ => (A, "n1", MountId(1)),
    };
    fx.m.unmount_within(other, 7, mount, 0).unwrap();
    fx.m.handle_timeout(8);
    ping_all(&mut fx, 500);
    assert_eq!(
        fx.m.task_query(running).unwrap().state,
        TaskState::Processing
    );
    fx.m.mount(other, 500, &[spec(node, base(node), 16 * MIB)])
        .unwrap();
    fx.check();
}

#[test]
fn a_runner_that_expired_mounts_again_once_readers_leases_are_over() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    copy_to_n2(&mut fx, 2, "k");
    let running = fx.m.task_copy(5, "k", &targets(&["n3"])).unwrap();
    let runner = fx.m.task_query(running).unwrap().client;
    fx.m.task_take(runner, 6).unwrap();
    // The runner misses its pings and expires; its task fails; k lives on the other node.
    let others: Vec<_> = [A, B, C].into_iter().filter(|c| *c != runner).collect();
    for t in [500, 1_000] {
        others.iter().for_each(|c| {
            fx.m.ping(*c, t);
        });
    }
    fx.m.handle_timeout(1_006);
    assert_eq!(fx.m.task_query(running).unwrap().state, TaskState::Failed);
    assert!(fx.m.exist("k").unwrap());
    let node = if runner == A { "n1" } else { "n2" };
    fx.m.remount(runner, 2_000, &[spec(node, base(node), 16 * MIB)])
        .unwrap();
    fx.check();
}

#[test]
fn a_running_task_keeps_its_object_from_removal_eviction_and_clearing() {
    let mut fx = three_nodes();
    put_on(&mut fx, 1, "k", 1000, "n1");
    let id = fx.m.task_copy(2, "k", &targets(&["n2"])).unwrap();
    fx.m.task_take(A, 3).unwrap();
    assert_eq!(fx.m.remove(500, "k", false).unwrap_err().code(), -708);
    assert_eq!(fx.m.remove_all(500, false), 0);
    let k = ["k".to_string()];
    assert!(fx.m.batch_replica_clear(500, &k, "").is_empty());
    // An upsert of the same size writes new space, not the replica being copied.
    let d =
        fx.m.put_start(A, 600, "k", 1000, &replicas(1), Write::Upsert)
            .unwrap();
    assert_ne!((d[0].node.as_str(), d[0].addr), ("n1", base("n1")));
    fx.m.put_revoke(A, 600, "k").unwrap();
    fx.m.task_end(A, 700, id, None).unwrap();
    assert_eq!(fx.m.task_query(id).unwrap().state, TaskState::Success);
    // Over: a removal needs no force (no reader's lease is left either).
    fx.m.remove(800, "k", false).unwrap();
    fx.check();
}
