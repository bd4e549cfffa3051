//! What a pool leaves behind when it is dropped, and what a call waits for while it grows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use yuebing_rpc::{CallOptions, Endpoint, Pool, PoolConfig};

use crate::common::*;
use yuebing_testkit::eventually;

/// A TCP forwarder to `upstream`: the first `pass` connections reach it, later ones are
/// accepted and left unanswered (a connect that hangs in its preamble). Counts the connections
/// whose client side is still open.
struct Forwarder {
    endpoint: Endpoint,
    open: Arc<AtomicUsize>,
}

async fn forwarder(upstream: std::net::SocketAddr, pass: usize) -> Forwarder {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap().to_string().parse().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let count = open.clone();
    tokio::spawn(async move {
        let mut accepted = 0;
        while let Ok((mut client, _)) = listener.accept().await {
            accepted += 1;
            let count = count.clone();
            count.fetch_add(1, Ordering::SeqCst);
            let forward = accepted <= pass;
            tokio::spawn(async move {
                if forward {
                    let mut server = TcpStream::connect(upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                } else {
                    // Read (and ignore) until the client closes.
                    let mut buf = [0u8; 256];
                    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Forwarder { endpoint, open }
}

/// Dropping a pool closes its connections: nothing else keeps them (their watchers only
/// observe them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pool_closes_its_connections() {
    let (server, _) = start_default().await;
    let fwd = forwarder(server.local_addr().unwrap(), usize::MAX).await;
    let cfg = PoolConfig {
        max_connections: 2,
        min_connections: 2,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(fwd.endpoint.clone(), cfg);
    assert_eq!(pool.warm_up().await.unwrap(), 2);
    pool.call(|c, ctx| async move { c.whoami(ctx).await })
        .await
        .unwrap();
    assert_eq!(fwd.open.load(Ordering::SeqCst), 2);
    drop(pool);
    eventually(
        "the connections closed after the pool was dropped",
        Duration::from_secs(10),
        async || match fwd.open.load(Ordering::SeqCst) {
            0 => Ok(()),
            n => Err(format!("{n} connections still open")),
        },
    )
    .await;
}

/// Dropping a pool stops its connects under way: the socket of one hanging in its preamble is
/// closed long before the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pool_stops_its_connects() {
    let (server, _) = start_default().await;
    let fwd = forwarder(server.local_addr().unwrap(), 0).await;
    let cfg = PoolConfig {
        connect_timeout: Duration::from_secs(120),
        max_retries: 0,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(fwd.endpoint.clone(), cfg);
    let err = pool
        .call_with(
            CallOptions::default().timeout(Duration::from_millis(200)),
            |c, ctx| async move { c.whoami(ctx).await },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, yuebing_rpc::Error::Timeout), "{err:?}");
    assert_eq!(fwd.open.load(Ordering::SeqCst), 1, "the connect hangs");
    drop(pool);
    eventually(
        "the connect ended when the pool was dropped",
        Duration::from_secs(10),
        async || fwd.open.load(Ordering::SeqCst) == 0,
    )
    .await;
}

/// A call that finds an open connection never waits for a connect, even when every open one
/// carries `grow_threshold` calls: it is sent on an open one while the pool grows behind it.
/// Here the grow hangs, and the two calls can only end together (each waits for the other at
/// the server), so a call waiting for the grow would hold both until their deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_never_waits_for_a_grow_while_a_connection_is_open() {
    let (server, _) = start_default().await;
    let fwd = forwarder(server.local_addr().unwrap(), 1).await;
    let cfg = PoolConfig {
        max_connections: 2,
        min_connections: 1,
        grow_threshold: 1,
        connect_timeout: Duration::from_secs(120),
        max_retries: 0,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(fwd.endpoint.clone(), cfg);
    assert_eq!(pool.warm_up().await.unwrap(), 1);
    let calls = (0..2).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.call_with(
                CallOptions::method("gather").timeout(Duration::from_secs(30)),
                |c, ctx| async move { c.gather(ctx, 2).await },
            )
            .await
        })
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap().expect("sent on the open connection");
    }
    assert_eq!(pool.status().live_connections, 1, "the grow still hangs");
}
