//! Fault tests of the Transfer Engine with a real target process (`yuebing bench-target`), made
//! deterministic as conventions.md says: stop the peer, submit, then kill it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use yuebing::bench::transfer::target::Announce;
use yuebing::engine::{EngineConfig, Error, TransferEngine, TransferRequest, TransportKind};

/// The target process; killed and reaped when dropped, also when a test panics.
struct Target {
    child: Child,
    announce: Announce,
}

impl Target {
    fn start(len: usize) -> Target {
        let mut child = Command::new(env!("CARGO_BIN_EXE_yuebing"))
            .args([
                "bench-target",
                "--bind",
                "127.0.0.1:0",
                "--len",
                &len.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the target");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let announce = serde_json::from_str(&line).expect("announce line");
        Target { child, announce }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let target = Target::start(8 << 20);
    let engine = initiator().await;
    let src = engine.allocate(8 << 20, true).unwrap();
    let peer = engine.open_segment(&target.announce.name).await.unwrap();
    engine
        .write(src.addr(), peer, target.announce.addr, 4096)
        .await
        .unwrap();

    target.signal(libc::SIGSTOP);
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, target.announce.addr, 8 << 20)
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
    let target = Target::start(1 << 20);
    let engine = initiator().await;
    let src = engine.allocate(1 << 20, true).unwrap();
    let peer = engine.open_segment(&target.announce.name).await.unwrap();
    engine
        .write(src.addr(), peer, target.announce.addr, 4096)
        .await
        .unwrap();
    target.signal(libc::SIGSTOP);
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, target.announce.addr, 4096)
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
    let mut target = Target::start(1 << 20);
    let engine = initiator().await;
    let src = engine.allocate(1 << 20, true).unwrap();
    let peer = engine.open_segment(&target.announce.name).await.unwrap();
    engine
        .write(src.addr(), peer, target.announce.addr, 4096)
        .await
        .unwrap();
    target.child.kill().unwrap();
    target.child.wait().unwrap();
    let started = Instant::now();
    let req = TransferRequest::write(src.addr(), peer, target.announce.addr, 4096)
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
    let mut target = Target::start(1 << 20);
    let engine = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    let src = engine.allocate(1 << 20, true).unwrap();
    let peer = engine.open_segment(&target.announce.name).await.unwrap();
    assert_eq!(engine.selected_transport(peer).unwrap(), TransportKind::Shm);
    engine
        .write(src.addr(), peer, target.announce.addr, 1 << 20)
        .await
        .unwrap();
    target.child.kill().unwrap();
    target.child.wait().unwrap();
    for attempt in 0..3 {
        let req = TransferRequest::write(src.addr(), peer, target.announce.addr, 4096)
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
