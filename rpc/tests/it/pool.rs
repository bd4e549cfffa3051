//! The pool spreads calls over its connections; the registry drops idle pools.

use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use yuebing_rpc::{Pool, PoolConfig, PoolRegistry};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_calls_over_four_connections() {
    let (server, _) = start_default().await;
    let cfg = PoolConfig {
        max_connections: 4,
        min_connections: 4,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), cfg);
    assert_eq!(pool.warm_up().await.unwrap(), 4);
    let calls = (0..2000u32).map(|i| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let x = Bytes::from(i.to_be_bytes().to_vec());
            let back = pool
                .call(|c, ctx| {
                    let x = x.clone();
                    async move { c.echo(ctx, x).await }
                })
                .await
                .unwrap();
            assert_eq!(back, x);
        })
    });
    for r in join_all(calls).await {
        r.unwrap();
    }
    let status = pool.status();
    assert_eq!(status.live_connections, 4);
    let total: u64 = status.calls_per_connection.iter().map(|c| c.1).sum();
    assert_eq!(total, 2000);
    for (id, n) in &status.calls_per_connection {
        assert!(
            *n >= 200,
            "connection {id} carried only {n} of 2000: {status:?}"
        );
    }
    let m = server.metrics().method("Lab.echo").unwrap();
    assert_eq!(m.calls, 2000);
    assert!(m.errors.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_grows_under_load_up_to_its_size() {
    let (server, _) = start_default().await;
    let cfg = PoolConfig {
        max_connections: 3,
        grow_threshold: 2,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), cfg);
    // Calls arrive one every 5 ms and each lasts 300 ms, so the load keeps rising.
    let mut calls = Vec::new();
    for _ in 0..60 {
        let pool = pool.clone();
        calls.push(tokio::spawn(async move {
            pool.call(|c, ctx| async move { c.sleep(ctx, 300).await })
                .await
                .unwrap()
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for r in join_all(calls).await {
        r.unwrap();
    }
    let status = pool.status();
    assert_eq!(status.live_connections, 3, "{status:?}");
    assert!(
        status.calls_per_connection.iter().all(|c| c.1 > 0),
        "{status:?}"
    );
}

#[tokio::test]
async fn registry_shares_pools_and_drops_idle_ones() {
    let (a, _) = start_default().await;
    let (b, _) = start_default().await;
    let registry: PoolRegistry<LabRpc> =
        PoolRegistry::new(PoolConfig::new("lab"), Duration::from_millis(100));
    let pa = registry.get(a.local_endpoint());
    pa.call(|c, ctx| async move { c.echo(ctx, Bytes::new()).await })
        .await
        .unwrap();
    let again = registry.get(a.local_endpoint());
    assert_eq!(again.status(), pa.status(), "the same pool");
    registry.get(b.local_endpoint());
    assert_eq!(registry.len(), 2);
    assert!(
        eventually(Duration::from_secs(3), || registry.is_empty()).await,
        "idle pools dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_is_single_flight() {
    let (server, _) = start_default().await;
    let cfg = PoolConfig {
        max_connections: 4,
        grow_threshold: usize::MAX,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), cfg);
    let calls = (0..100).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.call(|c, ctx| async move { c.whoami(ctx).await })
                .await
                .unwrap()
                .1
        })
    });
    for r in join_all(calls).await {
        assert_eq!(
            r.unwrap(),
            1,
            "every waiting call used the one connection opened"
        );
    }
    assert_eq!(pool.status().live_connections, 1);
}
