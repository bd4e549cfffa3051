//! Issue 16 item 4 with real processes: clients that know only `--master
//! etcd://127.0.0.1:PORT/CLUSTER` find the elected master through etcd and follow it. A
//! `yuebing node` and `yuebing store` commands work through the first leader; the leader is
//! SIGKILLed; commands started after the kill and a `store put` started before it reach the
//! new leader, and objects on the node read back (the node remounted with the new leader).
//! (Needs the `etcd` feature: `scripts/test.sh` runs it.)

#![cfg(feature = "etcd")]

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::Process;
use yuebing::etcd::Election;
use yuebing_testkit::etcd::EtcdServer;
use yuebing_testkit::eventually;
use yuebing_testkit::ports::free_port;

const TTL_MS: u64 = 2000;
const CLUSTER: &str = "clients";

fn elected_master(etcd: &str) -> Process {
    let ttl = TTL_MS.to_string();
    let args = [
        "--etcd",
        etcd,
        "--cluster",
        CLUSTER,
        "--election-ttl-ms",
        &ttl,
    ];
    Process::master(free_port(), &args)
}

/// `yuebing store ARGS --master ADDRESS`, run to its end.
fn store(address: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .arg("store")
        .args(args)
        .args(["--master", address])
        .output()
        .expect("yuebing store runs")
}

fn text(out: &Output) -> String {
    format!(
        "status {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_given_an_etcd_address_follow_the_leader_across_a_kill() {
    let etcd = EtcdServer::start().await.unwrap();
    let address = format!("etcd://{}/{CLUSTER}", etcd.endpoint());
    let mut masters: Vec<Process> = (0..2).map(|_| elected_master(&etcd.endpoint())).collect();
    let election = Election::connect_on(
        &common::etcd_config(&etcd).with_cluster(CLUSTER),
        Duration::from_secs(2),
        tokio::runtime::Handle::current(),
    )
    .await
    .unwrap();
    // The node finds the leader through etcd (its mount waits for one).
    let _node = Process::start(
        &[
            "node",
            "--master",
            &address,
            "--store-size",
            "32M",
            "--transport",
            "tcp",
            "--heartbeat-ms",
            "100",
        ],
        "yuebing node ready ",
    );
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before");
    std::fs::write(&before, b"put through the first leader").unwrap();
    let out = store(&address, &["put", "before", before.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let leader = election.leader().await.unwrap().expect("a leader");

    // A put whose client starts now and whose value comes after the kill.
    let mut late_put = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args(["store", "put", "during", "-", "--master", &address])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let at = masters
        .iter()
        .position(|m| m.endpoint().to_string() == leader.address)
        .expect("the leader is one of ours");
    masters[at].kill();

    // A command started now waits for the new leader and reads the object back there, once
    // the node has remounted with it (until then: ReplicaNotReady, retryable; try again).
    let mut last = String::new();
    let got = eventually("a get after the kill", Duration::from_secs(20), || {
        let out = store(&address, &["get", "before"]);
        let ok = out.status.success().then(|| out.stdout.clone());
        last = text(&out);
        async move { ok }
    })
    .await;
    assert_eq!(got, b"put through the first leader", "{last}");
    let new = election.leader().await.unwrap().expect("a leader");
    assert!(new.epoch > leader.epoch, "{new:?} after {leader:?}");

    // The put whose client started before the kill goes to the new leader.
    let mut stdin = late_put.stdin.take().unwrap();
    stdin.write_all(b"sent after the kill").unwrap();
    drop(stdin);
    let out = late_put.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = store(&address, &["get", "during"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout, b"sent after the kill");
    let stats = store(&address, &["stats"]);
    let shown = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.status.success(), "{}", text(&stats));
    let line = format!("master\t{}\tleader\tepoch {}\t", new.address, new.epoch);
    assert!(shown.contains(&line), "{line:?} not in {shown}");
}
