//! Two engines of the same user on one host use the shm transport: mapped memfds, bounds and
//! instance enforced by the initiator, liveness checked after every copy.

mod common;
use common::*;
use yuebing_engine::{EngineConfig, TransferEngine, TransferRequest, TransportKind};
use yuebing_testkit::patterns::pattern;

async fn start() -> TransferEngine {
    TransferEngine::start(EngineConfig::default())
        .await
        .expect("engine starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shm_transfer_can_be_awaited_outside_the_engines_runtime() {
    let a = start().await;
    let b = start().await;
    writes_from_a_plain_thread(a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initiator_enforces_bounds_and_a_buffer_exported_later_is_mapped() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(1 << 16, false).unwrap();
    let first = b.allocate_exported(4096, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    a.write(src.addr(), peer, first.addr(), 4096).await.unwrap();
    for (addr, len) in [
        (first.addr() + 4000, 200),
        (first.addr() - 8, 16),
        (u64::MAX - 4, 8),
    ] {
        let mut req = TransferRequest::write(src.addr(), peer, addr, len);
        req.skip_initiator_checks = true;
        assert_eq!(
            a.transfer(req).await.unwrap_err().code(),
            -3504,
            "{addr:#x}+{len}"
        );
    }
    let later = b.allocate_exported(8192, false, RW).unwrap();
    a.close_segment(peer).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    a.write(src.addr(), peer, later.addr() + 100, 1000)
        .await
        .unwrap();
    assert!(read_back(&later, 100, 1000) == read_back(&src, 0, 1000));
}

#[tokio::test]
async fn an_engine_without_shm_is_reached_over_tcp() {
    let a = start().await;
    let b = TransferEngine::start(EngineConfig {
        shm: false,
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Tcp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_released_while_an_importer_maps_it_is_never_written_again() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(1 << 20, false).unwrap();
    let dst = b.allocate_exported(1 << 20, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Shm);
    // The importer maps the buffer.
    src.put(0, &pattern(1 << 20, 1)).unwrap();
    a.write(src.addr(), peer, dst.addr(), 1 << 20)
        .await
        .unwrap();
    // The application releases it; the importer still maps its memfd.
    b.unregister(dst.addr()).unwrap();
    let before = read_back(&dst, 0, 1 << 20);
    src.put(0, &pattern(1 << 20, 2)).unwrap();
    for len in [4096u64, 1 << 20] {
        let err = a
            .write(src.addr(), peer, dst.addr(), len)
            .await
            .unwrap_err();
        assert_eq!(err.code(), -3504, "{len}: {err:?}");
        // Nor in a batch: the task fails and nothing reports it Completed.
        let batch = a.allocate_batch(1).unwrap();
        a.submit(
            batch,
            &[TransferRequest::write(src.addr(), peer, dst.addr(), len)],
        )
        .unwrap();
        let status = a.wait(batch).await.unwrap();
        assert_eq!(status.state, yuebing_engine::TaskState::Failed, "{len}");
        assert_eq!(status.completed, 0);
        a.free_batch(batch).unwrap();
    }
    assert!(
        read_back(&dst, 0, 1 << 20) == before,
        "bytes landed in a released buffer"
    );
    // A released engine buffer is retired for good.
    assert_eq!(
        b.memory().register_buffer(dst, RW).unwrap_err().code(),
        -3510
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_exporters_buffers_are_never_written_again() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(1 << 20, false).unwrap();
    let dst = b.allocate_exported(1 << 20, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    src.put(0, &pattern(1 << 20, 4)).unwrap();
    a.write(src.addr(), peer, dst.addr(), 4096).await.unwrap();
    // The engine stops without unregistering; the application keeps (and may reuse) the buffer.
    drop(b);
    let before = read_back(&dst, 0, 1 << 20);
    src.put(0, &pattern(1 << 20, 5)).unwrap();
    let err = a
        .write(src.addr(), peer, dst.addr(), 4096)
        .await
        .unwrap_err();
    assert!(matches!(err.code(), -3504 | -3505), "{err:?}");
    assert!(
        read_back(&dst, 0, 1 << 20) == before,
        "bytes landed after the stop"
    );
    assert!(dst.is_retired(), "its engine stopped");
}
