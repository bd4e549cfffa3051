//! Frame limits in both directions, and garbage on the port.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use yuebing_rpc::{Attachment, Error, Pool, PoolConfig, ServerConfig};

use crate::common::*;

const MAX: u64 = 64 << 10;

async fn small_server() -> yuebing_rpc::RunningServer {
    let cfg = ServerConfig {
        max_frame: MAX,
        ..ServerConfig::default()
    };
    start(&localhost(), cfg, Default::default()).await
}

#[tokio::test]
async fn oversize_request_fails_alone_and_the_connection_stays() {
    let server = small_server().await;
    let pool = pool(&server);
    let big = Bytes::from(vec![1u8; (MAX + 1) as usize]);
    for payload in [big.clone(), Bytes::new()] {
        let err = pool
            .call(|c, ctx| {
                let x = Attachment(payload.clone());
                async move { c.echo_att(ctx, x).await }
            })
            .await;
        if payload.is_empty() {
            assert!(err.is_ok(), "{err:?}");
        } else {
            match err.unwrap_err() {
                Error::FrameTooLarge { len, max } => {
                    assert!(len > MAX, "{len}");
                    assert_eq!(max, MAX);
                }
                other => panic!("expected FrameTooLarge, got {other:?}"),
            }
        }
    }
    let err = pool
        .call(|c, ctx| {
            let x = big.clone();
            async move { c.echo(ctx, x).await }
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), -2002, "{err:?}");
    let ok = pool
        .call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"after")).await })
        .await
        .unwrap();
    assert_eq!(ok, "after");
    let status = pool.status();
    assert_eq!(status.live_connections, 1, "same connection throughout");
    assert_eq!(status.calls_per_connection[0].1, 4);
}

#[tokio::test]
async fn oversize_response_is_frame_too_large_for_the_caller() {
    let (server, _) = start_default().await;
    let cfg = PoolConfig {
        max_frame: MAX,
        ..PoolConfig::new("lab")
    };
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), cfg);
    let err = pool
        .call(|c, ctx| async move { c.make(ctx, 2 * MAX).await })
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::FrameTooLarge { max: MAX, .. }),
        "{err:?}"
    );
    let ok = pool
        .call(|c, ctx| async move { c.make(ctx, 10).await })
        .await
        .unwrap();
    assert_eq!(ok.len(), 10);
    assert_eq!(pool.status().live_connections, 1);
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let (server, _) = start_default().await;
    let pool = pool(&server);
    let call = || pool.call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"x")).await });
    call().await.unwrap();

    let addr = server.local_addr().unwrap();
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), raw.read(&mut buf))
        .await
        .expect("server closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "no reply to garbage, just EOF");

    call().await.unwrap();
    assert_eq!(pool.status().live_connections, 1);
}
