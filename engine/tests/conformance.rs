//! One conformance suite for every transport: each property below is a function, run over
//! `local`, `tcp`, `shm` and (with the cargo feature `rdma`) `rdma` over two fake NICs per
//! engine by the table at the end. A property that needs a peer process (restart, death, a
//! stale instance) runs over the transports that reach one; `local` reaches only its own
//! engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::*;
use yuebing_engine::{
    BufferDesc, EngineBuffer, EngineConfig, Error, Location, Opcode, RemoteAccess, SegmentHandle,
    TaskState, TransferEngine, TransferRequest, TransportKind,
};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;

/// A transport under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Tcp,
    Shm,
    /// Over fake NICs (`yuebing_engine::transport::rdma::fake`).
    #[cfg(feature = "rdma")]
    Rdma,
}

/// What an engine of the pair runs with; for rdma, its own two NICs on `fabric`, or with
/// `YUEBING_RDMA_HW=1` (`scripts/hw-check.sh`) this machine's NICs.
fn config(kind: Kind, fabric: &Fabric) -> EngineConfig {
    #[cfg(feature = "rdma")]
    if let (Kind::Rdma, Some(fabric)) = (kind, fabric) {
        let hardware = std::env::var("YUEBING_RDMA_HW").is_ok_and(|v| v == "1");
        return EngineConfig {
            rdma: Some(yuebing_engine::transport::rdma::RdmaConfig {
                verbs: (!hardware).then(|| fabric.host(&["mlx5_0", "mlx5_1"])),
                ..Default::default()
            }),
            ..EngineConfig::default()
        };
    }
    let _ = (kind, fabric);
    EngineConfig::default()
}

#[cfg(feature = "rdma")]
type Fabric = Option<yuebing_engine::transport::rdma::fake::FakeFabric>;
#[cfg(not(feature = "rdma"))]
type Fabric = Option<()>;

/// An initiator `a` and the target it reaches through the transport under test.
struct Pair {
    kind: Kind,
    a: TransferEngine,
    /// The target engine; `None` for `local`, whose target is `a` itself.
    b: Option<TransferEngine>,
    peer: SegmentHandle,
    fabric: Fabric,
}

impl Pair {
    async fn new(kind: Kind) -> Pair {
        let forced = match kind {
            Kind::Local => Some(TransportKind::Local),
            Kind::Tcp => Some(TransportKind::Tcp),
            Kind::Shm => None,
            #[cfg(feature = "rdma")]
            Kind::Rdma => Some(TransportKind::Rdma),
        };
        #[cfg(feature = "rdma")]
        let fabric: Fabric =
            (kind == Kind::Rdma).then(yuebing_engine::transport::rdma::fake::FakeFabric::new);
        #[cfg(not(feature = "rdma"))]
        let fabric: Fabric = None;
        let a = TransferEngine::start(EngineConfig {
            transport: forced,
            ..config(kind, &fabric)
        })
        .await
        .unwrap();
        if kind == Kind::Local {
            let peer = a.own_segment();
            return Pair {
                kind,
                a,
                b: None,
                peer,
                fabric,
            };
        }
        let b = TransferEngine::start(config(kind, &fabric)).await.unwrap();
        let peer = a.open_segment(b.name()).await.unwrap();
        let pair = Pair {
            kind,
            a,
            b: Some(b),
            peer,
            fabric,
        };
        pair.check_transport();
        pair
    }

    fn check_transport(&self) {
        let expected = match self.kind {
            Kind::Local => TransportKind::Local,
            Kind::Tcp => TransportKind::Tcp,
            Kind::Shm => TransportKind::Shm,
            #[cfg(feature = "rdma")]
            Kind::Rdma => TransportKind::Rdma,
        };
        assert_eq!(self.a.selected_transport(self.peer).unwrap(), expected);
    }

    fn target(&self) -> &TransferEngine {
        self.b.as_ref().unwrap_or(&self.a)
    }

    /// Stops the target engine and starts a new instance under the same name, on the same
    /// ports (retried while the old listeners let go of them).
    async fn restart_target(&mut self) {
        let old = self.b.take().expect("a peer to restart");
        let (name, data) = (old.name().to_string(), old.data_endpoint().unwrap());
        drop(old);
        let config = EngineConfig {
            bind: name.clone(),
            data_bind: Some(data),
            ..config(self.kind, &self.fabric)
        };
        // The ports may still be held for a moment.
        let what = format!("a restart on {name}");
        let e = eventually(&what, Duration::from_secs(10), move || {
            TransferEngine::start(config.clone())
        })
        .await;
        assert_eq!(e.name(), name);
        self.b = Some(e);
    }
}

