//! The rdma transport over fake NICs (`transport::rdma::fake`): slicing over several NICs,
//! a failed slice posted again on another NIC, a failed path cooling down and its queue pair
//! made again, MTU negotiation in the handshake, the descriptor's per-NIC keys, memory
//! regions on every NIC and gone at `unregister`, finality of a canceled transfer with work
//! requests on the wire, and "no device" as a typed error with the engine working on.
//! The conformance suite (`conformance.rs`) runs the transport's common properties.
#![cfg(feature = "rdma")]

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::*;
use yuebing_engine::transport::rdma::fake::FakeFabric;
use yuebing_engine::transport::rdma::verbs::{Gid, Mtu, Verbs};
use yuebing_engine::transport::rdma::{Published, RdmaConfig};
use yuebing_engine::{
    EngineBuffer, EngineConfig, Error, SegmentDescriptor, SegmentHandle, TaskState, TransferEngine,
    TransferRequest, TransportKind,
};
use yuebing_testkit::patterns::pattern;

const NICS: [&str; 2] = ["mlx5_0", "mlx5_1"];

/// Two engines with two fake NICs each on one fabric; `a` reaches `b` over rdma.
struct Pair {
    fabric: FakeFabric,
    a: TransferEngine,
    a_nics: Arc<dyn Verbs>,
    b: TransferEngine,
    b_nics: Arc<dyn Verbs>,
    peer: SegmentHandle,
}

fn rdma(verbs: &Arc<dyn Verbs>, tweak: impl Fn(&mut RdmaConfig)) -> Option<RdmaConfig> {
    let mut c = RdmaConfig {
        verbs: Some(verbs.clone()),
        slice_size: 64 << 10,
        cooldown: Duration::from_millis(200),
        ..RdmaConfig::default()
    };
    tweak(&mut c);
    Some(c)
}

impl Pair {
    async fn new() -> Pair {
        Pair::with(|_, _| {}, |_| {}).await
    }

