//! The cluster token on every listener of an engine: its control service, its tcp data port
//! and its shm side channel each refuse a peer with a missing or wrong token with the typed
//! error (`Unauthenticated`, −2004), and nothing is copied.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{read_back, TestBytes};
use yuebing_engine::memory::{MemoryRegistry, RemoteAccess};
use yuebing_engine::transport::{ShmTransport, TcpTransport};
use yuebing_engine::{
    EngineBuffer, EngineConfig, Job, Opcode, TcpConfig, TransferEngine, Transport,
};
use yuebing_rpc::Token;
use yuebing_testkit::patterns::pattern;

fn token(t: &str) -> Token {
    Token::new(t).unwrap()
}

async fn engine(t: Option<&str>) -> TransferEngine {
    TransferEngine::start(EngineConfig {
        token: t.map(token),
        ..EngineConfig::default()
    })
    .await
    .unwrap()
}

/// A write of `src` (registered in `memory`) to `dst` of `target`, as a transport runs it.
fn job(memory: &MemoryRegistry, src: &EngineBuffer, target: &TransferEngine, dst: u64) -> Job {
    Job {
        opcode: Opcode::Write,
        local: memory.lease(src.addr(), 4096).unwrap(),
        remote: dst,
        len: 4096,
        segment: Arc::new(target.descriptor()),
        deadline: Instant::now() + Duration::from_secs(10),
        can_spin: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_refuses_a_wrong_or_missing_token_with_the_typed_error() {
    let target = engine(Some("right-token")).await;
    let dst = target
        .allocate_exported(4096, false, RemoteAccess::READ_WRITE)
        .unwrap();
    dst.put(0, &[0u8; 4096]).unwrap();

    // The control service: the descriptor exchange itself is refused.
    for wrong in [None, Some("wrong-token")] {
        let peer = engine(wrong).await;
        let e = peer.open_segment(target.name()).await.unwrap_err();
        assert_eq!(e.code(), -2004, "control service, token {wrong:?}: {e}");
    }

    // The data listeners, each reached by a transport of its own with a wrong token.
    let memory = Arc::new(MemoryRegistry::default());
    let src = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
    src.put(0, &pattern(4096, 3)).unwrap();
    memory
        .register_buffer(src.clone(), RemoteAccess::LOCAL_ONLY)
        .unwrap();
    let handle = tokio::runtime::Handle::current();
    for wrong in [None, Some(token("wrong-token"))] {
        let tcp = TcpTransport::start(
            memory.clone(),
            1,
            "127.0.0.1:0",
            TcpConfig::default(),
            wrong.clone(),
            handle.clone(),
        )
        .await
        .unwrap();
        let e = tcp
            .transfer(job(&memory, &src, &target, dst.addr()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), -2004, "tcp data port, token {wrong:?}: {e}");
        let shm = ShmTransport::start(
            memory.clone(),
            2,
            wrong.clone(),
            Duration::from_secs(5),
            handle.clone(),
        )
        .await
        .unwrap();
        assert!(shm.can_reach(&target.descriptor(), true));
        let e = shm
            .transfer(job(&memory, &src, &target, dst.addr()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), -2004, "shm side channel, token {wrong:?}: {e}");
    }
    assert_eq!(read_back(&dst, 0, 4096), vec![0u8; 4096], "nothing copied");

    // With the right token, both data paths deliver.
    let right = Some(token("right-token"));
    let tcp = TcpTransport::start(
        memory.clone(),
        3,
        "127.0.0.1:0",
        TcpConfig::default(),
        right.clone(),
        handle.clone(),
    )
    .await
    .unwrap();
    tcp.transfer(job(&memory, &src, &target, dst.addr()))
        .await
        .unwrap();
    assert_eq!(read_back(&dst, 0, 4096), pattern(4096, 3));
    let shm = ShmTransport::start(memory.clone(), 4, right, Duration::from_secs(5), handle)
        .await
        .unwrap();
    src.put(0, &pattern(4096, 9)).unwrap();
    shm.transfer(job(&memory, &src, &target, dst.addr()))
        .await
        .unwrap();
    assert_eq!(read_back(&dst, 0, 4096), pattern(4096, 9));
}