/// Caller memory (an engine buffer never registered as such), registered with `engine`, so
/// that it can be registered again at the same address as a canary.
fn caller_memory(engine: &TransferEngine, len: usize) -> Arc<EngineBuffer> {
    let memory = Arc::new(EngineBuffer::allocate(len, true).unwrap());
    register_again(engine, &memory);
    memory
}

fn register_again(engine: &TransferEngine, memory: &EngineBuffer) {
    // SAFETY (test): every test keeps the buffer alive past its registration and touches its
    // bytes only through raw copies, while no transfer of its own is in flight on them.
    unsafe { engine.register(memory.addr() as *mut u8, memory.len(), Location::default()) }
        .unwrap();
}

/// Every size class from 1 byte to 64 MiB, at unaligned offsets, written and read back.
async fn round_trips(kind: Kind) {
    let p = Pair::new(kind).await;
    let size = (64 << 20) + 64;
    let src = p.a.allocate(size, false).unwrap();
    let back = p.a.allocate(size, false).unwrap();
    let dst = p.target().allocate_exported(size, false, RW).unwrap();
    common::round_trips(&p.a, p.peer, &src, &dst, &back).await;
}

/// A remote range outside the target's buffers is refused where the data is served, before a
/// byte moves, and fails only its task; an unregistered local range is refused at submit.
async fn bounds(kind: Kind) {
    let p = Pair::new(kind).await;
    let src = p.a.allocate(1 << 16, false).unwrap();
    let b1 = p.target().allocate_exported(4096, false, RW).unwrap();
    let bad = [
        (b1.addr() + 4000, 200),      // past the end
        (b1.addr() - 10, 20),         // partial overlap at the start
        (u64::MAX - 8, 16),           // overflow
        (b1.addr() + 10_000_000, 16), // nowhere
    ];
    for (addr, len) in bad {
        let mut req = TransferRequest::write(src.addr(), p.peer, addr, len);
        req.skip_initiator_checks = true;
        let err = p.a.transfer(req).await.unwrap_err();
        assert_eq!(err.code(), -3504, "{addr:#x}+{len}: {err}");
        // And the target keeps serving.
        p.a.write(src.addr(), p.peer, b1.addr(), 4096)
            .await
            .unwrap();
    }
    let unregistered = TransferRequest::write(src.addr() + 65000, p.peer, b1.addr(), 1000);
    assert_eq!(p.a.transfer(unregistered).await.unwrap_err().code(), -3001);
}

