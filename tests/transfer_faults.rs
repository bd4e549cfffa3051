//! Fault tests of the Transfer Engine with a real target process (`yuebing bench-target`), made
//! deterministic as conventions.md says: stop the peer, submit, then kill it.

mod common;
use common::TestBytes;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use yuebing::bench::transfer::target::TargetProcess;
use yuebing::engine::{
    EngineBuffer, EngineConfig, Error, SegmentHandle, TransferEngine, TransferRequest,
    TransportKind,
};

/// The target process (killed and reaped when dropped, also when a test panics).
struct Target(TargetProcess);

impl Target {
    fn start(len: usize) -> Target {
        Target(
            TargetProcess::spawn(Path::new(env!("CARGO_BIN_EXE_yuebing")), len, 1, None)
                .expect("target starts"),
        )
    }

    /// Sends `sig` (after SIGSTOP, returns once the process is stopped).
    fn signal(&self, sig: i32) {
        let pid = self.0.child.id();
        yuebing_testkit::process::signal(pid, sig)
            .unwrap_or_else(|e| panic!("signal {sig} to {pid}: {e}"));
    }

    fn kill(&mut self) {
        self.0.child.kill().unwrap();
        self.0.child.wait().unwrap();
    }
}

/// A target serving `len` bytes, an initiator (tcp forced unless `shm`), a buffer of `len`
/// bytes, the opened peer, and one good write of 4 KiB already done.
/// What [`setup`] returns: the target, the initiator, its buffer, the opened peer and the
/// target's buffer address.
type Setup = (
    Target,
    TransferEngine,
    Arc<EngineBuffer>,
    SegmentHandle,
    u64,
);

async fn setup(len: usize, shm: bool) -> Setup {
    let target = Target::start(len);
    let engine = if shm {
        TransferEngine::start(EngineConfig::default())
            .await
            .unwrap()
    } else {
        initiator().await
    };
    let src = engine.allocate(len, true).unwrap();
    let peer = engine.open_segment(&target.0.announce.name).await.unwrap();
    let remote = target.0.announce.addr;
    engine.write(src.addr(), peer, remote, 4096).await.unwrap();
    (target, engine, src, peer, remote)
}

/// As [`setup`] over tcp, with the target's first `len` bytes written 0xaa.
async fn setup_filled(len: usize) -> Setup {
    let (target, engine, src, peer, remote) = setup(len, false).await;
    src.put(0, &vec![0xaa; len]).unwrap();
    engine
        .write(src.addr(), peer, remote, len as u64)
        .await
        .unwrap();
    (target, engine, src, peer, remote)
}

