//! The engine within one process (the `local` transport): bad input, batches, cancellation
//! and deadlines; the properties every transport shares are in conformance.rs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
mod common;
use common::*;
use yuebing_engine::{
    EngineBuffer, EngineConfig, Error, Job, Location, RemoteAccess, SegmentDescriptor,
    SegmentHandle, TaskState, TransferEngine, TransferRequest, Transport, TransportKind,
};
use yuebing_testkit::patterns::pattern;

fn engine() -> TransferEngine {
    TransferEngine::new(EngineConfig::default())
}

/// A handle this engine never gave out.
fn unknown_segment() -> SegmentHandle {
    SegmentHandle::from_raw(u64::MAX)
}

#[tokio::test]
async fn invalid_submits_change_nothing() {
    let e = engine();
    let a = e.allocate(4096, false).unwrap();
    let own = e.own_segment();
    let batch = e.allocate_batch(2).unwrap();
    let good = TransferRequest::write(a.addr(), own, a.addr() + 2048, 16);
    let cases = [
        TransferRequest::write(a.addr(), own, a.addr() + 2048, 0),
        TransferRequest::write(a.addr() + 4090, own, a.addr(), 16),
        TransferRequest::write(12345, own, a.addr(), 16),
        TransferRequest::write(a.addr(), unknown_segment(), a.addr(), 16),
    ];
    for (i, bad) in cases.into_iter().enumerate() {
        let err = e.submit(batch, &[good.clone(), bad]).unwrap_err();
        assert_eq!(err.code(), -3001, "case {i}: {err}");
        assert_eq!(e.status(batch).unwrap().tasks, 0, "nothing started");
    }
}

#[tokio::test]
async fn the_descriptor_publishes_only_exported_memory_and_the_engine_reaches_all_of_its_own() {
    let e = engine();
    let local = e.allocate(4096, false).unwrap();
    let caller = EngineBuffer::allocate(4096, false).unwrap();
    // SAFETY (test): `caller` outlives its registration and is only touched through raw copies.
    unsafe { e.register(caller.addr() as *mut u8, 4096, Location::default()) }.unwrap();
    let shared = e.allocate_exported(4096, false, RW).unwrap();
    let read_only = e
        .allocate_exported(4096, false, RemoteAccess::READ)
        .unwrap();
    assert!(read_only.is_sealed(), "sealed against peers' writes");
    let mut expected = vec![(shared.addr(), RW), (read_only.addr(), RemoteAccess::READ)];
    expected.sort_unstable_by_key(|&(addr, _)| addr);
    let published: Vec<_> = e
        .descriptor()
        .buffers
        .iter()
        .map(|b| (b.addr, b.remote))
        .collect();
    assert_eq!(published, expected, "local-only memory is not published");
    assert_eq!(e.memory().regions().len(), 4);
    // The `local` transport is no remote access: local-only memory is a fine target.
    let own = e.own_segment();
    local.put(0, b"local").unwrap();
    e.write(local.addr(), own, caller.addr() + 8, 5)
        .await
        .unwrap();
    e.write(caller.addr() + 8, own, read_only.addr(), 5)
        .await
        .unwrap();
    e.read(local.addr() + 100, own, read_only.addr(), 5)
        .await
        .unwrap();
    assert_eq!(read_back(&local, 100, 5), b"local");
    e.unregister(caller.addr()).unwrap();
}

#[tokio::test]
async fn capacity_unknown_batches_and_busy() {
    let e = engine();
    let a = e.allocate(4096, false).unwrap();
    let own = e.own_segment();
    let batch = e.allocate_batch(1).unwrap();
    let req = TransferRequest::write(a.addr(), own, a.addr() + 1024, 8);
    let err = e.submit(batch, &[req.clone(), req.clone()]).unwrap_err();
    assert_eq!(err.code(), -3002);
    assert_eq!(e.status(batch).unwrap().tasks, 0, "nothing submitted");
    e.submit(batch, &[req]).unwrap();
    e.wait(batch).await.unwrap();
    e.free_batch(batch).unwrap();
    assert_eq!(e.status(batch).unwrap_err().code(), -3502);
    assert_eq!(e.free_batch(batch).unwrap_err().code(), -3502);
}