/// Only exported memory is reachable, and only with its rights: a peer's write or read of memory
/// the target registered local-only (an engine buffer, caller memory) is refused as if it were
/// unregistered (`OutOfBounds`); of a buffer exported read-only a read is served and a write is
/// `AccessDenied`, of one exported write-only the reverse. Each refusal comes from the
/// initiator's check against the descriptor and, with that check skipped, from where the access
/// is enforced (the tcp target, the shm importer's mappings); no byte moves either way. The
/// descriptor lists only the exported buffers, with their rights.
async fn access_rights(kind: Kind) {
    let p = Pair::new(kind).await;
    let t = p.target();
    let len = 4096usize;
    let src = p.a.allocate(len, false).unwrap();
    let back = p.a.allocate(len, false).unwrap();
    let local = t.allocate(len, false).unwrap();
    let caller = caller_memory(t, len);
    let read_only = t.allocate_exported(len, false, RemoteAccess::READ).unwrap();
    let write_only = t
        .allocate_exported(len, false, RemoteAccess::WRITE)
        .unwrap();
    let buffers: [(&EngineBuffer, u64); 4] =
        [(&local, 1), (&caller, 2), (&read_only, 3), (&write_only, 4)];
    for (b, seed) in buffers {
        b.put(0, &pattern(len, seed)).unwrap();
    }
    src.put(0, &pattern(len, 9)).unwrap();

    // What peers may do is served (the first requests also refresh the cached descriptor,
    // published before these buffers existed, and map them over shm).
    p.a.read(back.addr(), p.peer, read_only.addr(), len as u64)
        .await
        .unwrap();
    assert!(
        read_back(&back, 0, len) == pattern(len, 3),
        "{kind:?}: read served"
    );
    p.a.write(src.addr(), p.peer, write_only.addr(), len as u64)
        .await
        .unwrap();
    assert!(
        read_back(&write_only, 0, len) == pattern(len, 9),
        "{kind:?}: write landed"
    );
    write_only.put(0, &pattern(len, 4)).unwrap();

    // The descriptor publishes the exported buffers only, each with its rights.
    let mut exported = [
        (read_only.addr(), RemoteAccess::READ),
        (write_only.addr(), RemoteAccess::WRITE),
    ];
    exported.sort_unstable_by_key(|&(addr, _)| addr);
    let published = |d: &yuebing_engine::SegmentDescriptor| -> Vec<(u64, RemoteAccess)> {
        d.buffers
            .iter()
            .map(|b: &BufferDesc| (b.addr, b.remote))
            .collect()
    };
    assert_eq!(published(&t.descriptor()), exported, "{kind:?}");
    assert_eq!(
        published(&p.a.segment_descriptor(p.peer).unwrap()),
        exported
    );

    // What peers may not do is refused, nothing copied.
    back.put(0, &pattern(len, 10)).unwrap();
    let refused = [
        (local.addr(), Opcode::Write, -3504),
        (local.addr(), Opcode::Read, -3504),
        (caller.addr(), Opcode::Write, -3504),
        (caller.addr(), Opcode::Read, -3504),
        (read_only.addr(), Opcode::Write, -3511),
        (write_only.addr(), Opcode::Read, -3511),
    ];
    for (addr, opcode, code) in refused {
        for skip_initiator_checks in [false, true] {
            let mut req = match opcode {
                Opcode::Write => TransferRequest::write(src.addr(), p.peer, addr + 8, 64),
                Opcode::Read => TransferRequest::read(back.addr(), p.peer, addr + 8, 64),
            };
            req.skip_initiator_checks = skip_initiator_checks;
            let err = p.a.transfer(req).await.unwrap_err();
            let case = format!("{kind:?} {opcode:?} {addr:#x} unchecked={skip_initiator_checks}");
            assert_eq!(err.code(), code, "{case}: {err:?}");
            assert!(!err.is_retryable(), "{case}");
            for (b, seed) in buffers {
                assert!(
                    read_back(b, 0, len) == pattern(len, seed),
                    "{case}: target changed"
                );
            }
            assert!(
                read_back(&back, 0, len) == pattern(len, 10),
                "{case}: read landed"
            );
        }
    }
    t.unregister(caller.addr()).unwrap();
}

/// A request built for an earlier instance of a restarted peer is refused before it touches
/// anything, and the descriptor is refreshed so that the next request reaches the new one.
async fn stale_instance(kind: Kind) {
    let mut p = Pair::new(kind).await;
    let src = p.a.allocate(4096, false).unwrap();
    let old = p.target().allocate_exported(4096, false, RW).unwrap();
    p.a.write(src.addr(), p.peer, old.addr(), 64).await.unwrap();
    let old_instance = p.target().instance_id();
    p.restart_target().await;
    let fresh = p.target().allocate_exported(4096, false, RW).unwrap();
    assert_ne!(p.target().instance_id(), old_instance);

    let err =
        p.a.write(src.addr(), p.peer, old.addr(), 64)
            .await
            .unwrap_err();
    assert!(
        matches!(err, Error::StaleSegment { .. } | Error::PeerFailed { .. }),
        "{err:?}"
    );
    let descriptor = p.a.segment_descriptor(p.peer).unwrap();
    assert_eq!(
        descriptor.instance_id,
        p.target().instance_id(),
        "refreshed"
    );
    let data = pattern(64, 1);
    src.put(0, &data).unwrap();
    p.a.write(src.addr(), p.peer, fresh.addr(), 64)
        .await
        .unwrap();
    assert!(read_back(&fresh, 0, 64) == data);
    p.check_transport();
}