    /// A pair whose fabric `setup` prepares before the engines start.
    async fn with(
        setup: impl Fn(&FakeFabric, &[Arc<dyn Verbs>; 2]),
        tweak: impl Fn(&mut RdmaConfig),
    ) -> Pair {
        let fabric = FakeFabric::new();
        let (a_nics, b_nics) = (fabric.host(&NICS), fabric.host(&NICS));
        setup(&fabric, &[a_nics.clone(), b_nics.clone()]);
        let a = TransferEngine::start(EngineConfig {
            transport: Some(TransportKind::Rdma),
            rdma: rdma(&a_nics, &tweak),
            ..EngineConfig::default()
        })
        .await
        .unwrap();
        let b = TransferEngine::start(EngineConfig {
            rdma: rdma(&b_nics, &tweak),
            ..EngineConfig::default()
        })
        .await
        .unwrap();
        let peer = a.open_segment(b.name()).await.unwrap();
        assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Rdma);
        Pair {
            fabric,
            a,
            a_nics,
            b,
            b_nics,
            peer,
        }
    }

    fn gid(&self, verbs: &Arc<dyn Verbs>, nic: &str) -> Gid {
        self.fabric.gid(verbs, nic).unwrap()
    }

    /// Work requests each of `a`'s NICs carried to success.
    fn carried(&self) -> [u64; 2] {
        NICS.map(|n| self.fabric.executed(self.gid(&self.a_nics, n)))
    }

    /// A remote buffer of `len` bytes holding pattern `seed`, a local one to read it into, the
    /// paths connected, and the wire made slow (`delay` per work request).
    async fn slow_reads(
        &self,
        len: usize,
        seed: u64,
        delay: Duration,
    ) -> (Arc<EngineBuffer>, Arc<EngineBuffer>) {
        let remote = self.b.allocate_exported(len, false, RW).unwrap();
        remote.put(0, &pattern(len, seed)).unwrap();
        let back = self.a.allocate(len, false).unwrap();
        self.a
            .read(back.addr(), self.peer, remote.addr(), 4096)
            .await
            .unwrap();
        self.fabric.set_delay(delay);
        (remote, back)
    }

    async fn write_and_check(&self, src: &EngineBuffer, dst: &EngineBuffer, len: usize, seed: u64) {
        let data = pattern(len, seed);
        src.put(0, &data).unwrap();
        self.a
            .write(src.addr(), self.peer, dst.addr(), len as u64)
            .await
            .unwrap();
        assert!(read_back(dst, 0, len) == data, "seed {seed}: bytes differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_is_sliced_over_every_nic() {
    let p = Pair::new().await;
    let len = 4usize << 20;
    let src = p.a.allocate(len, false).unwrap();
    let dst = p.b.allocate_exported(len, false, RW).unwrap();
    let back = p.a.allocate(len, false).unwrap();
    p.write_and_check(&src, &dst, len, 1).await;
    let after_write = p.carried();
    // 64 slices of 64 KiB, round-robin over both NICs.
    assert_eq!(after_write.iter().sum::<u64>(), 64, "{after_write:?}");
    assert!(after_write.iter().all(|&n| n >= 16), "{after_write:?}");
    p.a.read(back.addr(), p.peer, dst.addr(), len as u64)
        .await
        .unwrap();
    assert!(read_back(&back, 0, len) == pattern(len, 1));
    // One queue pair per NIC pair used, on each side.
    assert_eq!(p.fabric.queue_pairs(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_slice_goes_again_on_another_nic_and_the_path_recovers() {
    let p = Pair::new().await;
    let len = 2usize << 20;
    let src = p.a.allocate(len, false).unwrap();
    let dst = p.b.allocate_exported(len, false, RW).unwrap();
    p.write_and_check(&src, &dst, 4096, 0).await;
    let nic0 = p.gid(&p.a_nics, "mlx5_0");
    // The next 3 requests through mlx5_0 fail (its queue pair goes to the error state and
    // flushes the rest): the transfer still completes, over mlx5_1.
    p.fabric.fail_next(nic0, 3);
    let before = p.carried();
    p.write_and_check(&src, &dst, len, 2).await;
    let during = p.carried();
    assert!(during[1] > before[1], "{before:?} -> {during:?}");
    // While mlx5_0's path cools down, everything goes over mlx5_1.
    p.write_and_check(&src, &dst, len, 3).await;
    let cooling = p.carried();
    assert_eq!(cooling[0], during[0], "{during:?} -> {cooling:?}");
    // After the cool-down a fresh queue pair on mlx5_0 carries slices again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.write_and_check(&src, &dst, len, 4).await;
    let recovered = p.carried();
    assert!(recovered[0] > cooling[0], "{cooling:?} -> {recovered:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nic_that_goes_down_is_routed_around_and_all_down_fails_typed() {
    let p = Pair::new().await;
    let len = 1usize << 20;
    let src = p.a.allocate(len, false).unwrap();
    let dst = p.b.allocate_exported(len, false, RW).unwrap();
    p.write_and_check(&src, &dst, len, 1).await;
    let b0 = p.gid(&p.b_nics, "mlx5_0");
    p.fabric.set_up(b0, false);
    p.write_and_check(&src, &dst, len, 2).await;
    p.write_and_check(&src, &dst, len, 3).await;
    let b1 = p.gid(&p.b_nics, "mlx5_1");
    p.fabric.set_up(b1, false);
    let err =
        p.a.write(src.addr(), p.peer, dst.addr(), len as u64)
            .await
            .unwrap_err();
    assert!(matches!(err, Error::PeerFailed { .. }), "{err:?}");
    assert_eq!(read_back(&dst, 0, len), pattern(len, 3), "nothing moved");
    // Links back, cool-downs over: it works again.
    p.fabric.set_up(b0, true);
    p.fabric.set_up(b1, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.write_and_check(&src, &dst, len, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_negotiates_the_smaller_mtu() {
    let p = Pair::with(
        |fabric, [_, b]| {
            for nic in NICS {
                fabric.set_mtu(fabric.gid(b, nic).unwrap(), Mtu::B1024);
            }
        },
        |_| {},
    )
    .await;
    let src = p.a.allocate(1 << 20, false).unwrap();
    let dst = p.b.allocate_exported(1 << 20, false, RW).unwrap();
    p.write_and_check(&src, &dst, 1 << 20, 5).await;
    let mtus = p.fabric.path_mtus();
    assert_eq!(mtus.len(), 4, "both ends of both paths: {mtus:?}");
    assert!(mtus.iter().all(|&m| m == Mtu::B1024), "{mtus:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_carries_each_exported_range_s_key_on_every_nic() {
    let p = Pair::new().await;
    let exported = p.b.allocate_exported(8192, false, RW).unwrap();
    let local_only = p.b.allocate(8192, false).unwrap();
    let json = p.b.descriptor().to_json();
    let back = SegmentDescriptor::from_json(&json).unwrap();
    let published = Published::of(&back).expect("an rdma section");
    assert_eq!(
        published
            .nics
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        NICS
    );
    let keys = published
        .rkeys(exported.addr(), 8192)
        .expect("keys of the export");
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "one region per NIC");
    assert!(
        published.rkeys(local_only.addr(), 1).is_none(),
        "local-only is not published"
    );
    assert!(
        published.rkeys(exported.addr() + 8000, 1000).is_none(),
        "past the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregister_deregisters_the_range_on_every_nic() {
    let p = Pair::new().await;
    let count = |v: &Arc<dyn Verbs>| NICS.map(|n| p.fabric.regions(p.gid(v, n)));
    let before = count(&p.b_nics);
    let buf = p.b.allocate_exported(1 << 20, false, RW).unwrap();
    assert_eq!(count(&p.b_nics), before.map(|n| n + 1));
    p.b.unregister(buf.addr()).unwrap();
    assert_eq!(count(&p.b_nics), before);
}

/// Reads that the wire carries slowly (1 ms per 64 KiB slice) are canceled with most of their
/// work requests posted: once the batch is final, nothing lands in the reused memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_transfer_is_final_only_when_its_work_requests_stopped() {
    let p = Pair::new().await;
    let len = 8usize << 20;
    let (remote, back) = p.slow_reads(len, 1, Duration::from_millis(1)).await;
    for round in 0..3u64 {
        let batch = p.a.allocate_batch(2).unwrap();
        let half = (len / 2) as u64;
        let reqs: Vec<_> = (0..2)
            .map(|i| {
                TransferRequest::read(
                    back.addr() + i * half,
                    p.peer,
                    remote.addr() + i * half,
                    half,
                )
            })
            .collect();
        p.a.submit(batch, &reqs).unwrap();
        tokio::time::sleep(Duration::from_millis(5 + round * 5)).await;
        p.a.cancel(batch).unwrap();
        let status = p.a.wait(batch).await.unwrap();
        assert_eq!(status.state, TaskState::Canceled, "round {round}");
        p.a.free_batch(batch).unwrap();
        nothing_lands(&back, 100 + round).await;
    }
    // The paths the cancels failed are made again: the next read completes.
    p.fabric.set_delay(Duration::ZERO);
    p.a.read(back.addr(), p.peer, remote.addr(), len as u64)
        .await
        .unwrap();
    assert!(read_back(&back, 0, len) == pattern(len, 1));
}

/// A deadline that passes with work requests on the wire ends the transfer as Timeout, and
/// no byte lands afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_transfer_stops_its_work_requests() {
    let p = Pair::new().await;
    let len = 4usize << 20;
    let (remote, back) = p.slow_reads(len, 2, Duration::from_millis(2)).await;
    let req = TransferRequest::read(back.addr(), p.peer, remote.addr(), len as u64)
        .with_deadline(Duration::from_millis(20));
    let err = p.a.transfer(req).await.unwrap_err();
    assert_eq!(err, Error::Timeout);
    nothing_lands(&back, 200).await;
}

/// The caller reuses `back` (fills it with pattern `seed`): nothing of an ended transfer may
/// land in it any more.
async fn nothing_lands(back: &EngineBuffer, seed: u64) {
    let len = back.len();
    let canary = pattern(len, seed);
    back.put(0, &canary).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        read_back(back, 0, len) == canary,
        "seed {seed}: a read landed late"
    );
}

/// A log kept in memory, for the lines an engine writes on this thread.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Eight transfers at once share each path, whose send queue holds 8 requests: they wait for
/// room instead of overflowing it (which would fail the path for everyone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_wait_for_room_in_a_shared_send_queue() {
    let p = Pair::with(|_, _| {}, |c| c.queue_depth = 8).await;
    // A slow wire keeps the send queues full.
    p.fabric.set_delay(Duration::from_micros(100));
    let len = 1usize << 20;
    let src = p.a.allocate(8 * len, false).unwrap();
    let dst = p.b.allocate_exported(8 * len, false, RW).unwrap();
    src.put(0, &pattern(8 * len, 6)).unwrap();
    let writes = (0..8u64).map(|i| {
        let at = i * len as u64;
        p.a.write(src.addr() + at, p.peer, dst.addr() + at, len as u64)
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    assert!(read_back(&dst, 0, 8 * len) == pattern(8 * len, 6));
}

/// Canceling one transfer fails the queue pairs it used; another transfer on the same path
/// (one NIC each side) sees its slices flushed and goes on, without using up its tries; the
/// target keeps one queue pair per path, not one per reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_does_not_fail_other_transfers_on_the_same_path() {
    let fabric = FakeFabric::new();
    let one = |fabric: &FakeFabric| rdma(&fabric.host(&["mlx5_0"]), |_| {});
    let a = TransferEngine::start(EngineConfig {
        transport: Some(TransportKind::Rdma),
        rdma: one(&fabric),
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let b = TransferEngine::start(EngineConfig {
        rdma: one(&fabric),
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    let len = 4usize << 20;
    let remote = b.allocate_exported(2 * len, false, RW).unwrap();
    remote.put(0, &pattern(2 * len, 8)).unwrap();
    let back = a.allocate(2 * len, false).unwrap();
    a.read(back.addr(), peer, remote.addr(), 4096)
        .await
        .unwrap();
    fabric.set_delay(Duration::from_micros(200));
    let long = a.read(back.addr(), peer, remote.addr(), len as u64);
    let cancels = async {
        for _ in 0..4 {
            let batch = a.allocate_batch(1).unwrap();
            let req = TransferRequest::read(
                back.addr() + len as u64,
                peer,
                remote.addr() + len as u64,
                len as u64,
            );
            a.submit(batch, &[req]).unwrap();
            tokio::time::sleep(Duration::from_millis(3)).await;
            a.cancel(batch).unwrap();
            a.wait(batch).await.unwrap();
            a.free_batch(batch).unwrap();
        }
    };
    let (done, ()) = tokio::join!(long, cancels);
    done.expect("the long read survives the cancels beside it");
    assert!(read_back(&back, 0, len) == pattern(2 * len, 8)[..len]);
    // One path: at most its two ends, plus ends being dropped.
    assert!(
        fabric.queue_pairs() <= 4,
        "{} queue pairs",
        fabric.queue_pairs()
    );
}

/// A local range the NICs refused to register (as GPU memory without GPUDirect is) goes
/// through a registered bounce buffer, still over rdma: both directions, bytes intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_range_the_nics_refuse_is_staged_through_a_bounce() {
    let p = Pair::new().await;
    let refuse = |on: bool| {
        for nic in NICS {
            p.fabric.refuse_registrations(p.gid(&p.a_nics, nic), on);
        }
    };
    let len = 3usize << 20;
    refuse(true);
    let src = p.a.allocate(len, false).unwrap();
    let dst = p.b.allocate_exported(len, false, RW).unwrap();
    // While the NICs refuse the bounce too, the request fails, typed, and that bounce is not
    // kept for the next one.
    let err =
        p.a.write(src.addr(), p.peer, dst.addr(), len as u64)
            .await
            .unwrap_err();
    assert!(err.to_string().contains("nor a bounce buffer"), "{err}");
    refuse(false);
    let before = p.carried();
    p.write_and_check(&src, &dst, len, 4).await;
    let written = p.carried();
    assert!(
        written.iter().sum::<u64>() >= before.iter().sum::<u64>() + 48,
        "{before:?} -> {written:?}"
    );
    src.put(0, &vec![0u8; len]).unwrap();
    p.a.read(src.addr(), p.peer, dst.addr(), len as u64)
        .await
        .unwrap();
    assert!(
        read_back(&src, 0, len) == pattern(len, 4),
        "read back through the bounce"
    );
    assert!(p.carried().iter().sum::<u64>() > written.iter().sum::<u64>());
}

/// A target whose NICs refuse to register its memory (the memlock limit) still registers it
/// with the engine; it is not published for rdma, and a peer's request for it goes over tcp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_the_nics_refuse_moves_over_tcp() {
    let fabric = FakeFabric::new();
    let (a_nics, b_nics) = (fabric.host(&NICS), fabric.host(&NICS));
    let a = TransferEngine::start(EngineConfig {
        rdma: rdma(&a_nics, |_| {}),
        shm: false,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let b = TransferEngine::start(EngineConfig {
        rdma: rdma(&b_nics, |_| {}),
        shm: false,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    for nic in NICS {
        fabric.refuse_registrations(fabric.gid(&b_nics, nic).unwrap(), true);
    }
    let dst = b.allocate_exported(1 << 20, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Rdma);
    let src = a.allocate(1 << 20, false).unwrap();
    src.put(0, &pattern(1 << 20, 9)).unwrap();
    a.write(src.addr(), peer, dst.addr(), 1 << 20)
        .await
        .unwrap();
    assert!(read_back(&dst, 0, 1 << 20) == pattern(1 << 20, 9));
    let carried: u64 = NICS
        .iter()
        .map(|n| fabric.executed(fabric.gid(&a_nics, n).unwrap()))
        .sum();
    assert_eq!(carried, 0, "not over rdma");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_device_is_a_typed_error_and_the_engine_works_on_over_tcp() {
    let log = Log::default();
    let writer = log.clone();
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish(),
    );
    let fabric = FakeFabric::new();
    let none = fabric.host(&[]);
    assert!(matches!(none.nics(), Err(Error::NoRdmaDevice { .. })));
    // An engine asked for rdma on a host without NICs starts, says why, and uses tcp.
    let a = TransferEngine::start(EngineConfig {
        rdma: rdma(&none, |_| {}),
        shm: false,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let b = TransferEngine::start(EngineConfig {
        rdma: rdma(&fabric.host(&NICS), |_| {}),
        shm: false,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Tcp);
    // Not silently: the engine said why it does not use rdma, and that the peer gets tcp.
    let said = log.text();
    assert!(said.contains("rdma transport off"), "{said}");
    assert!(
        said.contains("publishes rdma, but requests to it go over tcp"),
        "{said}"
    );
    assert!(said.contains("no RDMA device"), "{said}");
    let src = a.allocate(4096, false).unwrap();
    let dst = b.allocate_exported(4096, false, RW).unwrap();
    src.put(0, &pattern(4096, 3)).unwrap();
    a.write(src.addr(), peer, dst.addr(), 4096).await.unwrap();
    assert!(read_back(&dst, 0, 4096) == pattern(4096, 3));
    // Forcing rdma where it is not running is refused before anything moves.
    let mut forced = TransferRequest::write(src.addr(), peer, dst.addr(), 4096);
    forced.transport = Some(TransportKind::Rdma);
    assert_eq!(a.transfer(forced).await.unwrap_err().code(), -3001);
}

/// This machine's own NICs through rdma-core: where none exists (no device, or no rdma-core
/// at all, as on CI), starting the transport is `NoRdmaDevice`, never a panic.
#[test]
fn the_machine_without_rdma_answers_no_device() {
    if std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
    {
        eprintln!("this machine has RDMA devices: see scripts/hw-check.sh");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let handshaker: yuebing_engine::transport::rdma::Handshaker =
        Arc::new(|_, _| Box::pin(async { Err(Error::Canceled) }));
    let err = yuebing_engine::transport::rdma::RdmaTransport::start(
        RdmaConfig::default(),
        "x".into(),
        1,
        handshaker,
        rt.handle().clone(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::NoRdmaDevice { .. }), "{err:?}");
}
