//! The preamble refuses a wrong version, an unknown service and a missing or wrong token, each
//! with its typed error; garbage after a good preamble closes that connection only.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use yuebing_rpc::{Error, Pool, PoolConfig, ServerConfig, PROTOCOL_VERSION};

use crate::common::*;

/// A hello laid out as the preamble docs say.
fn hello(version: u16, service: &str, token: &str) -> Vec<u8> {
    let mut v = b"YUEBING\0".to_vec();
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(&(64u64 << 20).to_be_bytes());
    v.extend_from_slice(&(service.len() as u16).to_be_bytes());
    v.extend_from_slice(&(token.len() as u16).to_be_bytes());
    v.extend_from_slice(service.as_bytes());
    v.extend_from_slice(token.as_bytes());
    v
}

/// Sends `bytes` and returns the reply's (version, status).
async fn raw_reply(addr: std::net::SocketAddr, bytes: &[u8]) -> (tokio::net::TcpStream, u16, i32) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut fixed = [0u8; 24];
    s.read_exact(&mut fixed).await.unwrap();
    assert_eq!(&fixed[..8], b"YUEBING\0");
    let version = u16::from_be_bytes([fixed[8], fixed[9]]);
    let status = i32::from_be_bytes(fixed[10..14].try_into().unwrap());
    (s, version, status)
}

#[tokio::test]
async fn wrong_version_is_refused_with_its_code() {
    let (server, _) = start_default().await;
    let addr = server.local_addr().unwrap();
    let (mut s, version, status) = raw_reply(addr, &hello(PROTOCOL_VERSION + 1, "lab", "")).await;
    assert_eq!(version, PROTOCOL_VERSION);
    assert_eq!(status, Error::VersionMismatch { ours: 0, theirs: 0 }.code());
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest))
        .await
        .expect("server closes after refusing")
        .ok();
    let (_s, _, ok) = raw_reply(addr, &hello(PROTOCOL_VERSION, "lab", "")).await;
    assert_eq!(ok, 0);
}

#[tokio::test]
async fn unknown_service_is_refused() {
    let (server, _) = start_default().await;
    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), PoolConfig::new("nope"));
    let err = pool
        .call(|c, ctx| async move { c.echo(ctx, Bytes::new()).await })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        Error::UnknownService {
            name: "nope".into()
        }
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn token_is_checked() {
    let cfg = ServerConfig {
        token: Some("s3cret".parse().unwrap()),
        ..ServerConfig::default()
    };
    let server = start(&localhost(), cfg, Default::default()).await;
    let with = |token: Option<&str>| {
        let cfg = PoolConfig {
            token: token.map(|t| t.parse().unwrap()),
            ..PoolConfig::new("lab")
        };
        Pool::<LabRpc>::new(server.local_endpoint().clone(), cfg)
    };
    for token in [None, Some("wrong")] {
        let err = with(token)
            .call(|c, ctx| async move { c.echo(ctx, Bytes::new()).await })
            .await
            .unwrap_err();
        assert_eq!(err, Error::Unauthenticated, "token {token:?}");
        assert_eq!(err.code(), -2004);
    }
    let ok = with(Some("s3cret"))
        .call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"in")).await })
        .await
        .unwrap();
    assert_eq!(ok, "in");
}

#[tokio::test]
async fn garbage_after_the_preamble_closes_that_connection() {
    let (server, _) = start_default().await;
    let pool = pool(&server);
    let addr = server.local_addr().unwrap();
    let (mut s, _, status) = raw_reply(addr, &hello(PROTOCOL_VERSION, "lab", "")).await;
    assert_eq!(status, 0);
    s.write_all(&[0xAB; 64]).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
        .await
        .expect("closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let ok = pool
        .call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"fine")).await })
        .await
        .unwrap();
    assert_eq!(ok, "fine");
}
