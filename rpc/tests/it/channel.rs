//! The client channel: callers write their own requests, one driver per connection reads the
//! responses, writes what the socket could not take at once, and expires deadlines.

use std::time::{Duration, Instant};

use bytes::Bytes;
use yuebing_rpc::{Attachment, CallOptions, Error, PoolConfig};

use crate::common::*;

/// A call with a short deadline expires on time even while the driver's timer is set for a
/// later call's deadline; the later call is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_deadline_is_honoured_while_a_later_one_waits() {
    let (server, _state) = start_default().await;
    let pool = pool(&server);
    let long = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.call_with(
                CallOptions::method("sleep").timeout(Duration::from_secs(5)),
                |c, ctx| async move { c.sleep(ctx, 600).await },
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let err = pool
        .call_with(
            CallOptions::method("sleep").timeout(Duration::from_millis(100)),
            |c, ctx| async move { c.sleep(ctx, 3000).await },
        )
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err, Error::Timeout);
    assert!(
        took < Duration::from_millis(500),
        "timed out after {took:?}"
    );
    assert_eq!(long.await.unwrap().unwrap(), 600, "the long call completes");
}

/// Many callers on one connection with payloads larger than the socket takes at once: every
/// reply is byte-exact (frames from different callers never interleave).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_requests_on_one_connection_arrive_whole() {
    let (server, _state) = start_default().await;
    let mut cfg = PoolConfig::new("lab");
    cfg.max_connections = 1;
    let pool: yuebing_rpc::Pool<LabRpc> =
        yuebing_rpc::Pool::new(server.local_endpoint().clone(), cfg);
    let calls = (0..12u8).map(|i| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let len = (3 << 20) + usize::from(i) * 4099;
            let payload: Bytes = (0..len).map(|j| (j as u8) ^ i.wrapping_mul(37)).collect();
            let inline = i % 2 == 0;
            let back = if inline {
                let sent = payload.clone();
                pool.call(|c, ctx| {
                    let sent = sent.clone();
                    async move { c.echo(ctx, sent).await }
                })
                .await
                .unwrap()
            } else {
                let sent = payload.clone();
                pool.call(|c, ctx| {
                    let sent = Attachment::new(sent.clone());
                    async move { c.echo_att(ctx, sent).await }
                })
                .await
                .unwrap()
                .into_bytes()
            };
            assert!(back == payload, "call {i}: reply differs from the request");
        })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
    assert_eq!(pool.status().live_connections, 1);
}
