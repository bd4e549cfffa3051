//! Byte permits: a large frame waits for its share of `max_in_flight_bytes` before it is read,
//! small requests keep the bounded queue, a frame over the whole budget is refused, and shutdown
//! does not wait for frames that wait. (Memory: see `permits_rss`.)

use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use yuebing_rpc::{Attachment, CallOptions, Error, Pool, PoolConfig, RunningServer, ServerConfig};

use crate::common::*;
use crate::raw;
use yuebing_testkit::eventually;

const MIB: u64 = 1 << 20;
const BUDGET: u64 = 2 * MIB;
const BODY: u32 = 16;

fn no_retry() -> PoolConfig {
    PoolConfig {
        max_connections: 1,
        max_retries: 0,
        ..PoolConfig::new("lab")
    }
}

async fn budget_server(budget: u64) -> RunningServer {
    let cfg = ServerConfig {
        max_in_flight_bytes: budget,
        queue_len: 0,
        ..ServerConfig::default()
    };
    start(&localhost(), cfg, Default::default()).await
}

/// Opens a raw connection that announces a frame of `payload` bytes and sends `sent` bytes of
/// its attachment, then stalls.
async fn stalled_frame(server: &RunningServer, payload: u64, sent: usize) -> TcpStream {
    let (mut s, _) = raw::connect(server.local_addr().unwrap(), "lab").await;
    let attach = u32::try_from(payload).unwrap() - BODY;
    s.write_all(&raw::frame_header(1, BODY, attach))
        .await
        .unwrap();
    s.write_all(&[0u8; BODY as usize]).await.unwrap();
    s.write_all(&vec![1u8; sent]).await.unwrap();
    s
}

/// Opens one connection whose frame holds the whole budget, and a second whose frame waits.
async fn budget_held(server: &RunningServer) -> (TcpStream, TcpStream) {
    let holder = stalled_frame(server, BUDGET, MIB as usize).await;
    let held = || server.in_flight_bytes() == BUDGET;
    eventually("the budget held", Duration::from_secs(10), async || held()).await;
    let waiter = stalled_frame(server, MIB, 1024).await;
    let waiting = || server.reads_waiting_for_bytes() == 1;
    eventually("a read waiting", Duration::from_secs(10), async || {
        waiting()
    })
    .await;
    (holder, waiter)
}

async fn assert_closed(s: TcpStream) {
    raw::closed_within(s, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_wait_for_permits_small_requests_are_refused() {
    let server = budget_server(BUDGET).await;
    let holder = stalled_frame(&server, BUDGET, MIB as usize).await;
    let held = || server.in_flight_bytes() == BUDGET;
    eventually("the budget held", Duration::from_secs(10), async || held()).await;

    let small: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    let err = small
        .call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"x")).await })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Overloaded { .. }), "{err:?}");
    assert!(err.never_executed());

    let large: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    let payload = Bytes::from(vec![9u8; MIB as usize]);
    let sent = payload.clone();
    let call = tokio::spawn(async move {
        let opts = CallOptions::method("echo_att").timeout(Duration::from_secs(30));
        large
            .call_with(opts, |c, ctx| {
                let x = Attachment(sent.clone());
                async move { c.echo_att(ctx, x).await }
            })
            .await
    });
    let waiting = || server.reads_waiting_for_bytes() == 1;
    eventually("a read waiting", Duration::from_secs(10), async || {
        waiting()
    })
    .await;
    assert!(!call.is_finished(), "waits rather than being refused");
    assert_eq!(server.in_flight_bytes(), BUDGET);

    drop(holder);
    let echoed = call.await.unwrap().expect("served once the holder left");
    assert_eq!(echoed.0, payload);
    let returned = || server.in_flight_bytes() == 0 && server.reads_waiting_for_bytes() == 0;
    eventually(
        "the permits returned",
        Duration::from_secs(10),
        async || returned(),
    )
    .await;
}

#[tokio::test]
async fn a_frame_over_the_byte_budget_is_refused_not_awaited() {
    let budget = 4 * MIB;
    let server = budget_server(budget).await;
    let (mut s, announced) = raw::connect(server.local_addr().unwrap(), "lab").await;
    assert_eq!(announced, budget, "the limit announced is the budget");
    let attach = 8 * MIB as u32;
    s.write_all(&raw::frame_header(7, BODY, attach))
        .await
        .unwrap();
    s.write_all(&[0u8; BODY as usize]).await.unwrap();
    s.write_all(&vec![1u8; attach as usize]).await.unwrap();
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        raw::read_response::<LabResponse>(&mut s),
    )
    .await
    .expect("an answer, not a wait");
    assert_eq!(reply.request_id, 7);
    let err = Error::from_server_error(&reply.message.unwrap_err());
    assert_eq!(
        err,
        Error::FrameTooLarge {
            len: u64::from(attach) + u64::from(BODY),
            max: budget
        }
    );

    let pool: Pool<LabRpc> = Pool::new(server.local_endpoint().clone(), no_retry());
    let echo = |n: u64| {
        let x = Attachment(Bytes::from(vec![2u8; n as usize]));
        pool.call(move |c, ctx| {
            let x = x.clone();
            async move { c.echo_att(ctx, x).await }
        })
    };
    let err = echo(5 * MIB).await.unwrap_err();
    assert!(
        matches!(err, Error::FrameTooLarge { max, .. } if max == budget),
        "{err:?}"
    );
    assert_eq!(echo(3 * MIB).await.unwrap().len() as u64, 3 * MIB);
    let returned = || server.in_flight_bytes() == 0;
    eventually(
        "the permits returned",
        Duration::from_secs(10),
        async || returned(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_frames_waiting_for_permits() {
    let server = budget_server(BUDGET).await;
    let (holder, waiter) = budget_held(&server).await;
    let report = tokio::time::timeout(
        Duration::from_secs(10),
        server.shutdown(Duration::from_secs(60)),
    )
    .await
    .expect("shutdown ends well within its grace period");
    assert_eq!(report.cut, 0);
    assert_closed(holder).await;
    assert_closed(waiter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_does_not_wait_for_frames_waiting_for_permits() {
    let server = budget_server(BUDGET).await;
    let (holder, waiter) = budget_held(&server).await;
    tokio::time::timeout(Duration::from_secs(10), server.kill())
        .await
        .expect("kill ends at once");
    assert_closed(holder).await;
    assert_closed(waiter).await;
}
