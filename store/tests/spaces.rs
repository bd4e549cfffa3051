//! Store space mounted and unmounted while a client runs (`Client::mount_space`,
//! `Client::unmount_space`: Mooncake's `allocate_and_mount_segment` and
//! `unmount_and_free_segment`), remounted with the rest after a master restart.

mod common;

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterConfig, MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options, SpaceId};

fn client_of(master: &Endpoint, store_size: u64) -> ClientConfig {
    ClientConfig {
        masters: vec![master.clone()],
        store_size,
        heartbeat: Duration::from_millis(100),
        ..ClientConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pure_client_mounts_space_then_unmounts_it_at_once() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let at = master.local_endpoint().clone();
    let node = Client::start(client_of(&at, 0)).await.unwrap();
    let reader = Client::start(client_of(&at, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    assert!(node.spaces().is_empty());
    assert_eq!(
        node.put("k", b"v", &opts).await.unwrap_err().code(),
        -200,
        "no store space anywhere yet"
    );
    let a = node.mount_space(4 << 20, &opts).await.unwrap();
    let b = node.mount_space(1 << 20, &opts).await.unwrap();
    assert_ne!(a, b);
    let listed: Vec<(SpaceId, u64)> = node.spaces().iter().map(|s| (s.0, s.2)).collect();
    assert_eq!(listed, vec![(a, 4 << 20), (b, 1 << 20)]);
    assert_eq!(node.stats(&opts).await.unwrap().bytes_capacity, 5 << 20);
    let value = vec![7u8; 3 << 20];
    node.put("big", &value, &opts).await.unwrap();
    assert_eq!(reader.get("big", &opts).await.unwrap(), value);
    let r = node.replicas("big", &opts).await.unwrap();
    assert_eq!(r.replicas[0].node, node.hostname());
    // Only space a holds 3 MiB: unmounted at once, the object goes with it.
    node.unmount_space(a, Duration::ZERO, &opts).await.unwrap();
    assert_eq!(node.spaces().len(), 1);
    let gone = async {
        loop {
            match reader.get("big", &opts).await {
                Err(e) if e.code() == -704 => return,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .expect("the unmounted range's object is dropped");
    assert_eq!(
        node.unmount_space(a, Duration::ZERO, &opts)
            .await
            .unwrap_err()
            .code(),
        -600,
        "not mounted any more"
    );
    assert!(node.put("big2", &value, &opts).await.is_err(), "1 MiB left");
    node.put("small", &[1u8; 1000], &opts).await.unwrap();
    assert_eq!(node.mount_space(0, &opts).await.unwrap_err().code(), -600);
    node.close(&opts).await.unwrap();
    assert_eq!(
        node.mount_space(1 << 20, &opts).await.unwrap_err().code(),
        -600,
        "closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_unmount_keeps_replicas_readable_for_its_grace() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let at = master.local_endpoint().clone();
    let node = Client::start(client_of(&at, 0)).await.unwrap();
    let reader = Client::start(client_of(&at, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let s = node.mount_space(1 << 20, &opts).await.unwrap();
    node.put("k", &[3u8; 5000], &opts).await.unwrap();
    node.unmount_space(s, Duration::from_millis(800), &opts)
        .await
        .unwrap();
    assert!(node.spaces().is_empty());
    assert_eq!(reader.get("k", &opts).await.unwrap(), vec![3u8; 5000]);
    // Its own node's reads of it too (the local path checks the range is still served).
    assert_eq!(node.get("k", &opts).await.unwrap(), vec![3u8; 5000]);
    assert!(
        node.put("k2", &[1u8; 10], &opts).await.is_err(),
        "no new replicas"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(reader.get("k", &opts).await.unwrap_err().code(), -704);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_space_is_mounted_again_after_a_master_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || MasterServerConfig {
        core: MasterConfig {
            client_ttl_ms: 60_000,
            ..MasterConfig::default()
        },
        data_dir: Some(dir.path().to_path_buf()),
        ..MasterServerConfig::default()
    };
    // A port of its own, the same for both lives of the master.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let at: Endpoint = format!("127.0.0.1:{port}").parse().unwrap();
    let master = RunningMaster::start(cfg(), &at).await.unwrap();
    let node = Client::start(client_of(&at, 2 << 20)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let extra = node.mount_space(4 << 20, &opts).await.unwrap();
    let big = vec![9u8; 3 << 20];
    node.put("big", &big, &opts).await.unwrap();
    master.shutdown(Duration::from_secs(1)).await;
    let master = RunningMaster::start(cfg(), &at).await.unwrap();
    let back = async {
        loop {
            if let Ok(v) = node.get("big", &opts).await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(10), back)
        .await
        .expect("both ranges mounted again");
    assert_eq!(got, big);
    assert_eq!(node.stats(&opts).await.unwrap().bytes_capacity, 6 << 20);
    // The remount's new ids are the ones an unmount uses.
    node.unmount_space(extra, Duration::ZERO, &opts)
        .await
        .unwrap();
    assert_eq!(node.spaces().len(), 1);
    master.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_by_a_client_the_master_expired_brings_back_all_of_its_space() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.client_ttl_ms = 300;
    let master = RunningMaster::start(cfg, &bind).await.unwrap();
    let at = master.local_endpoint().clone();
    // Pings far apart: the master expires the client before its next one.
    let node = Client::start(ClientConfig {
        heartbeat: Duration::from_secs(30),
        ..client_of(&at, 2 << 20)
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let stats = |c: &Client| {
        let c = c.clone();
        let opts = opts.clone();
        async move { c.stats(&opts).await.unwrap() }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while stats(&node).await.bytes_capacity != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the master never expired the client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.mount_space(4 << 20, &opts).await.unwrap();
    assert_eq!(
        stats(&node).await.bytes_capacity,
        6 << 20,
        "the configuration's range is mounted again with the new one"
    );
    node.put("k", &vec![1u8; 3 << 20], &opts).await.unwrap();
}