#[tokio::test]
async fn an_out_of_bounds_remote_range_fails_only_its_task() {
    let e = engine();
    let a = e.allocate(4096, false).unwrap();
    let own = e.own_segment();
    for skip in [false, true] {
        let batch = e.allocate_batch(3).unwrap();
        let mut oob = TransferRequest::write(a.addr(), own, a.addr() + 4000, 200);
        oob.skip_initiator_checks = skip;
        let ok = TransferRequest::write(a.addr(), own, a.addr() + 100, 50);
        e.submit(batch, &[ok.clone(), oob, ok]).unwrap();
        let status = e.wait(batch).await.unwrap();
        assert_eq!(status.state, TaskState::Failed);
        assert_eq!(status.completed, 2, "skip={skip}");
        let t = e.task_status(batch, 1).unwrap();
        assert_eq!(
            (t.state, t.error.map(|e| e.code())),
            (TaskState::Failed, Some(-3504))
        );
        e.free_batch(batch).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_write_is_immediately_visible_and_8_batches_from_4_tasks_complete() {
    let e = engine();
    let buf = e.allocate(1 << 20, true).unwrap();
    let own = e.own_segment();
    let workers = (0..4u64).map(|w| {
        let e = e.clone();
        let base = buf.addr() + w * (256 << 10);
        tokio::spawn(async move {
            for round in 0..2u64 {
                let batch = e.allocate_batch(8).unwrap();
                let reqs: Vec<_> = (0..8)
                    .map(|k| {
                        TransferRequest::write(
                            base + k * 1024,
                            own,
                            base + 64 * 1024 + k * 1024 + round,
                            1000,
                        )
                    })
                    .collect();
                e.submit(batch, &reqs).unwrap();
                let s = e.wait(batch).await.unwrap();
                assert_eq!(
                    (s.state, s.completed, s.bytes),
                    (TaskState::Completed, 8, 8000)
                );
                e.free_batch(batch).unwrap();
            }
        })
    });
    for w in join_all(workers).await {
        w.unwrap();
    }
    let data = pattern(4096, 9);
    buf.put(0, &data).unwrap();
    e.write(buf.addr(), own, buf.addr() + 8192, 4096)
        .await
        .unwrap();
    e.read(buf.addr() + 16384, own, buf.addr() + 8192, 4096)
        .await
        .unwrap();
    assert!(read_back(&buf, 16384, 4096) == data);
}

#[tokio::test]
async fn cancel_and_deadline_end_stuck_transfers() {
    let e = engine();
    e.add_transport(Arc::new(Watched::default()));
    let a = e.allocate_exported(4096, false, RW).unwrap();
    let own = e.own_segment();
    let batch = e.allocate_batch(2).unwrap();
    let stuck = TransferRequest::write(a.addr(), own, a.addr() + 1024, 8).via(TransportKind::Tcp);
    e.submit(batch, &[stuck.clone(), stuck.clone()]).unwrap();
    assert_eq!(e.free_batch(batch).unwrap_err().code(), -3004);
    assert_eq!(e.cancel(batch).unwrap(), 2);
    let s = e.wait(batch).await.unwrap();
    assert_eq!(s.state, TaskState::Canceled);
    e.free_batch(batch).unwrap();

    let started = Instant::now();
    let err = e
        .transfer(stuck.with_deadline(Duration::from_millis(50)))
        .await
        .unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
}

/// A transport whose transfers never finish (for cancellation and deadlines) and that counts
/// them: started, and still alive. It stands in for tcp, so the engine's own memory it targets
/// must be exported (the initiator's check) like any peer's.
#[derive(Default)]
struct Watched {
    started: Arc<std::sync::atomic::AtomicUsize>,
    alive: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a transfer future out of `alive` when it is dropped.
struct Alive(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Transport for Watched {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }
    fn can_reach(&self, _: &SegmentDescriptor, _: bool) -> bool {
        true
    }
    fn transfer(&self, _: Job) -> BoxFuture<'static, Result<(), Error>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.started.fetch_add(1, SeqCst);
        self.alive.fetch_add(1, SeqCst);
        let alive = Alive(self.alive.clone());
        async move {
            let _alive = alive;
            futures::future::pending().await
        }
        .boxed()
    }
}

/// Adds a [`Watched`] transport to `e` and submits one small transfer through it, in a batch
/// of one; returns the batch and the transport's counters.
fn submit_stuck(e: &TransferEngine) -> (yuebing_engine::BatchId, Watched) {
    let watched = Watched::default();
    let counters = Watched {
        started: watched.started.clone(),
        alive: watched.alive.clone(),
    };
    e.add_transport(Arc::new(watched));
    let a = e.allocate_exported(4096, false, RW).unwrap();
    let own = e.own_segment();
    let batch = e.allocate_batch(1).unwrap();
    let req = TransferRequest::write(a.addr(), own, a.addr() + 1024, 8).via(TransportKind::Tcp);
    e.submit(batch, &[req]).unwrap();
    (batch, counters)
}

/// On a current-thread runtime nothing runs between `cancel` and `free_batch` on the test's
/// thread: a batch reported free there would have a transfer still alive.
#[tokio::test(flavor = "current_thread")]
async fn a_canceled_batch_is_not_free_while_its_transfer_is_alive() {
    use std::sync::atomic::Ordering::SeqCst;
    let e = engine();
    let (batch, watched) = submit_stuck(&e);
    let (started, alive) = (watched.started, watched.alive);
    assert_eq!(
        alive.load(SeqCst),
        1,
        "a small submit starts on the caller's thread"
    );
    assert_eq!(e.cancel(batch).unwrap(), 1);
    if e.free_batch(batch).is_ok() {
        assert_eq!(alive.load(SeqCst), 0, "freed while its transfer was alive");
        return;
    }
    let s = e.wait(batch).await.unwrap();
    assert_eq!(s.state, TaskState::Canceled);
    assert_eq!(alive.load(SeqCst), 0, "final while its transfer was alive");
    e.free_batch(batch).unwrap();
    assert_eq!(started.load(SeqCst), 1);
}

/// A task canceled before its transfer started never starts it.
#[tokio::test(flavor = "current_thread")]
async fn a_task_canceled_while_waiting_never_starts_its_transfer() {
    use std::sync::atomic::Ordering::SeqCst;
    let e = engine();
    let watched = Watched::default();
    let started = watched.started.clone();
    e.add_transport(Arc::new(watched));
    let a = e.allocate_exported(4 << 20, false, RW).unwrap();
    let own = e.own_segment();
    let batch = e.allocate_batch(1).unwrap();
    // Too large to start on the caller's thread: it waits for the runtime.
    let req = TransferRequest::write(a.addr(), own, a.addr() + (2 << 20), 1 << 20)
        .via(TransportKind::Tcp);
    e.submit(batch, &[req]).unwrap();
    assert_eq!(e.cancel(batch).unwrap(), 1);
    let s = e.wait(batch).await.unwrap();
    assert_eq!(s.state, TaskState::Canceled);
    e.free_batch(batch).unwrap();
    // Let the runtime run the spawned work to its end.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        started.load(SeqCst),
        0,
        "a canceled task's transfer started"
    );
}

/// A deadline longer than an `Instant` can hold is no deadline to speak of, not a panic.
#[tokio::test]
async fn a_deadline_too_far_to_represent_is_accepted() {
    let e = engine();
    let a = e.allocate(8192, false).unwrap();
    let req = TransferRequest::write(a.addr(), e.own_segment(), a.addr() + 4096, 4096)
        .with_deadline(Duration::MAX);
    e.transfer(req).await.unwrap();
}

/// Deadlines run on tokio's clock: with time paused, an hour-long deadline passes at once.
#[tokio::test(start_paused = true)]
async fn deadlines_follow_paused_time() {
    let e = engine();
    e.add_transport(Arc::new(Watched::default()));
    let a = e.allocate_exported(4096, false, RW).unwrap();
    let own = e.own_segment();
    let hour = Duration::from_secs(3600);
    let started = Instant::now();
    let stuck = TransferRequest::write(a.addr(), own, a.addr() + 1024, 8).via(TransportKind::Tcp);
    let err = e
        .transfer(stuck.clone().with_deadline(hour))
        .await
        .unwrap_err();
    assert_eq!(err, Error::Timeout);
    let batch = e.allocate_batch(1).unwrap();
    e.submit(batch, &[stuck.with_deadline(hour)]).unwrap();
    assert_eq!(e.wait(batch).await.unwrap().state, TaskState::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A small submit that needs no waiting (a same-process copy) runs on the caller's thread and
/// is final when `submit` returns; a large one goes on as a task and completes all the same.
/// (On a current-thread runtime no other thread could have run it in between.)
#[tokio::test(flavor = "current_thread")]
async fn a_small_copy_is_final_when_submit_returns_and_a_large_one_goes_on_as_a_task() {
    let e = engine();
    let a = e.allocate(16 << 20, false).unwrap();
    let own = e.own_segment();
    a.put(0, &[7u8; 4096]).unwrap();
    let small = e.allocate_batch(1).unwrap();
    let to = a.addr() + (8 << 20);
    e.submit(small, &[TransferRequest::write(a.addr(), own, to, 4096)])
        .unwrap();
    assert_eq!(e.status(small).unwrap().state, TaskState::Completed);
    let mut back = vec![0u8; 4096];
    a.get(8 << 20, &mut back).unwrap();
    assert_eq!(back, vec![7u8; 4096]);

    let large = e.allocate_batch(1).unwrap();
    e.submit(large, &[TransferRequest::write(a.addr(), own, to, 4 << 20)])
        .unwrap();
    assert!(!e.status(large).unwrap().state.is_final());
    assert_eq!(e.wait(large).await.unwrap().state, TaskState::Completed);
    e.free_batch(small).unwrap();
    e.free_batch(large).unwrap();
}

/// A task whose driver is dropped unfinished (its runtime shut down) is still made final once
/// its transfer is gone, so that `wait` and `free_batch` do not hang on it; so is one whose
/// driver was never polled at all.
#[test]
fn a_task_whose_runtime_shut_down_is_final_not_pending_forever() {
    use std::sync::atomic::Ordering::SeqCst;
    // Never driven: what is spawned on it is dropped unpolled when it is dropped.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = TransferEngine::new_on(Default::default(), rt.handle().clone());
    // Small: polled once on the caller's thread, then left to the runtime.
    let (batch, watched) = submit_stuck(&e);
    let (started, alive) = (watched.started, watched.alive);
    // Large: handed to the runtime without a poll.
    let a = e.allocate_exported(1 << 20, false, RW).unwrap();
    let own = e.own_segment();
    let unpolled = e.allocate_batch(2).unwrap();
    let half = TransferRequest::write(a.addr(), own, a.addr() + (512 << 10), 256 << 10)
        .via(TransportKind::Tcp);
    e.submit(unpolled, &[half.clone(), half]).unwrap();
    assert_eq!(started.load(SeqCst), 1, "only the small submit started");
    assert_eq!(e.free_batch(batch).unwrap_err().code(), -3004);
    drop(rt);
    assert_eq!(alive.load(SeqCst), 0);
    for b in [batch, unpolled] {
        let s = e.status(b).unwrap();
        assert_eq!(s.state, TaskState::Failed, "{s:?}");
        e.free_batch(b).unwrap();
    }
}
