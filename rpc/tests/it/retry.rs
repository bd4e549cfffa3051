//! A call that may have reached a dead server is resent only if it is idempotent.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use yuebing_rpc::{CallOptions, Error, Pool, PoolConfig, ServerConfig};

use crate::common::*;
use yuebing_testkit::eventually;

async fn kill_and_restart_during_call(idempotent: bool) -> (Result<u64, Error>, u64) {
    let state = Arc::new(LabState::default());
    let server = start(&localhost(), ServerConfig::default(), state.clone()).await;
    let endpoint = server.local_endpoint().clone();
    let cfg = PoolConfig {
        initial_backoff: Duration::from_millis(50),
        max_retries: 5,
        ..PoolConfig::new("lab").idempotent(["bump"])
    };
    let pool: Pool<LabRpc> = Pool::new(endpoint.clone(), cfg);
    let opts = CallOptions::method("bump")
        .idempotent(idempotent)
        .timeout(Duration::from_secs(5));
    let call = tokio::spawn(async move {
        pool.call_with(
            opts,
            |c, ctx| async move { c.bump_and_sleep(ctx, 300).await },
        )
        .await
    });
    eventually(
        "the request reached the server",
        Duration::from_secs(2),
        async || state.bumps.load(Ordering::SeqCst) == 1,
    )
    .await;
    server.kill().await;
    let _again = start(&endpoint, ServerConfig::default(), state.clone()).await;
    let result = call.await.unwrap();
    (result, state.bumps.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_idempotent_call_is_not_resent() {
    let (result, bumps) = kill_and_restart_during_call(false).await;
    let err = result.unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err:?}");
    assert_eq!(bumps, 1, "executed once, never resent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_call_is_resent_within_its_deadline() {
    let (result, bumps) = kill_and_restart_during_call(true).await;
    assert_eq!(result.unwrap(), 2, "the resend ran on the restarted server");
    assert_eq!(bumps, 2);
}

#[tokio::test]
async fn declared_idempotent_method_is_resent_without_per_call_override() {
    let cfg = PoolConfig::new("lab").idempotent(["bump"]);
    assert!(CallOptions::method("bump").is_idempotent_for(&cfg));
    assert!(!CallOptions::method("other").is_idempotent_for(&cfg));
}
