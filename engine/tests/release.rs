//! Releasing memory revokes every access to it: a peer that stalls mid-request can never make
//! the engine write into memory after `unregister` returned.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::*;
use yuebing_engine::{EngineBuffer, EngineConfig, Location, TransferEngine};

/// The byte at `addr`, read atomically (a transport may be writing it).
///
/// # Safety
/// `addr` must stay mapped for the call.
unsafe fn byte_at(addr: u64) -> u8 {
    // SAFETY: the caller keeps `addr` mapped. The only writer meanwhile is the kernel (the
    // target's `recv` into this memory), whose stores are not Rust accesses, and this test reads
    // the byte only atomically; no other reference to it is held.
    unsafe { (*(addr as *const AtomicU8)).load(Ordering::Relaxed) }
}

/// A hand-written initiator on the tcp data port: the hello of protocol version 2, no token.
async fn data_connection(engine: &TransferEngine) -> TcpStream {
    let mut s = TcpStream::connect(engine.data_endpoint().unwrap())
        .await
        .unwrap();
    s.write_all(b"YBTCP\0\0\x02").await.unwrap();
    s.write_u16(0).await.unwrap();
    assert_eq!(s.read_u8().await.unwrap(), 0, "hello accepted");
    s
}

/// A write request header (see the wire format in `transport/tcp/wire.rs`).
fn write_header(instance: u64, addr: u64, len: u64) -> Vec<u8> {
    let mut h = b"YT".to_vec();
    h.extend_from_slice(&[1, 0]);
    for v in [1u64, instance, addr, len] {
        h.extend_from_slice(&v.to_be_bytes());
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_region_is_unregistered_mid_payload_lands_nothing_after() {
    let engine = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    let len = 1usize << 20;
    // Caller memory (an unregistered engine buffer serves as such), so that it can be
    // registered again at the same address as a canary.
    let memory = EngineBuffer::allocate(len, true).unwrap();
    let addr = memory.addr();
    // SAFETY (test): `memory` outlives both registrations below and the test touches its bytes
    // only through raw copies and atomic loads.
    unsafe { engine.register_exported(addr as *mut u8, len, Location::default(), RW) }.unwrap();

    let mut peer = data_connection(&engine).await;
    peer.write_all(&write_header(engine.instance_id(), addr, len as u64))
        .await
        .unwrap();
    let half = len / 2;
    peer.write_all(&vec![0xAA; half]).await.unwrap();
    // The target is mid-payload once the first half has landed.
    let start = Instant::now();
    // SAFETY (test): `memory` is mapped for the whole test.
    while unsafe { byte_at(addr + half as u64 - 1) } != 0xAA {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "first half never landed"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let unregistering = Instant::now();
    engine.unregister(addr).unwrap();
    assert!(
        unregistering.elapsed() < Duration::from_secs(5),
        "unregister waited for the peer"
    );
    // The canary: zeroed and registered again at the same address.
    memory.put(0, &vec![0u8; len]).unwrap();
    // SAFETY (test): as above.
    unsafe { engine.register_exported(addr as *mut u8, len, Location::default(), RW) }.unwrap();

    // The peer goes on sending the rest of its payload.
    let _ = peer.write_all(&vec![0xBB; len - half]).await;
    // The target shut the connection down: no acknowledgement comes, only the end.
    let mut answer = [0u8; 24];
    let read = tokio::time::timeout(Duration::from_secs(10), peer.read(&mut answer)).await;
    assert!(
        read_back(&memory, 0, len).iter().all(|&b| b == 0),
        "bytes landed in the region after unregister returned"
    );
    match read {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("the target answered the write: {:?}", &answer[..n]),
        Err(_) => panic!("the connection was left open"),
    }
    engine.unregister(addr).unwrap();
}
