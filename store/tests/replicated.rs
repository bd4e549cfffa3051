//! An elected master's hooks, driven by hand with an in-memory replicated log: a standby
//! serves nothing and runs no timeouts, applies the leader's entries, and once promoted
//! serves under its new epoch; a failed log stops the master for good.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{
    LogEntry, LogSink, Master, MasterConfig, MasterServerConfig, RunningMaster,
};
use yuebing_store::{Client, ClientConfig, Error, Options};
use yuebing_testkit::{eventually, Switch};

/// A replicated log in memory: entries are durable as soon as they are appended, unless it
/// was made to fail.
#[derive(Default)]
struct MemLog {
    entries: Mutex<Vec<LogEntry>>,
    failed: Mutex<Option<Error>>,
    durable: Mutex<Option<watch::Sender<u64>>>,
}

impl MemLog {
    fn new() -> Arc<MemLog> {
        let log = MemLog::default();
        *log.durable.lock().unwrap() = Some(watch::channel(0).0);
        Arc::new(log)
    }

    fn entries(&self) -> Vec<LogEntry> {
        self.entries.lock().unwrap().clone()
    }

    fn fail(&self, e: Error) {
        *self.failed.lock().unwrap() = Some(e);
    }

    fn tx(&self) -> watch::Sender<u64> {
        self.durable.lock().unwrap().clone().unwrap()
    }
}

impl LogSink for MemLog {
    fn append(&self, entries: Vec<LogEntry>) {
        let last = entries.last().map(|e| e.seq);
        self.entries.lock().unwrap().extend(entries);
        if let Some(seq) = last {
            self.tx().send_replace(seq);
        }
    }

    fn wait(&self, seq: u64, _own: Option<u64>) -> BoxFuture<'_, yuebing_store::Result<()>> {
        async move {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            let mut rx = self.tx().subscribe();
            let _ = rx.wait_for(|d| *d >= seq).await;
            Ok(())
        }
        .boxed()
    }

    fn durable_seq(&self) -> u64 {
        *self.tx().borrow()
    }

    fn failure(&self) -> Option<Error> {
        self.failed.lock().unwrap().clone()
    }
}

fn cfg() -> MasterServerConfig {
    MasterServerConfig {
        core: MasterConfig {
            // The client remounts on its next ping after the failover.
            client_ttl_ms: 60_000,
            ..MasterConfig::default()
        },
        ..MasterServerConfig::default()
    }
}

