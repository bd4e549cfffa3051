//! `Client::close`: a node leaving gracefully gets no new replicas at once (without it the
//! master notices only when the client's TTL runs out).

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{ClientId, MasterClient, MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_node_gets_no_new_replicas() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let node = |store_size| {
        Client::start(ClientConfig {
            masters: vec![master.local_endpoint().clone()],
            store_size,
            ..ClientConfig::default()
        })
    };
    let (leaving, staying) = (node(8 << 20).await.unwrap(), node(8 << 20).await.unwrap());
    let opts = Options::deadline(Duration::from_secs(10));
    leaving.close(&opts).await.unwrap();
    let lookup = MasterClient::new(master.local_endpoint().clone(), ClientId(1));
    for i in 0..20 {
        let key = format!("k{i}");
        staying.put(&key, &[i as u8; 4096], &opts).await.unwrap();
        let replicas = lookup.get_replica_list(&key).await.unwrap().replicas;
        assert!(
            replicas.iter().all(|r| r.node == staying.engine().name()),
            "{key} was placed on the closed node"
        );
        assert_eq!(staying.get(&key, &opts).await.unwrap(), vec![i as u8; 4096]);
    }
    // A deadline too long to represent means none to speak of, not a panic.
    let forever = Options::deadline(Duration::MAX);
    assert!(staying.exist("k0", &forever).await.unwrap());
    // Closing again is harmless.
    leaving.close(&opts).await.unwrap();
}

/// A client dropped without `close` (a Python store garbage-collected, a C handle freed) takes
/// its space with it: the master hears so at once, not at the client's TTL, and places
/// nothing more there. Before, puts went on being placed in the vanished space for the TTL
/// and failed (`SegmentNotFound`), as Mooncake's own store tests showed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_leaves_at_once() {
    let mut cfg = MasterServerConfig::default();
    cfg.core.client_ttl_ms = 600_000;
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(cfg, &bind).await.unwrap();
    let node = |store_size| {
        Client::start(ClientConfig {
            masters: vec![master.local_endpoint().clone()],
            store_size,
            ..ClientConfig::default()
        })
    };
    let (dropped, staying) = (node(8 << 20).await.unwrap(), node(8 << 20).await.unwrap());
    let opts = Options::deadline(Duration::from_secs(10));
    dropped.put("on-dropped", &[7; 4096], &opts).await.unwrap();
    let lookup = MasterClient::new(master.local_endpoint().clone(), ClientId(1));
    assert_eq!(lookup.stats().await.unwrap().clients, 2);
    drop(dropped);
    let stats = eventually(
        "the master forgets the client",
        Duration::from_secs(5),
        async || {
            let s = lookup.stats().await.unwrap();
            (s.clients == 1 && s.mounts == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(stats.bytes_capacity, 8 << 20);
    for i in 0..20 {
        let key = format!("k{i}");
        staying.put(&key, &[i as u8; 4096], &opts).await.unwrap();
        assert_eq!(staying.get(&key, &opts).await.unwrap(), vec![i as u8; 4096]);
    }
    // The objects held only there are gone with it, as with an expired client.
    assert!(!staying.exist("on-dropped", &opts).await.unwrap());
}
