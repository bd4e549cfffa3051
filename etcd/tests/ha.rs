//! Elected masters on a real etcd, in one process: the first leads, a second applies the log
//! as a standby; when the leader is cut off from etcd it stops serving before the standby,
//! promoted in a newer epoch, serves every object the old leader acknowledged, and puts go on.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::runtime::Handle;
use yuebing_etcd::ha::{HaMaster, Role};
use yuebing_rpc::Endpoint;
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::etcd::{EtcdServer, TcpProxy};
use yuebing_testkit::{eventually, patterns::pattern};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_a_leader_cut_off_from_etcd_and_loses_nothing() {
    let etcd = EtcdServer::start().await.unwrap();
    let proxy = TcpProxy::start(&etcd.endpoint()).await.unwrap();
    let mut cut_off = etcd.config();
    cut_off.endpoints = vec![proxy.endpoint()];

    let first = leader(ha_config(cut_off, "ha1")).await;
    let second = start(ha_config(etcd.config(), "ha1")).await;
    assert_eq!(second.status().role, Role::Standby);

    // A client that follows the election, with store space of its own.
    let (client, _leader) = follower(
        &etcd.config().with_cluster("ha1"),
        32 << 20,
        Duration::from_millis(100),
    )
    .await;
    let opts = Options::deadline(Duration::from_secs(20));
    put_objects(&client, 0..200, 4096, &opts).await;
    let applied = first.status().applied;
    eventually(
        "the standby applies the log",
        Duration::from_secs(20),
        async || (second.status().applied == applied).then_some(()),
    )
    .await;

    // Cut the leader off etcd: it stops serving, then the standby leads in a newer epoch.
    let old_epoch = first.status().epoch;
    proxy.cut();
    let cut_at = Instant::now();
    let why = tokio::time::timeout(Duration::from_secs(20), first.stopped())
        .await
        .expect("the cut-off leader stops");
    let stopped_after = cut_at.elapsed();
    eventually(
        "the standby leads",
        Duration::from_secs(2 * 2 + 5),
        async || second.serving().then_some(()),
    )
    .await;
    let took = cut_at.elapsed();
    eprintln!(
        "cut-off leader stopped after {stopped_after:?} ({why}); standby serving after {took:?}"
    );
    assert!(second.status().epoch > old_epoch);

    // Every object reads back (once the client remounted its space with the new leader).
    for i in 0..200 {
        reads_back(&client, &format!("k{i}"), &pattern(4096, i)).await;
    }
    client.put("after", b"failover", &opts).await.unwrap();
    assert_eq!(client.get("after", &opts).await.unwrap(), b"failover");
    second.shutdown(Duration::from_secs(1)).await;
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_outlives_an_etcd_outage_longer_than_its_ttl() {
    let etcd = EtcdServer::start().await.unwrap();
    let proxy = TcpProxy::start(&etcd.endpoint()).await.unwrap();
    let mut behind_proxy = etcd.config();
    behind_proxy.endpoints = vec![proxy.endpoint()];
    let leader = leader(ha_config(etcd.config(), "ha2")).await;
    let standby = start(ha_config(behind_proxy, "ha2")).await;
    // etcd out of reach for more than the standby's lease TTL (2 s), then back.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    proxy.restore();
    assert_eq!(
        standby.status().role,
        Role::Standby,
        "still a standby, not stopped"
    );

    // It still follows the log, and takes over when the leader resigns.
    let client = Client::start(ClientConfig {
        masters: vec![
            leader.local_endpoint().unwrap().clone(),
            standby.local_endpoint().unwrap().clone(),
        ],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(20));
    client.put("k", b"v", &opts).await.unwrap();
    let applied = leader.status().applied;
    eventually(
        "the standby applies the log",
        Duration::from_secs(20),
        async || (standby.status().applied >= applied).then_some(()),
    )
    .await;
    leader.shutdown(Duration::from_secs(1)).await;
    eventually("the standby leads", Duration::from_secs(20), async || {
        standby.serving().then_some(())
    })
    .await;
    assert!(client.exist("k", &opts).await.unwrap());
    standby.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_with_other_rules_than_its_cluster_is_refused() {
    let etcd = EtcdServer::start().await.unwrap();
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let handle = Handle::current();
    let first = start(ha_config(etcd.config(), "ha3")).await;
    let mut other = ha_config(etcd.config(), "ha3");
    other.master.core.put_release_ms = 700_000;
    let e = HaMaster::start(other, &bind, handle.clone())
        .await
        .err()
        .expect("other rules are refused");
    assert!(e.to_string().contains("rules differ"), "{e}");
    // The same rules join; another cluster has its own.
    let same = start(ha_config(etcd.config(), "ha3")).await;
    let mut elsewhere = ha_config(etcd.config(), "ha4");
    elsewhere.master.core.put_release_ms = 700_000;
    let alone = HaMaster::start(elsewhere, &bind, handle).await.unwrap();
    drop((first, same, alone));
}
