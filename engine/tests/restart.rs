//! A peer restarted under the same name (its control port) with a new buffer layout is found
//! again: a request outside the cached descriptor refreshes it once before failing.

use std::time::{Duration, Instant};

mod common;
use common::*;
use yuebing_engine::{EngineConfig, TransferEngine, TransportKind};

/// An engine whose control service listens on `port` (retried while the port is still held by
/// an engine that was just dropped).
async fn start_on(port: u16) -> TransferEngine {
    let started = Instant::now();
    loop {
        let config = EngineConfig {
            bind: format!("127.0.0.1:{port}"),
            ..EngineConfig::default()
        };
        match TransferEngine::start(config).await {
            Ok(e) => return e,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                tracing::debug!(error = %e, "port still held");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("could not start on port {port}: {e}"),
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn restarted_peer_is_found_again(forced: Option<TransportKind>) {
    let a = TransferEngine::start(EngineConfig {
        transport: forced,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let port = free_port();
    let b = start_on(port).await;
    let src = a.allocate(1 << 20, false).unwrap();
    src.put(0, &pattern(1 << 20, 3)).unwrap();
    let old = b.allocate(1 << 20, false).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    a.write(src.addr(), peer, old.addr(), 4096).await.unwrap();
    let name = b.name().to_string();
    drop(b);

    // The same name, a new instance, a new layout (the old buffer is still mapped here, so the
    // new one cannot take its addresses).
    let b = start_on(port).await;
    assert_eq!(b.name(), name);
    let _first = b.allocate(64 << 10, false).unwrap();
    let new = b.allocate(2 << 20, false).unwrap();
    a.write(src.addr(), peer, new.addr() + 100, 1 << 20)
        .await
        .expect("the first transfer to the restarted peer's new memory succeeds");
    assert!(read_back(&new, 100, 1 << 20) == pattern(1 << 20, 3));
    let expected = forced.unwrap_or(TransportKind::Shm);
    assert_eq!(a.selected_transport(peer).unwrap(), expected);
    assert_eq!(
        a.segment_descriptor(peer).unwrap().instance_id,
        b.instance_id()
    );
    // A buffer the peer registers after that is found the same way.
    let later = b.allocate(8192, false).unwrap();
    a.read(src.addr(), peer, later.addr(), 8192).await.unwrap();
    // A range the peer never registered still fails, after one refresh.
    let err = a
        .write(src.addr(), peer, later.addr() + 8192, 4096)
        .await
        .unwrap_err();
    assert_eq!(err.code(), -3504, "{err:?}");
    drop(old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_restarted_with_a_new_layout_is_written_over_tcp() {
    restarted_peer_is_found_again(Some(TransportKind::Tcp)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_restarted_with_a_new_layout_is_written_over_shm() {
    restarted_peer_is_found_again(None).await;
}