/// A peer restarted under the same name with a new buffer layout: the first transfer to its
/// new memory succeeds (a range outside the cached descriptor refreshes it once), and so does
/// one to a buffer it registers later; a range it never registered still fails.
async fn restart(kind: Kind) {
    let mut p = Pair::new(kind).await;
    let src = p.a.allocate(1 << 20, false).unwrap();
    src.put(0, &pattern(1 << 20, 3)).unwrap();
    let old = p.target().allocate_exported(1 << 20, false, RW).unwrap();
    p.a.write(src.addr(), p.peer, old.addr(), 4096)
        .await
        .unwrap();
    p.restart_target().await;
    // A new layout (the old buffer is still mapped here, so the new one cannot take its
    // addresses).
    let _first = p.target().allocate_exported(64 << 10, false, RW).unwrap();
    let new = p.target().allocate_exported(2 << 20, false, RW).unwrap();
    p.a.write(src.addr(), p.peer, new.addr() + 100, 1 << 20)
        .await
        .expect("the first transfer to the restarted peer's new memory succeeds");
    assert!(read_back(&new, 100, 1 << 20) == pattern(1 << 20, 3));
    p.check_transport();
    let later = p.target().allocate_exported(8192, false, RW).unwrap();
    p.a.read(src.addr(), p.peer, later.addr(), 8192)
        .await
        .unwrap();
    let err =
        p.a.write(src.addr(), p.peer, later.addr() + 8000, 4096)
            .await
            .unwrap_err();
    assert_eq!(err.code(), -3504, "{err:?}");
    drop(old);
}

/// A canceled batch is final only once its transfers stopped: the local memory it was reading
/// into may be reused at once, and nothing lands in it afterwards.
async fn cancel_finality(kind: Kind) {
    let p = Pair::new(kind).await;
    let len = 64usize << 20;
    let remote = p.target().allocate_exported(len, true, RW).unwrap();
    let back = p.a.allocate(len, true).unwrap();
    for round in 0..3u8 {
        let batch = p.a.allocate_batch(4).unwrap();
        let quarter = (len / 4) as u64;
        let reqs: Vec<_> = (0..4)
            .map(|i| {
                TransferRequest::read(
                    back.addr() + i * quarter,
                    p.peer,
                    remote.addr() + i * quarter,
                    quarter,
                )
            })
            .collect();
        p.a.submit(batch, &reqs).unwrap();
        if round > 0 {
            // Later rounds let the copies get going before the cancel.
            tokio::time::sleep(Duration::from_millis(u64::from(round))).await;
        }
        p.a.cancel(batch).unwrap();
        let status = p.a.wait(batch).await.unwrap();
        assert!(
            matches!(status.state, TaskState::Canceled | TaskState::Completed),
            "{status:?}"
        );
        p.a.free_batch(batch).unwrap();
        // The caller reuses the memory: nothing of the canceled reads may land any more.
        let canary = pattern(len, 100 + u64::from(round));
        back.put(0, &canary).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(read_back(&back, 0, len) == canary, "round {round}");
    }
}

/// Unregistering memory that transfers are using, on either side: `unregister` returns
/// without waiting for them, they end (each completes or fails with the typed error), and no
/// byte lands after it returned.
async fn unregister_under_load(kind: Kind) {
    let p = Pair::new(kind).await;
    let (len, each) = (8usize << 20, 512u64 << 10);
    let remote = p.target().allocate_exported(len, true, RW).unwrap();

    // The initiator's memory, read into by 16 tasks at once.
    let local = caller_memory(&p.a, len);
    let read = |i: u64| {
        TransferRequest::read(
            local.addr() + i * each,
            p.peer,
            remote.addr() + i * each,
            each,
        )
    };
    let batch = under_load(&p, len as u64 / each, read, &p.a, local.addr()).await;
    let canary = pattern(len, 7);
    local.put(0, &canary).unwrap();
    register_again(&p.a, &local);
    p.a.wait(batch).await.unwrap();
    ended_with(&p.a, batch, &[-3003]);
    assert!(
        read_back(&local, 0, len) == canary,
        "{kind:?}: a read landed late"
    );

    // The target's memory, written by 16 tasks at once.
    let src = p.a.allocate(len, true).unwrap();
    src.put(0, &pattern(len, 9)).unwrap();
    let write = |i: u64| {
        TransferRequest::write(
            src.addr() + i * each,
            p.peer,
            remote.addr() + i * each,
            each,
        )
    };
    let batch = under_load(&p, len as u64 / each, write, p.target(), remote.addr()).await;
    let after = read_back(&remote, 0, len);
    p.a.wait(batch).await.unwrap();
    // A write refused by the target (OutOfBounds), or one whose connection the target shut
    // down mid-payload (PeerFailed).
    ended_with(&p.a, batch, &[-3504, -3505]);
    if kind != Kind::Shm {
        // The serving side stopped every access before `unregister` returned. (Over shm no
        // code of the target runs: a copy already under way lands in the released pages, and
        // is not reported Completed; the check below holds for every transport.)
        assert!(
            read_back(&remote, 0, len) == after,
            "{kind:?}: a write landed late"
        );
    }
    let settled = read_back(&remote, 0, len);
    let err =
        p.a.write(src.addr(), p.peer, remote.addr(), each)
            .await
            .unwrap_err();
    assert_eq!(err.code(), -3504, "{kind:?}: {err:?}");
    assert!(
        read_back(&remote, 0, len) == settled,
        "{kind:?}: written after release"
    );
    p.a.unregister(local.addr()).unwrap();
}

