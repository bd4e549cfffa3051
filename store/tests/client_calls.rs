//! The client's calls added for Mooncake's API: a put from several parts, an upsert from
//! registered memory, batch and pattern removal, `health_check` and `hostname`, against a master
//! on 127.0.0.1.

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, ClientHealth, Options};

async fn master_and_client() -> (RunningMaster, Client) {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let client = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    (master, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_parts_stores_the_concatenation_and_keeps_an_existing_value() {
    let (_master, c) = master_and_client().await;
    let opts = Options::deadline(Duration::from_secs(10));
    let big = vec![7u8; 300_000];
    c.put_parts("kv", &[b"ab", b"", &big, b"cd"], &opts)
        .await
        .unwrap();
    let mut want = b"ab".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"cd");
    assert_eq!(c.get("kv", &opts).await.unwrap(), want);
    let e = c.put_parts("kv", &[b"x"], &opts).await.unwrap_err();
    assert_eq!(e.code(), -705);
    assert_eq!(c.get_size("kv", &opts).await.unwrap(), want.len() as u64);
    c.upsert_parts("kv", &[b"new", b"er"], &opts).await.unwrap();
    assert_eq!(c.get("kv", &opts).await.unwrap(), b"newer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_and_pattern_removal_through_the_client() {
    let (_master, c) = master_and_client().await;
    let opts = Options::deadline(Duration::from_secs(10));
    for k in ["req1/l0", "req1/l1", "req2/l0"] {
        c.put(k, b"v", &opts).await.unwrap();
    }
    assert_eq!(c.remove_by_regex("^req1/", false, &opts).await.unwrap(), 2);
    assert_eq!(
        c.remove_by_regex("(", false, &opts)
            .await
            .unwrap_err()
            .code(),
        -600
    );
    let r = c
        .batch_remove(&["req2/l0", "req1/l0"], false, &opts)
        .await
        .unwrap();
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), -704);
    assert!(c.list("", 10, &opts).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_tells_healthy_unreachable_and_closed_apart() {
    let (master, c) = master_and_client().await;
    assert_eq!(c.hostname(), c.engine().name());
    let opts = Options::deadline(Duration::from_secs(2));
    assert_eq!(c.health_check(&opts).await, ClientHealth::Healthy);
    master.shutdown(Duration::from_secs(1)).await;
    let h = c.health_check(&opts).await;
    assert_eq!((h, h.code()), (ClientHealth::MasterUnreachable, 2));
    c.close(&Options::deadline(Duration::from_millis(200)))
        .await
        .ok();
    let h = c.health_check(&opts).await;
    assert_eq!((h, h.code()), (ClientHealth::Closed, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_from_replaces_a_value_from_registered_memory() {
    let (_master, c) = master_and_client().await;
    let opts = Options::deadline(Duration::from_secs(10));
    let buf = c.engine().allocate(1 << 16, true).unwrap();
    // SAFETY: no transfer from or into `buf` is under way.
    unsafe { buf.write_at(0, &[3u8; 5000]) }.unwrap();
    // SAFETY: as above.
    unsafe { buf.write_at(5000, b"fresh") }.unwrap();
    // A new key, then the same key again: upsert_from replaces where put_from is refused.
    c.upsert_from("k", buf.addr(), 5000, &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), vec![3u8; 5000]);
    let e = c.put_from("k", buf.addr(), 10, &opts).await.unwrap_err();
    assert_eq!(e.code(), -705);
    c.upsert_from("k", buf.addr() + 5000, 5, &opts)
        .await
        .unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), b"fresh");
    assert_eq!(c.get_size("k", &opts).await.unwrap(), 5);
}
