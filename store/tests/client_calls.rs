//! The client's calls added for Mooncake's API: a put from several parts, an upsert from
//! registered memory, batch and pattern removal, `health_check` and `hostname`, against a master
//! on 127.0.0.1.

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, ClientHealth, Fetched, Options, Write};

mod common;
use common::master_and_client;

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
    c.put_parts(
        "kv",
        &[b"new", b"er"],
        opts.clone().with_write(Write::Upsert),
    )
    .await
    .unwrap();
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
    // A check made before `close` and awaited after it sees the client closed.
    let early = c.health_check(&opts);
    c.close(&Options::deadline(Duration::from_millis(200)))
        .await
        .ok();
    assert_eq!(early.await, ClientHealth::Closed);
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
    // A new key, then the same key again: an upsert replaces where a put is refused.
    c.put_from(
        "k",
        buf.addr(),
        5000,
        opts.clone().with_write(Write::Upsert),
    )
    .await
    .unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), vec![3u8; 5000]);
    let e = c.put_from("k", buf.addr(), 10, &opts).await.unwrap_err();
    assert_eq!(e.code(), -705);
    c.put_from(
        "k",
        buf.addr() + 5000,
        5,
        opts.clone().with_write(Write::Upsert),
    )
    .await
    .unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), b"fresh");
    assert_eq!(c.get_size("k", &opts).await.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_or_locate_returns_small_values_and_locates_large_ones() {
    let (_master, c) = master_and_client().await;
    let opts = Options::deadline(Duration::from_secs(10));
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    c.put("small", b"tiny", &opts).await.unwrap();
    c.put("big", &big, &opts).await.unwrap();

    match c.get_or_locate("small", 4, &opts).await.unwrap() {
        Fetched::Value(v) => assert_eq!(v, b"tiny"),
        Fetched::Located(l) => panic!("4 bytes should come inline, got {l:?}"),
    }
    let found = match c.get_or_locate("big", 4, &opts).await.unwrap() {
        Fetched::Located(l) => l,
        Fetched::Value(_) => panic!("100000 bytes are more than 4"),
    };
    assert_eq!((found.key(), found.size()), ("big", 100_000));
    let e = c.get_or_locate("nope", 4, &opts).await.unwrap_err();
    assert_eq!(e.code(), -704);

    let buf = c.engine().allocate(1 << 17, true).unwrap();
    // Too small: refused, nothing written.
    let e = c
        .read_located(&found, buf.addr(), 99_999, &opts)
        .await
        .unwrap_err();
    assert_eq!(e.code(), -600);
    let mut head = [1u8; 16];
    // SAFETY: no transfer into `buf` is under way.
    unsafe { buf.read_at(0, &mut head) }.unwrap();
    assert_eq!(head, [0u8; 16]);

    let n = c
        .read_located(&found, buf.addr(), 1 << 17, &opts)
        .await
        .unwrap();
    assert_eq!(n, 100_000);
    let mut back = vec![0u8; 100_000];
    // SAFETY: the read into `buf` is final.
    unsafe { buf.read_at(0, &mut back) }.unwrap();
    assert_eq!(back, big);
    assert_eq!(c.locate("big", &opts).await.unwrap().size(), 100_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_located_object_read_after_its_lease_is_lease_expired() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.lease_ttl_ms = 200;
    let master = RunningMaster::start(cfg, &bind).await.unwrap();
    let c = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    c.put("k", &[5u8; 1000], &opts).await.unwrap();
    let found = c.locate("k", &opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let buf = c.engine().allocate(4096, true).unwrap();
    let e = c
        .read_located(&found, buf.addr(), 4096, &opts)
        .await
        .unwrap_err();
    assert_eq!(e.code(), -707, "{e}");
    // Refused before any transfer: the space might hold another object by now.
    let mut back = [1u8; 1000];
    // SAFETY: no transfer into `buf` is under way.
    unsafe { buf.read_at(0, &mut back) }.unwrap();
    assert_eq!(back, [0u8; 1000], "nothing was read outside the lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_by_a_master_that_is_not_the_leader_go_to_the_next_one() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    // A master that is never the leader.
    let closed = std::sync::Arc::new(yuebing_testkit::Switch::new(false));
    let standby = RunningMaster::start_gated(
        MasterServerConfig::default(),
        &bind,
        Some(common::gate(&closed)),
    )
    .await
    .unwrap();
    let leader = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let c = Client::start(ClientConfig {
        masters: vec![
            standby.local_endpoint().clone(),
            leader.local_endpoint().clone(),
        ],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    // A put is not idempotent, yet moves on: the standby refused it before doing anything.
    c.put("k", b"v", &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), b"v");
    assert_eq!(
        standby.health().last_seq,
        0,
        "nothing reached the standby's state"
    );
    assert!(leader.health().last_seq >= 3, "mount, put_start, put_end");
}
