//! The pool spreads calls over its connections; the registry drops idle pools.

use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use yuebing_rpc::{CallOptions, Pool, PoolConfig, PoolRegistry};

use crate::common::*;
use yuebing_testkit::eventually;

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
    let m = server.metrics().method("lab.echo").unwrap();
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
    eventually("idle pools dropped", Duration::from_secs(3), async || {
        registry.is_empty()
    })
    .await;
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

/// Fires `m` calls at once through `pool`, each held at the server until all `m` arrived;
/// returns how many arrived on each server-side connection.
async fn burst(pool: &Pool<LabRpc>, m: u64) -> std::collections::BTreeMap<u64, u64> {
    let calls = (0..m).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.call_with(
                CallOptions::method("gather").timeout(Duration::from_secs(60)),
                |c, ctx| async move { c.gather(ctx, m).await },
            )
            .await
            .unwrap()
        })
    });
    let mut per_conn = std::collections::BTreeMap::new();
    for r in join_all(calls).await {
        *per_conn.entry(r.unwrap()).or_insert(0) += 1;
    }
    per_conn
}

/// A burst on a pool that has not connected yet spreads over the pool's connections as it does
/// on a warm pool, instead of landing on the first one or two: once the burst is past what one
/// connection carries before the pool grows, every connection is opened and takes its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_burst_spreads_like_a_warm_one() {
    const N: usize = 4;
    const M: u64 = 64;
    for warm in [true, false] {
        let (server, _) = start_default().await;
        let cfg = PoolConfig {
            max_connections: N,
            min_connections: if warm { N } else { 0 },
            grow_threshold: 8,
            ..PoolConfig::new("lab")
        };
        let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), cfg);
        if warm {
            assert_eq!(pool.warm_up().await.unwrap(), N);
        }
        let per_conn = burst(&pool, M).await;
        let what = if warm { "warm" } else { "cold" };
        assert_eq!(per_conn.len(), N, "{what}: {per_conn:?}");
        assert_eq!(per_conn.values().sum::<u64>(), M);
        // An even share is 16; a few calls may race to the same connection.
        for (conn, n) in &per_conn {
            assert!(
                (12..=20).contains(n),
                "{what}: connection {conn} carried {n} of {M}: {per_conn:?}"
            );
        }
        assert_eq!(pool.status().live_connections, N, "{what}");
    }
}
