//! At the caps, excess calls get a retryable Overloaded instead of hanging.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use yuebing_rpc::{CallOptions, Error, Pool, PoolConfig, ServerConfig};

use crate::common::*;

fn no_retry() -> PoolConfig {
    PoolConfig {
        max_connections: 1,
        max_retries: 0,
        ..PoolConfig::new("lab")
    }
}

/// Fires `n` calls sleeping `ms`; returns (successes, Overloaded errors seen before any handler
/// finished, other outcomes).
async fn fire(
    server: &yuebing_rpc::RunningServer,
    state: &Arc<LabState>,
    n: usize,
    ms: u64,
) -> (usize, usize, usize) {
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    let calls = (0..n).map(|_| {
        let pool = pool.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let r = pool
                .call_with(
                    CallOptions::method("sleep").timeout(Duration::from_secs(20)),
                    |c, ctx| async move { c.sleep(ctx, ms).await },
                )
                .await;
            (r, state.sleeps_finished.load(Ordering::SeqCst))
        })
    });
    let (mut ok, mut early_overloaded, mut other) = (0, 0, 0);
    for r in join_all(calls).await {
        match r.unwrap() {
            (Ok(_), _) => ok += 1,
            (Err(e @ Error::Overloaded { .. }), 0) => {
                assert!(e.is_retryable() && e.never_executed());
                early_overloaded += 1;
            }
            (r, finished) => {
                eprintln!("unexpected: {r:?} after {finished} finished");
                other += 1;
            }
        }
    }
    (ok, early_overloaded, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_connection_cap_with_queue() {
    let cfg = ServerConfig {
        max_in_flight_per_connection: 2,
        queue_len: 2,
        queue_timeout: Duration::from_secs(10),
        ..ServerConfig::default()
    };
    let state = Arc::new(LabState::default());
    let server = start(&localhost(), cfg, state.clone()).await;
    let (ok, overloaded, other) = fire(&server, &state, 10, 1500).await;
    assert_eq!(
        (ok, overloaded, other),
        (4, 6, 0),
        "2 run, 2 wait, 6 refused at once"
    );
    let m = server.metrics().method("lab.sleep").unwrap();
    assert_eq!(m.errors.get(&-2003), Some(&6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_cap_refuses_when_the_queue_is_full() {
    let cfg = ServerConfig {
        max_in_flight_bytes: 1,
        queue_len: 0,
        ..ServerConfig::default()
    };
    let state = Arc::new(LabState::default());
    let server = start(&localhost(), cfg, state.clone()).await;
    let (ok, overloaded, other) = fire(&server, &state, 3, 1500).await;
    assert_eq!((ok, overloaded, other), (1, 2, 0));
}

#[tokio::test]
async fn connection_cap_refuses_at_the_preamble() {
    let cfg = ServerConfig {
        max_connections: 1,
        ..ServerConfig::default()
    };
    let server = start(&localhost(), cfg, Default::default()).await;
    let first: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    first
        .call(|c, ctx| async move { c.sleep(ctx, 0).await })
        .await
        .unwrap();
    let second: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    let err = second
        .call(|c, ctx| async move { c.sleep(ctx, 0).await })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Overloaded { .. }), "{err:?}");
}
