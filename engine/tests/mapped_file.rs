//! Exported memory that is not an engine-allocated memfd: a caller's file mapped by the engine
//! (store space mounted from `/dev/shm`), and caller memory registered for peers. Same-host
//! peers cannot map either, so requests to them go over tcp while the rest of the peer's
//! memory still takes shm; and a file truncated under its mapping fails transfers with an
//! error instead of killing the process with SIGBUS.

mod common;
use std::fs::File;
use std::os::unix::fs::FileExt;

use common::*;
use yuebing_engine::{EngineConfig, Location, TransferEngine, TransferRequest, TransportKind};
use yuebing_testkit::patterns::pattern;

async fn start() -> TransferEngine {
    TransferEngine::start(EngineConfig::default())
        .await
        .expect("engine starts")
}

/// A file on tmpfs of `len` bytes, unlinked at once (the test keeps it open to truncate it).
fn shm_file(len: u64) -> File {
    let path = format!(
        "/dev/shm/yuebing-mapped-file-test-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    );
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file.set_len(len).unwrap();
    file
}

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_file_is_written_into_the_file_over_tcp_beside_shm() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(MIB, false).unwrap();
    let back = a.allocate(MIB, false).unwrap();
    let memfd = b.allocate_exported(MIB, false, RW).unwrap();
    let file = shm_file(2 * MIB as u64);
    let mapped = b.map_file_exported(&file, MIB as u64, MIB, RW).unwrap();
    assert!(mapped.is_file() && mapped.fd().is_none());
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Shm);
    src.put(0, &pattern(MIB, 7)).unwrap();
    // The memfd buffer through shm, the file's range through tcp: both land.
    a.write(src.addr(), peer, memfd.addr(), MIB as u64)
        .await
        .unwrap();
    a.write(src.addr(), peer, mapped.addr() + 100, 5000)
        .await
        .unwrap();
    let mut in_file = vec![0u8; 5000];
    file.read_exact_at(&mut in_file, MIB as u64 + 100).unwrap();
    assert!(
        in_file == pattern(MIB, 7)[..5000],
        "the write is in the file"
    );
    a.read(back.addr(), peer, mapped.addr() + 100, 5000)
        .await
        .unwrap();
    assert!(read_back(&back, 0, 5000) == in_file);
    // shm cannot serve the file's range, even when asked to.
    let mut forced = TransferRequest::write(src.addr(), peer, mapped.addr(), 4096);
    forced.transport = Some(TransportKind::Shm);
    let err = a.transfer(forced).await.unwrap_err();
    assert_eq!(err.code(), -3001, "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_fails_transfers_and_the_process_lives_on() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(MIB, false).unwrap();
    let back = a.allocate(MIB, false).unwrap();
    let file = shm_file(MIB as u64);
    let mapped = b.map_file_exported(&file, 0, MIB, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    src.put(0, &pattern(MIB, 3)).unwrap();
    a.write(src.addr(), peer, mapped.addr(), MIB as u64)
        .await
        .unwrap();
    // Its owner shrinks the file to one page: the rest of the mapping is gone.
    file.set_len(4096).unwrap();
    let gone = mapped.addr() + 8192;
    let err = a.write(src.addr(), peer, gone, 4096).await.unwrap_err();
    assert!(err.code() < 0, "{err:?}");
    let err = a.read(back.addr(), peer, gone, 4096).await.unwrap_err();
    assert!(err.code() < 0, "{err:?}");
    // Its own engine's copies and byte access fail the same way.
    let own = b.allocate(4096, false).unwrap();
    let local = b.open_segment(b.name()).await.unwrap();
    assert!(b.write(own.addr(), local, gone, 4096).await.is_err());
    assert!(b.read(own.addr(), local, gone, 4096).await.is_err());
    let mut out = [0u8; 16];
    assert!(mapped.get(8192, &mut out).is_err());
    assert!(mapped.put(8192, &out).is_err());
    // A copy within the buffer, from its own lost pages (overlapping: through a bounce).
    // SAFETY (test): nothing else touches these bytes meanwhile; the source lies in `mapped`.
    let within =
        unsafe { mapped.write_from(8192 + 100, (mapped.addr() + 8192) as *const u8, 4096) };
    assert!(within.is_err(), "an error, not SIGBUS");
    // What is left of the file still works, from the peer and locally.
    a.write(src.addr(), peer, mapped.addr(), 4096)
        .await
        .unwrap();
    b.read(own.addr(), local, mapped.addr(), 4096)
        .await
        .unwrap();
    assert!(read_back(&own, 0, 4096) == pattern(MIB, 3)[..4096]);
}

#[test]
fn a_file_range_must_be_aligned_and_inside_the_file() {
    let file = shm_file(64 << 10);
    let map = yuebing_engine::EngineBuffer::map_file;
    assert_eq!(map(&file, 100, 4096).unwrap_err().code(), -3001);
    assert_eq!(map(&file, 0, (64 << 10) + 1).unwrap_err().code(), -3001);
    assert_eq!(map(&file, 64 << 10, 4096).unwrap_err().code(), -3001);
    assert_eq!(map(&file, u64::MAX - 4095, 4096).unwrap_err().code(), -3001);
    assert_eq!(map(&file, 0, 0).unwrap_err().code(), -3001);
    let device = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    assert_eq!(
        map(&device, 0, 4096).unwrap_err().code(),
        -3001,
        "not a regular file"
    );
    assert_eq!(map(&file, 4096, 60 << 10).unwrap().len(), 60 << 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_memory_exported_to_a_same_host_peer_is_reached_over_tcp() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(MIB, false).unwrap();
    // Memory of b's caller (here: an engine buffer of another engine, which b only borrows).
    let lender = start().await;
    let theirs = lender.allocate(MIB, false).unwrap();
    // SAFETY (test): `theirs` stays mapped (held by the test) until b stops, and is touched
    // only through engines and `read_back` while no transfer is in flight.
    unsafe {
        b.register_exported(theirs.addr() as *mut u8, MIB, Location::default(), RW)
            .unwrap();
    }
    let engine_own = b.allocate_exported(4096, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    src.put(0, &pattern(MIB, 9)).unwrap();
    a.write(src.addr(), peer, engine_own.addr(), 4096)
        .await
        .unwrap();
    a.write(src.addr(), peer, theirs.addr() + 64, 70_000)
        .await
        .unwrap();
    assert!(read_back(&theirs, 64, 70_000) == pattern(MIB, 9)[..70_000]);
    drop(b);
}

/// One request into lost pages fails alone: the target answers it with an error and keeps the
/// connection, so the requests beside it on the same connection still land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_into_lost_pages_fails_alone() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let counts = recorder.handle();
    let a = TransferEngine::start(EngineConfig {
        metrics: yuebing_rpc::MetricsSink::new(std::sync::Arc::new(recorder)),
        ..EngineConfig::default()
    })
    .await
    .expect("engine starts");
    let b = start().await;
    let src = a.allocate(4 * MIB, false).unwrap();
    let back = a.allocate(4 * MIB, false).unwrap();
    src.put(0, &pattern(4 * MIB, 5)).unwrap();
    let file = shm_file(4 * MIB as u64);
    let mapped = b.map_file_exported(&file, 0, 4 * MIB, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    file.set_len(2 * MIB as u64).unwrap();
    let lost = mapped.addr() + 3 * MIB as u64;
    let chunk = 64 << 10;
    // Writes and small and large reads of the first two MiB, with one bad write and one bad
    // small read among them.
    let mut requests = Vec::new();
    for i in 0..16u64 {
        let at = i * chunk;
        requests.push(TransferRequest::write(
            src.addr() + at,
            peer,
            mapped.addr() + at,
            chunk,
        ));
    }
    requests.push(TransferRequest::write(src.addr(), peer, lost, chunk));
    for i in 0..8u64 {
        let at = i * 1000;
        requests.push(TransferRequest::read(
            back.addr() + at,
            peer,
            mapped.addr() + at,
            1000,
        ));
    }
    requests.push(TransferRequest::read(
        back.addr() + 2 * MIB as u64,
        peer,
        lost,
        1000,
    ));
    let batch = a.allocate_batch(requests.len()).unwrap();
    a.submit(batch, &requests).unwrap();
    let status = a.wait(batch).await.unwrap();
    assert_eq!(status.completed, requests.len() - 2, "{status:?}");
    let bad = [16, requests.len() - 1];
    for (i, _) in requests.iter().enumerate() {
        let task = a.task_status(batch, i).unwrap();
        assert_eq!(
            task.state == yuebing_engine::TaskState::Completed,
            !bad.contains(&i),
            "task {i}: {task:?}"
        );
    }
    let err = status.error.expect("the failed tasks' error");
    assert_eq!(err.code(), -3509, "{err:?}");
    a.free_batch(batch).unwrap();
    // The engine counted them: by transport and direction, bytes of the completed ones only.
    let text = counts.render();
    for line in [
        r#"yuebing_engine_transfers_total{transport="tcp",opcode="write"} 17"#.to_string(),
        format!(
            r#"yuebing_engine_bytes_total{{transport="tcp",opcode="write"}} {}"#,
            16 * chunk
        ),
        r#"yuebing_engine_transfers_total{transport="tcp",opcode="read"} 9"#.into(),
        r#"yuebing_engine_bytes_total{transport="tcp",opcode="read"} 8000"#.into(),
        r#"yuebing_engine_failures_total{transport="tcp",opcode="write",code="-3509"} 1"#.into(),
        r#"yuebing_engine_failures_total{transport="tcp",opcode="read",code="-3509"} 1"#.into(),
        r#"yuebing_engine_transfers_in_flight{transport="tcp",opcode="write"} 0"#.into(),
        r#"yuebing_engine_transfers_in_flight{transport="tcp",opcode="read"} 0"#.into(),
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "{line} missing from\n{text}"
        );
    }
    // And the connection is still good for more.
    a.write(src.addr(), peer, mapped.addr(), MIB as u64)
        .await
        .unwrap();
}

/// A peer whose cached descriptor says shm maps a memfd at an address where the target has
/// since mapped a file is sent over tcp after one refusal, not refused at every try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_descriptor_does_not_keep_a_file_range_on_shm() {
    let a = start().await;
    let b = start().await;
    let src = a.allocate(MIB, false).unwrap();
    src.put(0, &pattern(MIB, 8)).unwrap();
    // The kernel hands a freed range to the next mapping of its size, unless another test's
    // mapping took it first: tried until it does (the earlier attempts are kept mapped).
    let mut kept = Vec::new();
    let (peer, file, mapped, reused) = loop {
        let old = b.allocate_exported(MIB, false, RW).unwrap();
        let old_addr = old.addr();
        let peer = a.open_segment(b.name()).await.unwrap();
        // The peer maps the memfd and caches the descriptor that lists it for shm.
        a.write(src.addr(), peer, old_addr, 4096).await.unwrap();
        b.unregister(old_addr).unwrap();
        drop(old);
        let file = shm_file(MIB as u64);
        let mapped = b.map_file_exported(&file, 0, MIB, RW).unwrap();
        let reused = mapped.addr() == old_addr;
        if reused || kept.len() == 20 {
            break (peer, file, mapped, reused);
        }
        a.close_segment(peer).unwrap();
        kept.push((file, mapped));
    };
    if !reused {
        eprintln!("the kernel never reused the address: the stale path is not exercised");
    }
    for _ in 0..3 {
        a.write(src.addr(), peer, mapped.addr(), 4096)
            .await
            .unwrap();
    }
    let mut in_file = vec![0u8; 4096];
    file.read_exact_at(&mut in_file, 0).unwrap();
    assert!(in_file == pattern(MIB, 8)[..4096]);
}
