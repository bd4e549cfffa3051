//! Issue 16 item 2 with real processes: `yuebing node --metadata etcd://127.0.0.1:PORT/CLUSTER`
//! publishes its engine's descriptor (with its store space) in etcd; `yuebing store` commands
//! given the same address look the nodes up there and put and get an object on two replicas;
//! a node stopped with SIGTERM withdraws its descriptor before it exits, and the object is
//! still read from the other one. (Needs the `etcd` feature: `scripts/test.sh` runs it.)

#![cfg(feature = "etcd")]

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::Process;
use yuebing::engine::MetadataStore;
use yuebing::etcd::EtcdMetadata;
use yuebing_testkit::etcd::EtcdServer;
use yuebing_testkit::eventually;

const CLUSTER: &str = "metadata";

/// `yuebing store ARGS --master MASTER --metadata METADATA`, run to its end.
fn store(master: &str, metadata: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .arg("store")
        .args(args)
        .args(["--master", master, "--metadata", metadata])
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

/// Whether our child `pid` has exited (a zombie not yet reaped, or gone).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_etcd_metadata_serve_puts_and_gets() {
    let etcd = EtcdServer::start().await.unwrap();
    let metadata = format!("etcd://{}/{CLUSTER}", etcd.endpoint());
    let master = Process::master(yuebing_testkit::ports::free_port(), &[]);
    let m = master.endpoint().to_string();
    let node = || {
        let args = [
            "node",
            "--master",
            &m,
            "--metadata",
            &metadata,
            "--store-size",
            "32M",
            "--transport",
            "tcp",
            "--heartbeat-ms",
            "100",
        ];
        Process::start(&args, "yuebing node ready ")
    };
    let nodes = [node(), node()];
    let observer = EtcdMetadata::connect(&common::etcd_config(&etcd).with_cluster(CLUSTER))
        .await
        .unwrap();
    for n in &nodes {
        let d = observer.get(n.ready()).await.unwrap();
        assert_eq!(d.buffers.len(), 1, "the store space is published: {d:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("value");
    let value: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&file, &value).unwrap();
    let path = file.to_str().unwrap();
    let out = store(&m, &metadata, &["put", "k", path, "--replicas", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = store(&m, &metadata, &["get", "k"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout == value, "read back: {}", text(&out));

    // A node stopped gracefully takes its descriptor out of etcd before it exits.
    let gone = nodes[0].ready().to_string();
    nodes[0].signal(libc::SIGTERM);
    eventually("the node stopped", Duration::from_secs(20), async || {
        exited(nodes[0].pid())
    })
    .await;
    assert_eq!(observer.get(&gone).await.unwrap_err().code(), -3203);
    // Its replica is not found in etcd; the other one serves the object.
    let out = store(&m, &metadata, &["get", "k"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout == value, "read back: {}", text(&out));
}
