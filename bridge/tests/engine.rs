//! The transfer engine through the bridge, from a plain thread: registration, a segment, single
//! transfers in their blocking and callback forms, and a batch submitted, waited for and freed.

use std::time::Duration;

use yuebing_bridge::{BlockingEngine, Bridge, BridgeConfig};
use yuebing_engine::{EngineConfig, RemoteAccess, TaskState, TransferRequest, TransportKind};

#[test]
fn an_engine_transfers_from_a_plain_thread() {
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let cfg = EngineConfig {
        transport: Some(TransportKind::Tcp),
        ..EngineConfig::default()
    };
    let a = BlockingEngine::start(&bridge, cfg).unwrap();
    let b = BlockingEngine::start(&bridge, EngineConfig::default()).unwrap();
    let target = b
        .allocate_exported(1 << 20, true, RemoteAccess::READ_WRITE)
        .unwrap();
    let local = a.allocate(1 << 20, true).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    // SAFETY: nothing else touches `local` now: no transfer from or into it is under way.
    unsafe { local.write_at(0, &pattern) }.unwrap();
    let peer = a.open_segment(b.name()).unwrap();
    // Target offsets are addresses in the peer's segment.
    let there = target.addr() + 8192;

    // Blocking write, then the callback form of a read back into another range.
    a.write(local.addr(), peer, there, 4096).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    a.read_call(local.addr() + 65536, peer, there, 4096)
        .then(move |r| tx.send(r).unwrap());
    rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    let mut back = vec![0u8; 4096];
    // SAFETY: the read's callback ran, so its transfer is final and nothing writes there now.
    unsafe { local.read_at(65536, &mut back) }.unwrap();
    assert_eq!(back, pattern);

    // A batch of 8 reads, waited for by the blocking facade.
    let batch = a.allocate_batch(8).unwrap();
    let requests: Vec<_> = (0..8u64)
        .map(|i| TransferRequest::read(local.addr() + (i + 1) * 4096, peer, there, 4096))
        .collect();
    let tasks = a.submit(batch, &requests).unwrap();
    assert_eq!(tasks, 0..8);
    let status = a.wait(batch).unwrap();
    assert_eq!(status.state, TaskState::Completed, "{status:?}");
    assert_eq!(status.bytes, 8 * 4096);
    assert_eq!(a.status(batch).unwrap().completed, 8);
    assert_eq!(a.cancel(batch).unwrap(), 0, "nothing left to cancel");
    a.free_batch(batch).unwrap();
    // A freed batch is an engine error with the engine's code.
    let e = a.status(batch).unwrap_err();
    assert!((-3999..=-3000).contains(&e.code()), "{e}");

    // Out-of-range addresses keep their typed errors.
    let e = a
        .write(local.addr(), peer, target.addr() + (1 << 20) - 10, 4096)
        .unwrap_err();
    assert!((-3999..=-3000).contains(&e.code()), "{e}");
    a.unregister(local.addr()).unwrap();
    bridge.shutdown().unwrap();
    // After shutdown the synchronous calls that would start work refuse, with the bridge's code.
    assert_eq!(a.allocate_batch(1).unwrap_err().code(), -4002);
    assert_eq!(a.open_segment(b.name()).unwrap_err().code(), -4002);
}
