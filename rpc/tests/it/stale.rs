//! The first call after a server restart meets a pooled connection the pool has not yet seen
//! die.
//!
//! To make that race deterministic, the pool runs on a current-thread runtime of its own that
//! only runs while a client call is being made (`block_on`): between calls its connection
//! drivers do not run, so the server's close goes unnoticed until the next call is already on
//! the dead connection. The server runs on a second runtime that keeps running throughout.
//!
//! A call written to the dead connection is sent again, once, at once, on a fresh connection,
//! only if it is idempotent. One that finds the connection already closed before it is written
//! is sent again whatever its idempotency (`RpcError::Send`, never executed); this harness
//! cannot produce that case on demand, since a connection's driver records the close and ends
//! the connection (which the pool's watcher sees) in one step.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use tokio::runtime::{Builder, Runtime};
use yuebing_rpc::{
    Balancer, CallOptions, Endpoint, Error, Pool, PoolConfig, PoolRegistry, RunningServer,
    ServerConfig, Strategy,
};

use crate::common::*;

/// A server runtime, a client runtime with a pool (from a registry) whose one connection to the
/// server is pooled, and the server's shared state.
struct Setup {
    server_rt: Runtime,
    client_rt: Runtime,
    state: Arc<LabState>,
    endpoint: Endpoint,
    registry: PoolRegistry<LabRpc>,
    pool: Pool<LabRpc>,
}

fn echo(setup: &Setup, opts: CallOptions) -> Result<Bytes, Error> {
    let pool = setup.pool.clone();
    setup.client_rt.block_on(async move {
        pool.call_with(opts, |c, ctx| async move {
            c.echo(ctx, Bytes::from_static(b"hi")).await
        })
        .await
    })
}

fn bump(setup: &Setup, opts: CallOptions) -> Result<u64, Error> {
    let pool = setup.pool.clone();
    setup.client_rt.block_on(async move {
        pool.call_with(opts, |c, ctx| async move { c.bump_and_sleep(ctx, 0).await })
            .await
    })
}

/// Starts a server on an ephemeral port and pools one connection to it with one call.
fn pooled(cfg: PoolConfig) -> (Setup, RunningServer) {
    let server_rt = Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = Builder::new_current_thread().enable_all().build().unwrap();
    let state = Arc::new(LabState::default());
    let server = server_rt.block_on(start(&localhost(), ServerConfig::default(), state.clone()));
    let endpoint = server.local_endpoint().clone();
    let registry = PoolRegistry::new_on(cfg, Duration::from_secs(60), client_rt.handle().clone());
    let pool = registry.get(&endpoint);
    let setup = Setup {
        server_rt,
        client_rt,
        state,
        endpoint,
        registry,
        pool,
    };
    assert_eq!(
        &echo(&setup, CallOptions::method("echo")).unwrap()[..],
        b"hi"
    );
    assert_eq!(setup.pool.status().live_connections, 1);
    (setup, server)
}

/// Stops `server` (gracefully or abruptly) and starts a new one on the same port. The client
/// runtime does not run meanwhile, so the pool still holds the old, now dead, connection.
fn restart(setup: &Setup, server: RunningServer, graceful: bool) -> RunningServer {
    setup.server_rt.block_on(async {
        if graceful {
            let report = server.shutdown(Duration::from_secs(5)).await;
            assert_eq!(report.cut, 0);
        } else {
            server.kill().await;
        }
    });
    let again = setup.server_rt.block_on(start(
        &setup.endpoint,
        ServerConfig::default(),
        setup.state.clone(),
    ));
    assert_eq!(again.local_endpoint(), &setup.endpoint);
    let status = setup.pool.status();
    assert_eq!(status.live_connections, 1, "the pool has not noticed yet");
    again
}

/// The pool's own retries are off and its back-off is longer than the call's deadline, so
/// only the resend on a fresh connection can make the call succeed.
fn no_retries() -> PoolConfig {
    PoolConfig {
        max_retries: 0,
        initial_backoff: Duration::from_secs(30),
        ..PoolConfig::new("lab").idempotent(["echo"])
    }
}

fn first_idempotent_call_after_restart(graceful: bool) {
    let cfg = no_retries();
    let (setup, server) = pooled(cfg);
    let old_conn = setup.pool.status().calls_per_connection[0].0;
    let _again = restart(&setup, server, graceful);
    let opts = CallOptions::method("echo").timeout(Duration::from_secs(5));
    let out = echo(&setup, opts).expect("the call is retried on a fresh connection");
    assert_eq!(&out[..], b"hi");
    let status = setup.pool.status();
    assert_eq!(status.live_connections, 1, "{status:?}");
    assert!(
        status.calls_per_connection.iter().all(|c| c.0 != old_conn),
        "the stale connection left the pool: {status:?}"
    );
}

#[test]
fn first_idempotent_call_after_abrupt_restart_succeeds() {
    first_idempotent_call_after_restart(false);
}

#[test]
fn first_idempotent_call_after_graceful_restart_succeeds() {
    first_idempotent_call_after_restart(true);
}

/// The request was written to the dead connection, so for all the client knows the server may
/// have executed it: a call that is not idempotent fails and is not sent again. The stale
/// connection still leaves the pool, so the next call works.
#[test]
fn non_idempotent_call_written_to_a_stale_connection_is_not_resent() {
    let (setup, server) = pooled(PoolConfig::new("lab").idempotent(["echo"]));
    let _again = restart(&setup, server, false);
    let opts = CallOptions::method("bump").timeout(Duration::from_secs(5));
    let err = bump(&setup, opts.clone()).unwrap_err();
    assert!(matches!(err, Error::ConnectionLost { .. }), "{err:?}");
    assert_eq!(
        setup.state.bumps.load(Ordering::SeqCst),
        0,
        "not executed, and not sent again"
    );
    assert_eq!(
        bump(&setup, opts).unwrap(),
        1,
        "the next call uses a new connection"
    );
}

/// Many calls meet the same stale connection at once: each is resent, and they share one fresh
/// connection (the resend's connect is single-flight too).
#[test]
fn concurrent_calls_on_a_stale_connection_share_one_fresh_connection() {
    let (setup, server) = pooled(no_retries());
    let _again = restart(&setup, server, false);
    let calls = (0..20).map(|_| {
        let pool = setup.pool.clone();
        async move {
            pool.call_with(CallOptions::method("echo"), |c, ctx| async move {
                c.echo(ctx, Bytes::from_static(b"hi")).await
            })
            .await
        }
    });
    for out in setup.client_rt.block_on(join_all(calls)) {
        assert_eq!(&out.expect("resent on a fresh connection")[..], b"hi");
    }
    let status = setup.pool.status();
    assert_eq!(status.live_connections, 1, "{status:?}");
    assert_eq!(status.calls_per_connection.len(), 1, "{status:?}");
}

/// A balancer's try goes through the same pool, so it too moves to a fresh connection instead
/// of failing or putting the (healthy) restarted endpoint on back-off.
#[test]
fn balancer_call_after_restart_succeeds() {
    let (setup, server) = pooled(no_retries());
    let balancer = Balancer::with_registry(
        &setup.registry,
        std::slice::from_ref(&setup.endpoint),
        no_retries(),
        Strategy::RoundRobin,
    )
    .unwrap();
    let _again = restart(&setup, server, false);
    let out = setup.client_rt.block_on(
        balancer.call_with(CallOptions::method("echo"), |c, ctx| async move {
            c.echo(ctx, Bytes::from_static(b"hi")).await
        }),
    );
    assert_eq!(&out.expect("resent on a fresh connection")[..], b"hi");
}