async fn initiator() -> TransferEngine {
    TransferEngine::start(EngineConfig {
        transport: Some(TransportKind::Tcp),
        ..EngineConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stopped_then_killed_mid_transfer_fails_or_times_out() {
    let (target, engine, src, peer, remote) = setup(8 << 20, false).await;

    target.signal(libc::SIGSTOP);
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, remote, 8 << 20)
        .with_deadline(Duration::from_secs(3));
    let call = tokio::spawn({
        let engine = engine.clone();
        async move { engine.transfer(req).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    target.signal(libc::SIGKILL);
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::PeerFailed { .. } | Error::Timeout),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_peer_times_out_at_the_deadline() {
    let (target, engine, src, peer, remote) = setup(1 << 20, false).await;
    target.signal(libc::SIGSTOP);
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, remote, 4096)
        .with_deadline(Duration::from_millis(300));
    assert_eq!(engine.transfer(req).await.unwrap_err(), Error::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    target.signal(libc::SIGCONT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_killed_before_the_submit_fails_the_task() {
    let (mut target, engine, src, peer, remote) = setup(1 << 20, false).await;
    target.kill();
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, remote, 4096)
        .with_deadline(Duration::from_secs(3));
    let err = engine.transfer(req).await.unwrap_err();
    assert!(
        matches!(err, Error::PeerFailed { .. } | Error::Timeout),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_shm_a_peer_killed_before_the_submit_gets_no_completed_write() {
    let (mut target, engine, src, peer, remote) = setup(1 << 20, true).await;
    assert_eq!(engine.selected_transport(peer).unwrap(), TransportKind::Shm);
    target.kill();
    for attempt in 0..3 {
        let req = TransferRequest::write(src.addr(), peer, remote, 4096)
            .via(TransportKind::Shm)
            .with_deadline(Duration::from_secs(2));
        let err = engine.transfer(req).await.unwrap_err();
        if attempt == 0 {
            // The mapping is still there; the liveness check refuses to call the copy done.
            assert!(matches!(err, Error::PeerFailed { .. }), "{err:?}");
        } else {
            // Later the dead peer is unreachable over shm altogether.
            assert!(
                matches!(
                    err,
                    Error::PeerFailed { .. } | Error::InvalidArgument { .. }
                ),
                "{err:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_after_a_timeout_never_lands_in_local_memory() {
    late_answer_is_dropped(|engine, req| async move {
        let req = req.with_deadline(Duration::from_millis(200));
        assert_eq!(engine.transfer(req).await.unwrap_err(), Error::Timeout);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_to_a_dropped_transfer_never_lands_in_local_memory() {
    late_answer_is_dropped(|engine, req| async move {
        // The default deadline is far off: the caller stops waiting by dropping the future.
        let waited = tokio::time::timeout(Duration::from_millis(200), engine.transfer(req)).await;
        assert!(waited.is_err(), "the stopped peer answered: {waited:?}");
    })
    .await;
}

/// A read of 1 MiB is sent to a stopped peer and given up by `give_up`; the answer arriving
/// after the peer resumes must not land in the local buffer, and the next read completes.
async fn late_answer_is_dropped<F, Fut>(give_up: F)
where
    F: FnOnce(TransferEngine, TransferRequest) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let len = 1 << 20;
    let (target, engine, _src, peer, remote) = setup_filled(len).await;
    let dst = engine.allocate(len, true).unwrap();
    dst.put(0, &vec![0x55; len]).unwrap();
    target.signal(libc::SIGSTOP);
    let req = TransferRequest::read(dst.addr(), peer, remote, len as u64);
    give_up(engine.clone(), req).await;
    // The caller may reuse (or free) the memory now: the answer arriving later is dropped.
    target.signal(libc::SIGCONT);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut back = vec![0u8; len];
    dst.get(0, &mut back).unwrap();
    assert!(
        back.iter().all(|&b| b == 0x55),
        "late bytes landed after the caller gave up"
    );
    // The connection stayed in step: the next read completes with the right bytes.
    engine
        .read(dst.addr(), peer, remote, len as u64)
        .await
        .unwrap();
    dst.get(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0xaa));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peers_shm_socket_is_removed_by_the_next_engine_to_start() {
    let (mut target, engine, _src, peer, _remote) = setup(1 << 20, true).await;
    let descriptor = engine.segment_descriptor(peer).unwrap();
    let socket = descriptor.transports["shm"]["socket"]
        .as_str()
        .map(std::path::PathBuf::from)
        .expect("the target publishes its shm socket");
    target.kill();
    // SIGKILL gave the target no chance to remove its socket ...
    assert!(socket.exists(), "{} is gone already", socket.display());
    // ... so the next engine to start on this host removes it.
    let _next = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    assert!(!socket.exists(), "{} is still there", socket.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_local_range_is_unregistered_fails_at_once_and_its_answer_never_lands() {
    let len = 1 << 20;
    let (target, engine, _src, peer, remote) = setup_filled(len).await;
    // Caller memory (an unregistered engine buffer serves as such), so that it can be
    // registered again at the same address as a canary.
    let memory = EngineBuffer::allocate(len, true).unwrap();
    memory.put(0, &vec![0x55; len]).unwrap();
    let addr = memory.addr();
    let register = || {
        // SAFETY (test): `memory` outlives every registration, and the test touches its bytes
        // only through raw copies, while no transfer into it is in flight.
        unsafe { engine.register(addr as *mut u8, len, Default::default()) }.unwrap()
    };
    register();
    target.signal(libc::SIGSTOP);
    let req = TransferRequest::read(addr, peer, remote, len as u64);
    let call = tokio::spawn({
        let engine = engine.clone();
        async move { engine.transfer(req).await }
    });
    // The request is on its way to the stopped peer.
    tokio::time::sleep(Duration::from_millis(100)).await;
    engine.unregister(addr).unwrap();
    // The waiter need not wait for the stopped peer (the default deadline is 30 s).
    let failed = tokio::time::timeout(Duration::from_secs(5), call).await;
    let err = failed
        .expect("the read waited for the peer")
        .unwrap()
        .unwrap_err();
    assert_eq!(err, Error::AddressNotRegistered { addr }, "{err:?}");
    // The canary at the same address; then the peer's late answer arrives.
    register();
    target.signal(libc::SIGCONT);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        read_all(&memory).iter().all(|&b| b == 0x55),
        "the late answer landed in memory that was unregistered"
    );
    // The connection stayed in step: the next read completes with the right bytes.
    engine.read(addr, peer, remote, len as u64).await.unwrap();
    assert!(read_all(&memory).iter().all(|&b| b == 0xaa));
    engine.unregister(addr).unwrap();
}

fn read_all(buf: &EngineBuffer) -> Vec<u8> {
    let mut back = vec![0u8; buf.len()];
    buf.get(0, &mut back).unwrap();
    back
}

/// Connecting to a peer is single-flight per endpoint: while a connect to a stopped peer hangs
/// (its kernel accepts, its process never answers the hello), transfers to a healthy peer open
/// their own connections and complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_peer_is_served_while_a_connect_to_a_stopped_peer_is_pending() {
    let (stopped, healthy) = (Target::start(1 << 20), Target::start(1 << 20));
    let engine = initiator().await;
    let src = engine.allocate(1 << 20, true).unwrap();
    src.put(0, &[5u8; 4096]).unwrap();
    let to_stopped = engine.open_segment(&stopped.0.announce.name).await.unwrap();
    let to_healthy = engine.open_segment(&healthy.0.announce.name).await.unwrap();
    stopped.signal(libc::SIGSTOP);
    let started = Instant::now();
    // Three transfers wait for the one connect; its failure ends all three, not one after
    // another (each waiting out the 3 s connect timeout in turn).
    let pending: Vec<_> = (0..3)
        .map(|_| {
            let req = TransferRequest::write(src.addr(), to_stopped, stopped.0.announce.addr, 4096)
                .with_deadline(Duration::from_secs(30));
            let engine = engine.clone();
            tokio::spawn(async move { (engine.transfer(req).await, Instant::now()) })
        })
        .collect();
    // Give the stopped peer's connect time to start and hang.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..20 {
        engine
            .write(src.addr(), to_healthy, healthy.0.announce.addr, 4096)
            .await
            .unwrap();
    }
    // With one connect lock for every peer, these writes would wait for the stopped peer's
    // connect to time out, and its transfer would end first.
    assert!(
        pending.iter().all(|p| !p.is_finished()),
        "the healthy peer waited for the stopped peer's connect"
    );
    // The stopped peer's connect gives up at its timeout (3 s by default), not at 30 s.
    let mut ends = Vec::new();
    for p in pending {
        let (r, at) = p.await.unwrap();
        let e = r.unwrap_err();
        assert!(matches!(e, Error::PeerFailed { .. }), "{e}");
        ends.push(at - started);
    }
    // Each would otherwise wait out the connect timeout (3 s) after the one before it.
    let spread = ends
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*ends.iter().min().unwrap());
    assert!(
        spread < Duration::from_secs(2),
        "the waiters tried in turn: {ends:?}"
    );
    stopped.signal(libc::SIGCONT);
}
