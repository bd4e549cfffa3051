//! Transfer Engines on `EtcdMetadata` (issue 16 item 2) against a real etcd: each engine
//! publishes its descriptor in etcd under its lease, peers look each other up there and move
//! bytes, and an engine that dies without withdrawing its descriptor (as a killed process
//! would) loses it one lease TTL later, after which a peer's transfer to it fails typed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Settings;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::FutureExt;
use yuebing_engine::metadata::conformance::until_not_found;
use yuebing_engine::{
    EngineBuffer, EngineConfig, MetadataStore, RemoteAccess, SegmentDescriptor, TransferEngine,
};
use yuebing_etcd::{EtcdConfig, EtcdMetadata};
use yuebing_testkit::etcd::EtcdServer;
use yuebing_testkit::eventually;

/// etcd 3.4's shortest lease with its default election timeout.
const TTL: Duration = Duration::from_secs(2);
/// Ceiling of every wait for an expiry or a watch: many times the TTL.
const CEILING: Duration = Duration::from_secs(30);
const LEN: usize = 1 << 20;

/// An engine's store that never removes: the engine's withdrawal on drop does not reach etcd,
/// as when its process is killed; its lease's keep-alives stop when the store is dropped.
struct Killed(EtcdMetadata);

impl MetadataStore for Killed {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<SegmentDescriptor, yuebing_engine::Error>> {
        self.0.get(name)
    }

    fn put<'a>(
        &'a self,
        descriptor: &'a SegmentDescriptor,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), yuebing_engine::Error>> {
        self.0.put(descriptor, ttl)
    }

    fn remove<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), yuebing_engine::Error>> {
        async { Ok(()) }.boxed()
    }

    fn watch<'a>(
        &'a self,
        name: &'a str,
    ) -> Option<BoxStream<'a, Result<Option<SegmentDescriptor>, yuebing_engine::Error>>> {
        self.0.watch(name)
    }
}

async fn store(config: &EtcdConfig) -> EtcdMetadata {
    EtcdMetadata::connect(config).await.unwrap()
}

async fn engine(store: Arc<dyn MetadataStore>) -> TransferEngine {
    TransferEngine::start(EngineConfig {
        metadata: Some(store),
        metadata_ttl: TTL,
        ..EngineConfig::default()
    })
    .await
    .unwrap()
}

fn fill(buf: &EngineBuffer, data: &[u8]) {
    // SAFETY: the buffer is local-only and no transfer on it is in flight.
    unsafe { buf.write_at(0, data) }.unwrap();
}

fn contents(buf: &EngineBuffer, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: no transfer on the buffer is in flight; a peer that could write it (it is
    // exported) is stopped or idle while the test reads.
    unsafe { buf.read_at(0, &mut out) }.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_meet_through_etcd_and_a_dead_ones_descriptor_expires() {
    let server = EtcdServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start etcd for the tests: {e}"));
    let config = server.config().with_cluster("engines");
    let observer = store(&config).await;
    let a = engine(Arc::new(store(&config).await)).await;
    let b = engine(Arc::new(Killed(store(&config).await))).await;
    assert_eq!(observer.get(a.name()).await.unwrap(), a.descriptor());
    assert_eq!(observer.get(b.name()).await.unwrap(), b.descriptor());

    let dst = b
        .allocate_exported(LEN, false, RemoteAccess::READ_WRITE)
        .unwrap();
    b.publish().await.unwrap();
    assert_eq!(observer.get(b.name()).await.unwrap().buffers.len(), 1);
    let src = a.allocate(LEN, false).unwrap();
    let back = a.allocate(LEN, false).unwrap();
    let data: Vec<u8> = (0..LEN).map(|i| (i * 13 % 251) as u8).collect();
    fill(&src, &data);
    let peer = a.open_segment(b.name()).await.unwrap();
    a.write(src.addr(), peer, dst.addr(), LEN as u64)
        .await
        .unwrap();
    assert!(contents(&dst, LEN) == data, "written into b");
    a.read(back.addr(), peer, dst.addr(), LEN as u64)
        .await
        .unwrap();
    assert!(contents(&back, LEN) == data, "read back from b");

    // b dies without withdrawing: its lease stops being kept alive and etcd drops it.
    let name = b.name().to_string();
    let target = dst.addr();
    let died = Instant::now();
    drop((b, dst));
    until_not_found(&observer, &name, CEILING).await;
    assert!(died.elapsed() >= TTL / 2, "gone by its lease, not a remove");
    // a's watch saw it go: its transfers to b fail at once, typed.
    eventually("a's writes to b fail typed", CEILING, async || {
        match a.write(src.addr(), peer, target, 4096).await {
            Err(e) if e.code() == -3203 => Ok(()),
            other => Err(format!("still {other:?}")),
        }
    })
    .await;
    assert_eq!(a.open_segment(&name).await.unwrap_err().code(), -3203);

    // A withdrawn engine's descriptor goes at once, without waiting for its lease.
    let name = a.name().to_string();
    a.withdraw().await.unwrap();
    assert_eq!(observer.get(&name).await.unwrap_err().code(), -3203);
}
