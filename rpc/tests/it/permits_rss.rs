//! Byte permits bound what a server buffers for frames still arriving (issue 13, item 4).
//!
//! The test measures its process's resident memory, which other tests running in parallel
//! threads of this binary would disturb: it runs alone, in a process of its own
//! (`yuebing_testkit::process::alone`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use yuebing_rpc::{Attachment, CallOptions, ServerConfig};
use yuebing_testkit::eventually;

use crate::common::*;
use crate::raw;

const MIB: u64 = 1 << 20;
const MAX_FRAME: u64 = 8 * MIB;
const BUDGET: u64 = 16 * MIB;
const CONNS: u64 = 64;
/// Of each frame's attachment, this much is sent before the client stalls.
const SENT: usize = 4 << 20;
const BODY: u32 = 16;
/// The attachment announced: the frame's payload is exactly `MAX_FRAME`.
const ATTACH: u32 = MAX_FRAME as u32 - BODY;
/// Without byte permits each stalled frame holds `SENT` bytes: 256 MiB in all.
const RSS_CEILING: u64 = 48 * MIB;

/// This process's resident set, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// Polls `sample` every 100 ms until it has not changed for a second (the byte count exactly,
/// the resident set within 1 MiB) or `limit` passes; returns the last sample.
async fn settled(limit: Duration, mut sample: impl FnMut() -> (u64, u64)) -> (u64, u64) {
    let until = Instant::now() + limit;
    let mut last = sample();
    let mut still = 0;
    while still < 10 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sample();
        let same = now.0 == last.0 && now.1.abs_diff(last.1) < MIB;
        still = if same { still + 1 } else { 0 };
        last = now;
    }
    last
}

/// 64 connections each send a header announcing an 8 MiB attachment and 4 MiB of it, then stall.
/// With a byte budget of 16 MiB the server buffers two of those frames and leaves the rest unread
/// in the kernel's socket buffers (TCP pushes back); it must not hold 64 × 4 MiB.
#[test]
fn stalled_frames_with_attachments_hold_at_most_the_byte_budget() {
    yuebing_testkit::process::alone(
        "permits_rss::stalled_frames_with_attachments_hold_at_most_the_byte_budget",
        || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(stalled_frames());
        },
    );
}

async fn stalled_frames() {
    let cfg = ServerConfig {
        max_frame: MAX_FRAME,
        max_in_flight_bytes: BUDGET,
        ..ServerConfig::default()
    };
    let server = start(&localhost(), cfg, Default::default()).await;
    let addr = server.local_addr().unwrap();
    let pool = pool(&server);
    let small = Bytes::from_static(b"warm");
    pool.call(|c, ctx| {
        let x = small.clone();
        async move { c.echo(ctx, x).await }
    })
    .await
    .expect("warm-up call");
    let source = Bytes::from(vec![0xA5u8; SENT]);
    let before = rss_bytes();

    let (connected, written) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writers: Vec<_> = (1..=CONNS)
        .map(|id| {
            let (source, connected, written) = (source.clone(), connected.clone(), written.clone());
            tokio::spawn(async move {
                let (mut s, max_frame) = raw::connect(addr, "lab").await;
                assert_eq!(max_frame, MAX_FRAME);
                connected.fetch_add(1, Ordering::SeqCst);
                s.write_all(&raw::frame_header(id, BODY, ATTACH))
                    .await
                    .unwrap();
                s.write_all(&[0u8; BODY as usize]).await.unwrap();
                for chunk in source.chunks(64 << 10) {
                    s.write_all(chunk).await.unwrap();
                    written.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                // Stall: keep the connection open, the frame unfinished, until aborted.
                std::future::pending::<()>().await;
            })
        })
        .collect();
    let all_connected = || connected.load(Ordering::SeqCst) == CONNS;
    eventually(
        "every client connected",
        Duration::from_secs(20),
        async || all_connected(),
    )
    .await;
    let (sent, after) = settled(Duration::from_secs(60), || {
        (written.load(Ordering::SeqCst), rss_bytes())
    })
    .await;
    let grown = after.saturating_sub(before);
    eprintln!(
        "RSS before {} MiB, after {} MiB: +{} MiB; clients wrote {} MiB",
        before / MIB,
        after / MIB,
        grown / MIB,
        sent / MIB
    );
    assert!(
        sent >= 2 * SENT as u64,
        "the frames that got permits were read whole"
    );
    assert!(
        grown < RSS_CEILING,
        "RSS grew by {} MiB (ceiling {} MiB)",
        grown / MIB,
        RSS_CEILING / MIB
    );

    // The stalled clients go away; their permits come back and a frame of the largest size fits.
    for w in &writers {
        w.abort();
    }
    for w in writers {
        assert!(w.await.unwrap_err().is_cancelled());
    }
    let big = Bytes::from(vec![3u8; (MAX_FRAME - 1024) as usize]);
    let opts = CallOptions::method("echo_att").timeout(Duration::from_secs(30));
    let echoed = pool
        .call_with(opts, |c, ctx| {
            let x = Attachment(big.clone());
            async move { c.echo_att(ctx, x).await }
        })
        .await
        .expect("the permits came back");
    assert_eq!(echoed.0, big);
}
