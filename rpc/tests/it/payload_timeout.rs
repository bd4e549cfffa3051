//! The payload deadline: once a frame's header arrived (and its byte permits, for a large one),
//! the rest must arrive within `ServerConfig::payload_timeout`, or the connection is closed and
//! the frame's permits return. Slow frames that finish in time are served.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use yuebing_rpc::{Attachment, CallOptions, Pool, PoolConfig, RunningServer, ServerConfig};

use crate::common::*;
use crate::raw;
use yuebing_testkit::eventually;

const MIB: u64 = 1 << 20;
const BUDGET: u64 = 2 * MIB;
const BODY: u32 = 16;
/// Short for a stall, generous for a scheduler under load.
// Long enough that a loaded CI machine sees the stalled frame hold its permits before it is cut.
const STALL_TIMEOUT: Duration = Duration::from_millis(1500);
/// Several times `STALL_TIMEOUT`: the ceiling for noticing a stalled frame.
const CEILING: Duration = Duration::from_secs(5);

async fn server(payload_timeout: Duration) -> RunningServer {
    let cfg = ServerConfig {
        max_in_flight_bytes: BUDGET,
        payload_timeout,
        ..ServerConfig::default()
    };
    start(&localhost(), cfg, Default::default()).await
}

/// Sends the header of a frame of `body` + `attach` bytes and `sent` bytes of its payload, then
/// stalls (returns the stream, which stays open).
async fn stall_mid_frame(server: &RunningServer, body: u32, attach: u32, sent: usize) -> TcpStream {
    let (mut s, _) = raw::connect(server.local_addr().unwrap(), "lab").await;
    s.write_all(&raw::frame_header(1, body, attach))
        .await
        .unwrap();
    s.write_all(&vec![0u8; sent]).await.unwrap();
    s
}

fn echo_att(
    pool: &Pool<LabRpc>,
    n: u64,
) -> impl std::future::Future<Output = yuebing_rpc::Result<Attachment>> + '_ {
    let x = Attachment(Bytes::from(vec![6u8; n as usize]));
    let opts = CallOptions::method("echo_att").timeout(Duration::from_secs(30));
    pool.call_with(opts, move |c, ctx| {
        let x = x.clone();
        async move { c.echo_att(ctx, x).await }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_frame_stalled_mid_payload_is_closed_and_its_permits_return() {
    let server = server(STALL_TIMEOUT).await;
    let stalled = stall_mid_frame(&server, BODY, (BUDGET as u32) - BODY, MIB as usize).await;
    let held = || server.in_flight_bytes() == BUDGET;
    eventually(
        "the stalled frame holds the whole budget",
        CEILING,
        async || held(),
    )
    .await;

    // A large call needs permits the stalled frame holds: it waits for them, and gets them
    // when the stalled connection is closed.
    let pool: Pool<LabRpc> = Pool::new(
        server.local_endpoint().clone(),
        PoolConfig {
            max_retries: 0,
            ..PoolConfig::new("lab")
        },
    );
    let waiting = echo_att(&pool, MIB);
    tokio::pin!(waiting);
    tokio::select! {
        biased;
        () = raw::closed_within(stalled, CEILING) => {}
        r = &mut waiting => panic!("served while the stalled frame held the budget: {r:?}"),
    }
    let echoed = waiting
        .await
        .expect("served once the stalled frame's permits returned");
    assert_eq!(echoed.len() as u64, MIB);
    let returned = || server.in_flight_bytes() == 0 && server.reads_waiting_for_bytes() == 0;
    eventually("the permits returned", CEILING, async || returned()).await;
    assert_eq!(
        echo_att(&pool, BUDGET - MIB / 2).await.unwrap().len() as u64,
        BUDGET - MIB / 2,
        "the whole budget is free again"
    );
}

#[tokio::test]
async fn a_small_frame_stalled_mid_body_is_closed_and_others_are_served() {
    let server = server(STALL_TIMEOUT).await;
    let stalled = stall_mid_frame(&server, 1000, 0, 300).await;
    raw::closed_within(stalled, CEILING).await;
    let stalled = stall_mid_frame(&server, BODY, 4000, BODY as usize + 100).await;
    raw::closed_within(stalled, CEILING).await;
    let pool = pool(&server);
    let echoed = pool
        .call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"still here")).await })
        .await
        .unwrap();
    assert_eq!(echoed, "still here");
    assert_eq!(server.in_flight_bytes(), 0);
}

#[tokio::test]
async fn frames_that_trickle_in_within_the_deadline_are_served() {
    // Each frame takes about 60% of the timeout; the two together take more than all of it, so
    // the second is served only if its deadline starts at its own header.
    let timeout = Duration::from_secs(2);
    let pieces = 8;
    let gap = timeout * 6 / 10 / pieces;
    let server = server(timeout).await;
    let (mut s, _) = raw::connect(server.local_addr().unwrap(), "lab").await;
    for (id, len) in [(1u64, 200usize << 10), (2, 1000)] {
        let x = Bytes::from(vec![id as u8; len]);
        let frame = raw::request_frame(id, LabRequest::Echo { x: x.clone() });
        for piece in frame.chunks(frame.len().div_ceil(pieces as usize)) {
            s.write_all(piece).await.unwrap();
            tokio::time::sleep(gap).await;
        }
        let reply = tokio::time::timeout(CEILING, raw::read_response::<LabResponse>(&mut s))
            .await
            .expect("a response");
        assert_eq!(reply.request_id, id);
        match reply.message {
            Ok(LabResponse::Echo(echoed)) => assert_eq!(echoed, x),
            other => panic!("unexpected response {other:?}"),
        }
    }
    assert_eq!(server.in_flight_bytes(), 0);
}
