//! What the tests of yuebing-etcd share: settings that reach the test kit's etcd, a test
//! master's settings, starting masters, and a store client that follows the election.
#![allow(dead_code)] // each test file uses a part

use std::time::Duration;

use tokio::runtime::Handle;
use yuebing_etcd::ha::{HaConfig, HaMaster, LeaderWatch};
use yuebing_etcd::{Election, EtcdConfig};
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::etcd::{EtcdCluster, EtcdServer};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;

/// Settings that reach a test etcd's members.
pub(crate) trait Settings {
    /// Settings that reach every member, with a short connect timeout for tests (1 s).
    fn config(&self) -> EtcdConfig;
}

impl Settings for EtcdCluster {
    fn config(&self) -> EtcdConfig {
        reaching(&self.endpoints())
    }
}

impl Settings for EtcdServer {
    fn config(&self) -> EtcdConfig {
        reaching(&self.endpoints())
    }
}

fn reaching(endpoints: &[String]) -> EtcdConfig {
    let mut config = EtcdConfig::new(&endpoints.join(","))
        .unwrap_or_else(|e| unreachable!("the launcher's own endpoints parse: {e}"));
    config.connect_timeout = Duration::from_secs(1);
    config
}

/// The election TTL of test masters.
pub(crate) const TTL: Duration = Duration::from_secs(2);

/// A test master of `cluster` on `etcd`: a 2 s election TTL, the rest default.
pub(crate) fn ha_config(etcd: EtcdConfig, cluster: &str) -> HaConfig {
    let mut cfg = HaConfig::new(etcd.with_cluster(cluster));
    cfg.ttl = TTL;
    cfg
}

/// Starts a master on 127.0.0.1 (any port).
pub(crate) async fn start(cfg: HaConfig) -> HaMaster {
    let bind = "127.0.0.1:0".parse().unwrap();
    HaMaster::start(cfg, &bind, Handle::current())
        .await
        .unwrap()
}

/// Starts a master and waits until it leads and serves.
pub(crate) async fn leader(cfg: HaConfig) -> HaMaster {
    let master = start(cfg).await;
    eventually("the master leads", Duration::from_secs(20), async || {
        master.serving().then_some(())
    })
    .await;
    master
}

/// A store client that follows the election of `config`'s cluster, with `store_size` bytes of
/// its own space and a ping every `heartbeat`; keep the watch as long as the client.
pub(crate) async fn follower(
    config: &EtcdConfig,
    store_size: u64,
    heartbeat: Duration,
) -> (Client, LeaderWatch) {
    let handle = Handle::current();
    let election = Election::connect_on(config, TTL, handle.clone())
        .await
        .unwrap();
    let leader = LeaderWatch::start(election, &handle);
    let client = Client::start(ClientConfig {
        leader: Some(leader.receiver()),
        store_size,
        heartbeat,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    (client, leader)
}

/// Puts the objects `k{i}` for each `i` of `keys` through `client`, each `len` bytes of
/// pattern `i` (what [`reads_back`] then checks).
pub(crate) async fn put_objects(
    client: &Client,
    keys: impl IntoIterator<Item = u64>,
    len: usize,
    opts: &Options,
) {
    for i in keys {
        let value = pattern(len, i);
        client.put(&format!("k{i}"), &value, opts).await.unwrap();
    }
}

/// Asserts that `key` reads back as `expected` through `client`, retrying for 20 s (the
/// client may not have remounted with a new leader yet).
pub(crate) async fn reads_back(client: &Client, key: &str, expected: &[u8]) {
    let opts = Options::deadline(Duration::from_secs(20));
    let got = eventually(key, Duration::from_secs(20), async || {
        client.get(key, &opts).await
    })
    .await;
    assert_eq!(got, expected, "{key}");
}
