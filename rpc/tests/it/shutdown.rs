//! Graceful shutdown lets calls in flight finish, refuses new connections, reports cuts.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use yuebing_rpc::{CallOptions, Error};

use crate::common::*;
use yuebing_testkit::eventually;

type Call = tokio::task::JoinHandle<Result<u64, Error>>;

/// Starts `n` calls sleeping `ms` each and returns once all have reached the handler.
async fn sleeping_calls(
    pool: &yuebing_rpc::Pool<LabRpc>,
    state: &LabState,
    n: u64,
    ms: u64,
) -> Vec<Call> {
    let calls = (0..n)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.call_with(CallOptions::method("sleep"), |c, ctx| async move {
                    c.sleep(ctx, ms).await
                })
                .await
            })
        })
        .collect();
    let started = || state.sleeps_started.load(Ordering::SeqCst) == n;
    eventually("every call started", Duration::from_secs(2), async || {
        started()
    })
    .await;
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_calls_complete_and_new_connections_are_refused() {
    let (server, state) = start_default().await;
    let addr = server.local_addr().unwrap();
    let calls = sleeping_calls(&pool(&server), &state, 10, 400).await;
    let stopping = tokio::spawn(server.shutdown(Duration::from_secs(10)));
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "new connections are refused during shutdown");
    let results = join_all(calls).await;
    for r in results {
        assert_eq!(r.unwrap().unwrap(), 400);
    }
    let report = stopping.await.unwrap();
    assert_eq!(report.in_flight_at_start, 10);
    assert_eq!(report.cut, 0);
    assert_eq!(state.sleeps_finished.load(Ordering::SeqCst), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_grace_period_are_cut_and_counted() {
    let (server, state) = start_default().await;
    let calls = sleeping_calls(&pool(&server), &state, 3, 10_000).await;
    let report = server.shutdown(Duration::from_millis(100)).await;
    assert_eq!(report.cut, 3);
    for r in join_all(calls).await {
        let err = r.unwrap().unwrap_err();
        assert!(matches!(err, Error::ConnectionLost { .. }), "{err:?}");
    }
    assert_eq!(state.sleeps_cancelled.load(Ordering::SeqCst), 3);
}
