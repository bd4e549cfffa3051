//! Deadlines reach the server; dropping a call cancels it there.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use yuebing_rpc::{CallOptions, Error};

use crate::common::*;
use yuebing_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_deadline_times_out_and_cancels_the_handler() {
    let (server, state) = start_default().await;
    let pool = pool(&server);
    pool.call(|c, ctx| async move { c.sleep(ctx, 0).await })
        .await
        .unwrap();
    let started = Instant::now();
    let err = pool
        .call_with(
            CallOptions::method("sleep").timeout(Duration::from_millis(50)),
            |c, ctx| async move { c.sleep(ctx, 1000).await },
        )
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err, Error::Timeout);
    assert_eq!(err.code(), -2001);
    assert!(
        took < Duration::from_millis(500),
        "timed out after {took:?}"
    );
    eventually(
        "the handler was cancelled on the server",
        Duration::from_millis(500),
        async || state.sleeps_cancelled.load(Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(
        state.sleeps_finished.load(Ordering::SeqCst),
        1,
        "only the 0 ms call"
    );
    eventually(
        "nothing left running on the server",
        Duration::from_millis(500),
        async || server.in_flight() == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_cancels_it_on_the_server() {
    let (server, state) = start_default().await;
    let pool = pool(&server);
    let call = pool.call(|c, ctx| async move { c.sleep(ctx, 5_000).await });
    let dropped = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert!(dropped.is_err(), "the call was still running");
    assert_eq!(state.sleeps_started.load(Ordering::SeqCst), 1);
    eventually(
        "the handler was cancelled",
        Duration::from_secs(2),
        async || state.sleeps_cancelled.load(Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(server.in_flight(), 0);
}

/// Deadlines run on tokio's clock: with time paused, a half-hour deadline on a call the server
/// would answer in an hour passes at once, and the call times out.
#[tokio::test]
async fn deadlines_follow_paused_time() {
    let (server, _state) = start_default().await;
    let pool = pool(&server);
    pool.call(|c, ctx| async move { c.sleep(ctx, 0).await })
        .await
        .unwrap();
    tokio::time::pause();
    let started = Instant::now();
    let err = pool
        .call_with(
            CallOptions::method("sleep").timeout(Duration::from_secs(1800)),
            |c, ctx| async move { c.sleep(ctx, 3_600_000).await },
        )
        .await
        .unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_too_long_to_represent_means_no_deadline_not_a_panic() {
    let (server, _) = start_default().await;
    let pool = pool(&server);
    let ok = pool
        .call_with(
            CallOptions::method("sleep").timeout(Duration::MAX),
            |c, ctx| async move { c.sleep(ctx, 0).await },
        )
        .await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_asking_for_a_decade_gets_an_answer_not_a_dead_connection() {
    let (server, _) = start_default().await;
    let (mut s, _) = crate::raw::connect(server.local_addr().unwrap(), "lab").await;
    let mut ctx = tarpc::context::current();
    ctx.deadline = Instant::now() + Duration::from_secs(10 * 365 * 24 * 3600);
    let x = bytes::Bytes::from_static(b"far");
    let frame = crate::raw::request_frame_with_context(1, LabRequest::Echo { x }, ctx);
    tokio::io::AsyncWriteExt::write_all(&mut s, &frame)
        .await
        .unwrap();
    let answer: tarpc::Response<LabResponse> = crate::raw::read_response(&mut s).await;
    assert!(answer.message.is_ok(), "{:?}", answer.message.err());
}