/// Submits `tasks` requests made by `request` as one batch, lets them start, and unregisters
/// `addr` from `owner` under them, which must not wait for them. Returns the batch.
async fn under_load(
    p: &Pair,
    tasks: u64,
    request: impl Fn(u64) -> TransferRequest,
    owner: &TransferEngine,
    addr: u64,
) -> yuebing_engine::BatchId {
    let requests: Vec<_> = (0..tasks).map(request).collect();
    let batch = p.a.allocate_batch(requests.len()).unwrap();
    p.a.submit(batch, &requests).unwrap();
    tokio::task::yield_now().await;
    let started = Instant::now();
    owner.unregister(addr).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "unregister waited"
    );
    batch
}

/// Every task of the batch completed or failed with one of `codes`.
fn ended_with(engine: &TransferEngine, batch: yuebing_engine::BatchId, codes: &[i32]) {
    let tasks = engine.status(batch).unwrap().tasks;
    for task in 0..tasks {
        let s = engine.task_status(batch, task).unwrap();
        match (s.state, &s.error) {
            (TaskState::Completed, None) => {}
            (TaskState::Failed, Some(e)) if codes.contains(&e.code()) => {}
            _ => panic!("task {task} ended {s:?}"),
        }
    }
    engine.free_batch(batch).unwrap();
}

/// A peer that goes away fails the transfers to it within their deadline; none is reported
/// Completed.
async fn peer_death(kind: Kind) {
    let mut p = Pair::new(kind).await;
    let src = p.a.allocate(1 << 20, false).unwrap();
    let dst = p.target().allocate_exported(1 << 20, false, RW).unwrap();
    p.a.write(src.addr(), p.peer, dst.addr(), 1024)
        .await
        .unwrap();
    drop(p.b.take());
    for _ in 0..2 {
        let started = Instant::now();
        let req = TransferRequest::write(src.addr(), p.peer, dst.addr(), 1 << 20)
            .with_deadline(Duration::from_secs(2));
        let err = p.a.transfer(req).await.unwrap_err();
        assert!(
            matches!(err, Error::PeerFailed { .. } | Error::Timeout),
            "{kind:?}: {err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
    }
    drop(dst);
}

/// Runs each property over the transports listed for it, as `property::transport` tests.
macro_rules! conformance {
    ($($property:ident: [$($kind:ident),*];)*) => {$(
        mod $property {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $kind() {
                let kind = match stringify!($kind) {
                    "local" => super::Kind::Local,
                    "tcp" => super::Kind::Tcp,
                    #[cfg(feature = "rdma")]
                    "rdma" => super::Kind::Rdma,
                    _ => super::Kind::Shm,
                };
                super::$property(kind).await;
            }
        )*}
    )*};
}

/// The rdma transport over fake NICs (two per engine, on one fabric).
#[cfg(feature = "rdma")]
mod rdma {
    use super::*;

    conformance! {
        round_trips: [rdma];
        bounds: [rdma];
        access_rights: [rdma];
        cancel_finality: [rdma];
        unregister_under_load: [rdma];
        stale_instance: [rdma];
        restart: [rdma];
        peer_death: [rdma];
    }
}

conformance! {
    round_trips: [local, tcp, shm];
    bounds: [local, tcp, shm];
    access_rights: [tcp, shm];
    cancel_finality: [local, tcp, shm];
    unregister_under_load: [local, tcp, shm];
    stale_instance: [tcp, shm];
    restart: [tcp, shm];
    peer_death: [tcp, shm];
}
