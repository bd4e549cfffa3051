//! Two engines talking over the tcp transport on 127.0.0.1: what is particular to tcp. The
//! properties every transport shares are in conformance.rs; the fault tests with real
//! processes are in the root crate's tests/transfer_faults.rs.

use std::time::Duration;

mod common;
use common::*;
use yuebing_engine::{
    EngineConfig, Error, TcpConfig, TransferEngine, TransferRequest, TransportKind,
};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;

/// An engine whose requests go over tcp (same-host peers would otherwise use shm).
async fn start(config: EngineConfig) -> TransferEngine {
    let config = EngineConfig {
        transport: Some(TransportKind::Tcp),
        ..config
    };
    TransferEngine::start(config).await.expect("engine starts")
}

/// Two default engines over tcp after the byte-exact round trips of every size: `a` with
/// buffers `src` and `back`, `b` with `dst`, `peer` being `b` as `a` sees it.
struct RoundTripped {
    a: TransferEngine,
    _b: TransferEngine,
    peer: yuebing_engine::SegmentHandle,
    src: std::sync::Arc<yuebing_engine::EngineBuffer>,
    back: std::sync::Arc<yuebing_engine::EngineBuffer>,
    dst: std::sync::Arc<yuebing_engine::EngineBuffer>,
}

async fn round_tripped() -> RoundTripped {
    let a = start(EngineConfig::default()).await;
    let b = start(EngineConfig::default()).await;
    let size = (64 << 20) + 64;
    let src = a.allocate(size, false).unwrap();
    let back = a.allocate(size, false).unwrap();
    let dst = b.allocate_exported(size, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    assert_eq!(a.selected_transport(peer).unwrap(), TransportKind::Tcp);
    round_trips(&a, peer, &src, &dst, &back).await;
    RoundTripped {
        a,
        _b: b,
        peer,
        src,
        back,
        dst,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_small_requests_alternate_on_one_connection_byte_exact() {
    // One connection, so that every request follows the one before on the same stream: after
    // a large payload both ends read the next header on its own, after a small one buffered.
    let one = || EngineConfig {
        tcp: TcpConfig {
            connections: 1,
            ..TcpConfig::default()
        },
        ..EngineConfig::default()
    };
    let a = start(one()).await;
    let b = start(one()).await;
    let size = 4 << 20;
    let src = a.allocate(size, false).unwrap();
    let back = a.allocate(size, false).unwrap();
    let dst = b.allocate_exported(size, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    let lens = [
        3 << 20,
        5,
        1 << 20,
        100,
        64 << 10,
        (64 << 10) - 1,
        1 << 16,
        4096,
        3 << 20,
    ];
    for (i, len) in lens.into_iter().enumerate() {
        let data = pattern(len, i as u64);
        let (so, doff) = (i * 7 % 64, i * 13 % 64);
        src.put(so, &data).unwrap();
        let d = dst.addr() + doff as u64;
        a.write(src.addr() + so as u64, peer, d, len as u64)
            .await
            .unwrap();
        assert!(read_back(&dst, doff, len) == data, "write of {len} bytes");
        a.read(back.addr() + 1, peer, d, len as u64).await.unwrap();
        assert!(read_back(&back, 1, len) == data, "read of {len} bytes");
    }
    // Large and small sizes pipelined in one batch, each to its own range.
    let data = pattern(size, 99);
    src.put(0, &data).unwrap();
    let (mut at, mut reqs) = (0u64, Vec::new());
    let pipelined = [
        1 << 20,
        5,
        256 << 10,
        100,
        64 << 10,
        65535,
        4096,
        1 << 20,
        7,
        512 << 10,
    ];
    for len in pipelined {
        reqs.push(TransferRequest::write(
            src.addr() + at,
            peer,
            dst.addr() + at,
            len,
        ));
        at += len;
    }
    let batch = a.allocate_batch(reqs.len()).unwrap();
    a.submit(batch, &reqs).unwrap();
    let status = a.wait(batch).await.unwrap();
    assert_eq!(status.completed, reqs.len(), "{status:?}");
    assert!(read_back(&dst, 0, at as usize) == data[..at as usize]);
}

/// On a runtime with one worker both ends poll for a lone request's answer (and the target for
/// the next request) before parking: lone requests, requests after the spin ran out, a batch
/// after lone ones, and a lone read given up mid-spin must all keep the stream in step.
#[tokio::test(flavor = "current_thread")]
async fn lone_requests_that_spin_stay_byte_exact_on_a_one_worker_runtime() {
    let RoundTripped {
        a,
        _b,
        peer,
        src,
        back,
        dst,
    } = round_tripped().await;

    let small = pattern(4096, 42);
    src.put(0, &small).unwrap();
    for pause in [Duration::ZERO, Duration::from_millis(5), Duration::ZERO] {
        // After 5 ms both spins have run out and both ends are parked.
        tokio::time::sleep(pause).await;
        a.write(src.addr(), peer, dst.addr() + 1, 4096)
            .await
            .unwrap();
        assert!(read_back(&dst, 1, 4096) == small);
    }

    // A lone read given up while it polls for its answer: the answer that comes later is
    // dropped, and the next requests on the connection still get their own answers.
    // One poll sends it and starts the spin; its answer needs the target's task, which cannot
    // run on this one thread until the poll returns.
    let before = read_back(&back, 0, 200 << 10);
    assert!(
        before != read_back(&dst, 0, 200 << 10),
        "a landed read would show"
    );
    {
        let mut read = std::pin::pin!(a.read(back.addr(), peer, dst.addr(), 200 << 10));
        assert!(futures::poll!(read.as_mut()).is_pending());
    }
    let reqs: Vec<TransferRequest> = (0..32u64)
        .map(|i| {
            let at = 8192 + i * 4096;
            TransferRequest::write(src.addr(), peer, dst.addr() + at, 4096)
        })
        .collect();
    let batch = a.allocate_batch(reqs.len()).unwrap();
    a.submit(batch, &reqs).unwrap();
    let status = a.wait(batch).await.unwrap();
    assert_eq!(status.completed, reqs.len(), "{status:?}");
    for i in 0..32 {
        assert!(
            read_back(&dst, 8192 + i * 4096, 4096) == small,
            "request {i}"
        );
    }
    // On the given-up read's connection, after its answer: by now that answer came and went.
    let elsewhere = 1 << 20;
    a.read(back.addr() + elsewhere as u64, peer, dst.addr() + 1, 4096)
        .await
        .unwrap();
    assert!(read_back(&back, elsewhere, 4096) == small);
    assert!(
        read_back(&back, 0, 200 << 10) == before,
        "the given-up read landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_can_be_awaited_outside_the_engines_runtime() {
    let a = start(EngineConfig::default()).await;
    let b = start(EngineConfig::default()).await;
    writes_from_a_plain_thread(a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_bound_slices_big_requests_and_refuses_only_on_a_full_queue() {
    let tight = TcpConfig {
        max_in_flight_bytes: 1 << 20,
        queue_len: 0,
        ..TcpConfig::default()
    };
    let a = start(EngineConfig {
        tcp: tight,
        ..EngineConfig::default()
    })
    .await;
    let b = start(EngineConfig::default()).await;
    let src = a.allocate(8 << 20, false).unwrap();
    let dst = b.allocate_exported(8 << 20, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    let batch = a.allocate_batch(8).unwrap();
    let reqs: Vec<_> = (0..8u64)
        .map(|i| {
            TransferRequest::write(
                src.addr() + (i << 20),
                peer,
                dst.addr() + (i << 20),
                1 << 20,
            )
        })
        .collect();
    a.submit(batch, &reqs).unwrap();
    let s = a.wait(batch).await.unwrap();
    let overloaded = (0..8)
        .filter(|&i| {
            a.task_status(batch, i)
                .unwrap()
                .error
                .is_some_and(|e| e.code() == -3503)
        })
        .count();
    assert!(s.completed >= 1, "{s:?}");
    assert_eq!(s.completed + overloaded, 8, "{s:?}");
    a.free_batch(batch).unwrap();

    let patient = start(EngineConfig {
        tcp: TcpConfig {
            max_in_flight_bytes: 1 << 20,
            ..TcpConfig::default()
        },
        ..EngineConfig::default()
    })
    .await;
    let src2 = patient.allocate(8 << 20, false).unwrap();
    let peer2 = patient.open_segment(b.name()).await.unwrap();
    let data = pattern(8 << 20, 3);
    src2.put(0, &data).unwrap();
    patient
        .write(src2.addr(), peer2, dst.addr(), 8 << 20)
        .await
        .unwrap();
    assert!(
        read_back(&dst, 0, 8 << 20) == data,
        "sliced under the bound, not refused"
    );
    assert_eq!(a.status(batch).unwrap_err().code(), -3502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_arrive_without_polling_and_never_for_failed_batches() {
    let a = start(EngineConfig::default()).await;
    let b = start(EngineConfig {
        notify_queue_len: 2,
        ..EngineConfig::default()
    })
    .await;
    let src = a.allocate(1 << 20, false).unwrap();
    let dst = b.allocate_exported(1 << 20, false, RW).unwrap();
    let peer = a.open_segment(b.name()).await.unwrap();
    let data = pattern(1 << 20, 5);
    src.put(0, &data).unwrap();

    // Nobody on either side polls: the sender's tasks deliver it when the batch completes.
    let batch = a.allocate_batch(4).unwrap();
    let reqs: Vec<_> = (0..4u64)
        .map(|i| {
            TransferRequest::write(
                src.addr() + (i << 18),
                peer,
                dst.addr() + (i << 18),
                1 << 18,
            )
        })
        .collect();
    a.submit_with_notify(batch, &reqs, b"kv block 7 ready".to_vec())
        .unwrap();
    let got = eventually("the notification", Duration::from_secs(5), async || {
        let got = b.take_notifications();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message, b"kv block 7 ready");
    assert_eq!(got[0].from, a.name());
    assert!(
        read_back(&dst, 0, 1 << 20) == data,
        "the data landed before the message"
    );
    let s = a.wait(batch).await.unwrap();
    assert_eq!(s.notify_error, None);
    a.free_batch(batch).unwrap();

    // A batch with a failing task sends nothing.
    let batch = a.allocate_batch(2).unwrap();
    let mut bad = TransferRequest::write(src.addr(), peer, dst.addr() + (1 << 20) - 10, 100);
    bad.skip_initiator_checks = true;
    let good = TransferRequest::write(src.addr(), peer, dst.addr(), 100);
    a.submit_with_notify(batch, &[good, bad], b"never".to_vec())
        .unwrap();
    a.wait(batch).await.unwrap();
    a.free_batch(batch).unwrap();
    assert!(b.take_notifications().is_empty());

    // A full queue is the sender's typed error, not a silent drop.
    let mut errors = Vec::new();
    for i in 0..3u8 {
        let batch = a.allocate_batch(1).unwrap();
        a.submit_with_notify(
            batch,
            &[TransferRequest::write(src.addr(), peer, dst.addr(), 8)],
            vec![i],
        )
        .unwrap();
        errors.push(a.wait(batch).await.unwrap().notify_error);
        a.free_batch(batch).unwrap();
    }
    assert_eq!(errors, vec![None, None, Some(Error::NotificationQueueFull)]);
    assert_eq!(b.take_notifications().len(), 2);

    // Bad notifying submits are refused up front.
    let batch = a.allocate_batch(2).unwrap();
    let own = a.own_segment();
    let mixed = [
        TransferRequest::write(src.addr(), peer, dst.addr(), 8),
        TransferRequest::write(src.addr(), own, src.addr() + 4096, 8),
    ];
    assert_eq!(
        a.submit_with_notify(batch, &mixed, vec![])
            .unwrap_err()
            .code(),
        -3001
    );
    let big = vec![0u8; 4097];
    assert_eq!(
        a.submit_with_notify(batch, &mixed[..1], big)
            .unwrap_err()
            .code(),
        -3001
    );
    assert_eq!(a.status(batch).unwrap().tasks, 0);
}
