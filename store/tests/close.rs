//! `Client::close`: a node leaving gracefully gets no new replicas at once (without it the
//! master notices only when the client's TTL runs out).

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{ClientId, MasterClient, MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

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
