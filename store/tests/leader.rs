//! A client in HA mode follows the leader a watched source names (in production an etcd
//! election): calls go there, a call the named master refuses (not the leader, still catching
//! up) or never received waits for the next leader or tries again shortly, and with no leader
//! a call ends with `NotLeader` at its deadline.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::Switch;

async fn gated_master(open: bool) -> (RunningMaster, Arc<Switch>) {
    let switch = Arc::new(Switch::new(open));
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let gate = common::gate(&switch);
    let m = RunningMaster::start_gated(MasterServerConfig::default(), &bind, Some(gate))
        .await
        .unwrap();
    (m, switch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_the_leader_its_source_names() {
    let (a, gate_a) = gated_master(true).await;
    let (b, gate_b) = gated_master(true).await;
    let (ea, eb) = (a.local_endpoint().clone(), b.local_endpoint().clone());
    // An object only master A knows.
    let writer = Client::start(ClientConfig {
        masters: vec![ea.clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    writer.put("only-a", b"v", &opts).await.unwrap();

    let (tx, rx) = watch::channel(Some(ea.clone()));
    let c = Client::start(ClientConfig {
        leader: Some(rx),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    assert!(c.exist("only-a", &opts).await.unwrap(), "A leads");

    // A steps down; the source names B only 200 ms later: the call waits for it.
    gate_a.close();
    let later = tx.clone();
    let eb2 = eb.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        later.send(Some(eb2)).unwrap();
    });
    let start = Instant::now();
    assert!(!c.exist("only-a", &opts).await.unwrap(), "B answered");
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );

    // B is named but not serving yet (catching up after its election): tried again shortly.
    gate_b.close();
    let gate = gate_b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        gate.open();
    });
    assert!(!c.exist("only-a", &opts).await.unwrap());

    // No leader at all: NotLeader at the call's deadline.
    tx.send(None).unwrap();
    let start = Instant::now();
    let e = c
        .exist("only-a", &Options::deadline(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), -1010, "{e}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
    drop((a, b));
}
