//! A load balancer over three endpoints, one of them dead.

use std::time::Duration;

use bytes::Bytes;
use yuebing_rpc::{Balancer, Endpoint, PoolConfig, Strategy};

use crate::common::*;
use yuebing_testkit::eventually;

/// An address nothing listens on (yet: a test may start a server there later).
fn dead_endpoint() -> Endpoint {
    let port = yuebing_testkit::ports::free_port();
    format!("127.0.0.1:{port}").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_succeeds_with_one_endpoint_dead() {
    let (a, _) = start_default().await;
    let (b, _) = start_default().await;
    let dead = dead_endpoint();
    for strategy in [
        Strategy::RoundRobin,
        Strategy::Random,
        Strategy::LeastInFlight,
    ] {
        let endpoints = vec![
            a.local_endpoint().clone(),
            dead.clone(),
            b.local_endpoint().clone(),
        ];
        let lb: Balancer<LabRpc> =
            Balancer::new(endpoints, PoolConfig::new("lab"), strategy).unwrap();
        for i in 0..30u8 {
            let x = Bytes::from(vec![i]);
            let back = lb
                .call(|c, ctx| {
                    let x = x.clone();
                    async move { c.echo(ctx, x).await }
                })
                .await
                .unwrap_or_else(|e| panic!("{strategy:?} call {i}: {e}"));
            assert_eq!(back, x);
        }
        let calls: Vec<u64> = lb
            .pools()
            .map(|p| p.status().calls_per_connection.iter().map(|c| c.1).sum())
            .collect();
        assert_eq!(calls[1], 0, "no call ran on the dead endpoint");
        assert_eq!(calls[0] + calls[2], 30, "{strategy:?}: {calls:?}");
        if strategy == Strategy::RoundRobin {
            assert!(calls[0] >= 10 && calls[2] >= 10, "spread: {calls:?}");
        }
    }
}

#[tokio::test]
async fn an_endpoint_that_comes_back_is_probed_again() {
    let (a, _) = start_default().await;
    let spare = dead_endpoint();
    let endpoints = vec![a.local_endpoint().clone(), spare.clone()];
    let lb: Balancer<LabRpc> =
        Balancer::new(endpoints, PoolConfig::new("lab"), Strategy::RoundRobin).unwrap();
    for _ in 0..4 {
        lb.call(|c, ctx| async move { c.echo(ctx, Bytes::new()).await })
            .await
            .unwrap();
    }
    let b = start(&spare, Default::default(), Default::default()).await;
    let revived = eventually(
        "the endpoint was re-probed after its back-off",
        Duration::from_secs(10),
        async || lb.pools().nth(1).unwrap().status().live_connections > 0,
    );
    let caller = async {
        loop {
            lb.call(|c, ctx| async move { c.echo(ctx, Bytes::new()).await })
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = revived => {}
        _ = caller => unreachable!(),
    };
    drop(b);
}

#[test]
fn an_empty_list_is_an_error() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _g = rt.enter();
    let err =
        Balancer::<LabRpc>::new(vec![], PoolConfig::new("lab"), Strategy::Random).unwrap_err();
    assert_eq!(err.code(), -2014);
}

#[test]
fn a_balancer_is_driven_from_a_plain_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (server, _) = rt.block_on(start_default());
    let registry = yuebing_rpc::PoolRegistry::<LabRpc>::new_on(
        PoolConfig::new("lab"),
        Duration::from_secs(60),
        rt.handle().clone(),
    );
    let endpoints = [server.local_endpoint().clone()];
    let lb = Balancer::with_registry(
        &registry,
        &endpoints,
        PoolConfig::new("lab"),
        Strategy::RoundRobin,
    )
    .unwrap();
    let back = std::thread::spawn(move || {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "no ambient runtime"
        );
        futures::executor::block_on(
            lb.call(|c, ctx| async move { c.echo(ctx, Bytes::from_static(b"hi")).await }),
        )
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(back, "hi");
    drop(server);
}