async fn replicated(open: bool) -> (RunningMaster, Arc<MemLog>, Arc<Switch>) {
    let log = MemLog::new();
    let switch = Arc::new(Switch::new(open));
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let m = RunningMaster::start_replicated(
        cfg(),
        &bind,
        Master::new(cfg().core, true),
        log.clone(),
        common::gate(&switch),
    )
    .await
    .unwrap();
    (m, log, switch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_applies_the_log_and_serves_once_promoted() {
    let (leader, leader_log, leader_gate) = replicated(true).await;
    let (standby, standby_log, standby_gate) = replicated(false).await;
    let client = Client::start(ClientConfig {
        masters: vec![
            leader.local_endpoint().clone(),
            standby.local_endpoint().clone(),
        ],
        store_size: 8 << 20,
        heartbeat: Duration::from_millis(100),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    client.put("a", b"before", &opts).await.unwrap();
    let written = leader_log.entries();
    assert!(written.len() >= 3, "mount, put_start, put_end: {written:?}");

    // The standby refuses calls and changes only by replay.
    let direct = yuebing_store::master::MasterClient::new(
        standby.local_endpoint().clone(),
        yuebing_store::master::ClientId(9),
    );
    assert_eq!(direct.exist("a").await.unwrap_err().code(), -1010);
    standby.replay(written.clone()).unwrap();
    assert_eq!(standby.last_seq().unwrap(), written.last().unwrap().seq);
    assert!(standby_log.entries().is_empty(), "replay appends nothing");

    // Failover: the leader's gate closes, the standby is promoted and opens.
    leader_gate.close();
    let epoch = written.last().unwrap().epoch + 1;
    // Both logs stand for one replicated log: what the standby replayed is durable in it.
    standby_log.tx().send_replace(written.last().unwrap().seq);
    standby.promote(epoch).unwrap();
    standby_gate.open();
    assert!(
        client.exist("a", &opts).await.unwrap(),
        "the new leader knows the object"
    );
    // Its replica serves again once the client remounted (its next ping says so).
    let got = eventually("get after remount", Duration::from_secs(20), async || {
        client.get("a", &opts).await
    })
    .await;
    assert_eq!(got, b"before");
    client.put("b", b"after", &opts).await.unwrap();
    let new = standby_log.entries();
    assert!(!new.is_empty());
    assert!(new.iter().all(|e| e.epoch == epoch), "{new:?}");
    assert_eq!(
        new[0].seq,
        written.last().unwrap().seq + 1,
        "the log goes on without a gap"
    );

    // A failed log stops the master: every call gets the log's error.
    standby_log.fail(Error::Remote {
        code: -5012,
        message: "deposed".into(),
    });
    let e = client.exist("b", &opts).await.unwrap_err();
    assert_eq!(e.code(), -5012, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_task_created_at_the_leader_runs_to_its_end_at_the_promoted_standby() {
    let (leader, leader_log, leader_gate) = replicated(true).await;
    let (standby, standby_log, standby_gate) = replicated(false).await;
    let masters = vec![
        leader.local_endpoint().clone(),
        standby.local_endpoint().clone(),
    ];
    let node = |heartbeat_ms| ClientConfig {
        masters: masters.clone(),
        store_size: 8 << 20,
        heartbeat: Duration::from_millis(heartbeat_ms),
        ..ClientConfig::default()
    };
    // The source's pings are slow: its task is most likely still pending at the failover.
    let source = Client::start(node(2_000)).await.unwrap();
    let target = Client::start(node(100)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let on_source = Options {
        put: Some(yuebing_store::master::PutConfig {
            preferred: vec![source.hostname().to_string()],
            ..Default::default()
        }),
        ..opts.clone()
    };
    let value: Vec<u8> = (0..1 << 20).map(|i| (i % 241) as u8).collect();
    source.put("k", &value, &on_source).await.unwrap();
    let id = target
        .create_copy_task("k", &[target.hostname()], &opts)
        .await
        .unwrap();

    // Failover right away, with the log as it stands.
    leader_gate.close();
    let written = leader_log.entries();
    assert!(written
        .iter()
        .any(|e| matches!(e.record, yuebing_store::master::Record::TaskCreate { .. })));
    standby.replay(written.clone()).unwrap();
    standby_log.tx().send_replace(written.last().unwrap().seq);
    standby.promote(written.last().unwrap().epoch + 1).unwrap();
    standby_gate.open();

    // The new leader knows the task, and its client finishes it there.
    let state = eventually(
        "the task ends at the new leader",
        Duration::from_secs(30),
        async || {
            let t = target.query_task(id, &opts).await.ok()?;
            t.state.is_finished().then_some(t)
        },
    )
    .await;
    assert_eq!(
        state.state,
        yuebing_store::master::TaskState::Success,
        "{}",
        state.message
    );
    let nodes: Vec<String> = target
        .replicas("k", &opts)
        .await
        .unwrap()
        .replicas
        .into_iter()
        .map(|r| r.node)
        .collect();
    assert!(nodes.contains(&target.hostname().to_string()), "{nodes:?}");
    drop(source);
    let got = eventually("read from the copy", Duration::from_secs(20), async || {
        target.get("k", &opts).await
    })
    .await;
    assert_eq!(got, value);
}

/// A standby whose state is replaced from the leader's snapshot (it fell behind the log's
/// truncation) answers existence from that state once promoted: the keys that existence checks
/// read without the core's lock are the new state's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_reset_from_a_snapshot_answers_existence_from_it() {
    let (leader, leader_log, leader_gate) = replicated(true).await;
    let (standby, standby_log, standby_gate) = replicated(false).await;
    let client = Client::start(ClientConfig {
        masters: vec![leader.local_endpoint().clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    client.put("a", b"kept", &opts).await.unwrap();
    let snapshot = leader.snapshot().unwrap();
    let now = yuebing_store::master::wall_ms();
    let core = Master::restore(cfg().core, true, Some(snapshot), [], now).unwrap();
    standby.reset_standby(core).unwrap();

    leader_gate.close();
    let last = leader_log.entries().last().unwrap().clone();
    standby_log.tx().send_replace(last.seq);
    standby.promote(last.epoch + 1).unwrap();
    standby_gate.open();
    let direct = yuebing_store::master::MasterClient::new(
        standby.local_endpoint().clone(),
        yuebing_store::master::ClientId(9),
    );
    assert!(direct.exist("a").await.unwrap());
    let both = direct
        .batch_exist(vec!["a".into(), "b".into()])
        .await
        .unwrap();
    assert_eq!(both, [Ok(true), Ok(false)]);
}

/// A failover while the lease cache and grants are in use loses nothing committed: every put
/// acknowledged before it (through grants, single and batched) reads back byte-exact, from a
/// reader that cached their locations and from a fresh one; puts go on at the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_caches_and_grants_in_use_loses_nothing_committed() {
    let (leader, leader_log, leader_gate) = replicated(true).await;
    let (standby, standby_log, standby_gate) = replicated(false).await;
    let masters = vec![
        leader.local_endpoint().clone(),
        standby.local_endpoint().clone(),
    ];
    let config = |store_size: u64, grant_size: u64| ClientConfig {
        masters: masters.clone(),
        store_size,
        grant_size,
        lease_cache: 1024,
        heartbeat: Duration::from_millis(100),
        ..ClientConfig::default()
    };
    let _node = Client::start(config(16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(0, 1 << 20)).await.unwrap();
    let reader = Client::start(config(0, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let value = |i: usize| -> Vec<u8> { (0..4096).map(|j| (i * 7 + j) as u8).collect() };
    let mut committed: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..16 {
        let key = format!("one{i}");
        writer.put(&key, &value(i), &opts).await.unwrap();
        committed.push((key, value(i)));
    }
    let batch: Vec<(String, Vec<u8>)> = (16..32).map(|i| (format!("many{i}"), value(i))).collect();
    let items: Vec<(&str, &[u8])> = batch
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let results = writer.batch_put(&items, &opts).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    committed.extend(batch.iter().cloned());
    let keys: Vec<&str> = committed.iter().map(|(k, _)| k.as_str()).collect();
    check(&committed, reader.batch_get(&keys, &opts).await.unwrap());

    leader_gate.close();
    let written = leader_log.entries();
    standby.replay(written.clone()).unwrap();
    let last = written.last().unwrap();
    standby_log.tx().send_replace(last.seq);
    standby.promote(last.epoch + 1).unwrap();
    standby_gate.open();

    // The reader's cached locations still serve; then the new leader's answers do.
    check(&committed, reader.batch_get(&keys, &opts).await.unwrap());
    for i in 32..48 {
        let key = format!("after{i}");
        yuebing_testkit::eventually(
            "a put at the new leader",
            Duration::from_secs(20),
            async || writer.put(&key, &value(i), &opts).await.is_ok(),
        )
        .await;
        committed.push((key, value(i)));
    }
    let fresh = Client::start(config(0, 0)).await.unwrap();
    let keys: Vec<&str> = committed.iter().map(|(k, _)| k.as_str()).collect();
    let got = yuebing_testkit::eventually(
        "every value at the new leader",
        Duration::from_secs(20),
        async || {
            let got = fresh.batch_get(&keys, opts.clone().uncached()).await.ok()?;
            got.iter().all(Result::is_ok).then_some(got)
        },
    )
    .await;
    check(&committed, got);
}

/// Each committed value read back byte-exact.
fn check(committed: &[(String, Vec<u8>)], got: Vec<yuebing_store::Result<Vec<u8>>>) {
    assert_eq!(committed.len(), got.len());
    for ((k, v), got) in committed.iter().zip(got) {
        assert_eq!(&got.unwrap(), v, "{k}");
    }
}
