//! A server killed and restarted on the same port: the pool reconnects by itself.

use std::time::Duration;

use bytes::Bytes;
use yuebing_rpc::{Endpoint, Error, ServerConfig};

use crate::common::*;
use yuebing_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_reconnects_after_server_restart() {
    let (server, state) = start_default().await;
    let endpoint = server.local_endpoint().clone();
    let pool = pool(&server);
    let hi = Bytes::from_static(b"hi");
    let call = |pool: yuebing_rpc::Pool<LabRpc>, x: Bytes| async move {
        pool.call(|c, ctx| {
            let x = x.clone();
            async move { c.echo(ctx, x).await }
        })
        .await
    };
    assert_eq!(call(pool.clone(), hi.clone()).await.unwrap(), hi);
    let first_conn = pool.status().calls_per_connection[0].0;

    server.kill().await;
    eventually(
        "the pool notices the dead connection",
        Duration::from_secs(2),
        async || pool.status().live_connections == 0,
    )
    .await;
    let err = call(pool.clone(), hi.clone()).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");

    let again = start(&endpoint, ServerConfig::default(), state).await;
    assert_eq!(again.local_endpoint(), &endpoint);
    for _ in 0..5 {
        assert_eq!(call(pool.clone(), hi.clone()).await.unwrap(), hi);
    }
    let status = pool.status();
    assert_eq!(status.live_connections, 1);
    assert_ne!(
        status.calls_per_connection[0].0, first_conn,
        "a new connection"
    );
}

#[tokio::test]
async fn unix_socket_and_call_context() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Endpoint::Unix(dir.path().join("lab.sock"));
    let state = std::sync::Arc::new(LabState::default());
    let server = start(&endpoint, ServerConfig::default(), state).await;
    let pool = pool(&server);
    let (peer, conn_id, _request_id, method) = pool
        .call(|c, ctx| async move { c.whoami(ctx).await })
        .await
        .unwrap();
    assert!(peer.starts_with("unix:"), "{peer}");
    assert_eq!(conn_id, 1);
    assert_eq!(method, "Lab.whoami");
    let m = server.metrics().method("lab.whoami").unwrap();
    assert_eq!((m.calls, m.in_flight), (1, 0));
    server.shutdown(Duration::from_secs(1)).await;
    assert!(!dir.path().join("lab.sock").exists(), "socket file removed");
}
