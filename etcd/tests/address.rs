//! A client's leader source made from an `etcd://` address, against a real etcd: it names
//! nobody until a candidate wins, then the winner, then the next winner after a resignation;
//! its task (and etcd client) ends once the last receiver is dropped, with no guard held.

use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;
use yuebing_etcd::address::{leader_source, parse_master_address};
use yuebing_etcd::Election;
use yuebing_rpc::Endpoint;
use yuebing_testkit::etcd::EtcdServer;

/// Ceiling of every wait: many times anything etcd takes here.
const CEILING: Duration = Duration::from_secs(20);

/// Waits until `rx` names `want`.
async fn named(rx: &mut watch::Receiver<Option<Endpoint>>, want: &str) {
    let want: Endpoint = want.parse().unwrap();
    tokio::time::timeout(CEILING, rx.wait_for(|now| now.as_ref() == Some(&want)))
        .await
        .unwrap_or_else(|_| panic!("the source did not name {want} within {CEILING:?}"))
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_follows_the_election_and_ends_with_its_last_receiver() {
    let etcd = EtcdServer::start().await.unwrap();
    let handle = Handle::current();
    let address = format!("etcd://{}/follow", etcd.endpoint());
    let config = parse_master_address(&address).unwrap();

    let tasks_before = handle.metrics().num_alive_tasks();
    let mut rx = leader_source(&config, &handle).await.unwrap();
    assert_eq!(*rx.borrow(), None, "no leader yet");

    let candidates = Election::connect_on(&config, Duration::from_secs(2), handle.clone())
        .await
        .unwrap();
    let first = candidates.campaign("127.0.0.1:7001".into()).await.unwrap();
    named(&mut rx, "127.0.0.1:7001").await;
    let second = {
        let candidates = candidates.clone();
        tokio::spawn(async move { candidates.campaign("127.0.0.1:7002".into()).await })
    };
    first.resign().await.unwrap();
    named(&mut rx, "127.0.0.1:7002").await;
    let second = second.await.unwrap().unwrap();

    // A clone keeps the source alive; dropping both ends its task.
    let clone = rx.clone();
    drop(rx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(handle.metrics().num_alive_tasks() > tasks_before);
    drop(clone);
    second.resign().await.unwrap();
    drop(candidates);
    let start = Instant::now();
    while handle.metrics().num_alive_tasks() > tasks_before {
        assert!(
            start.elapsed() < CEILING,
            "{} tasks alive, {tasks_before} before the source",
            handle.metrics().num_alive_tasks()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
