//! Engines on a metadata store that stores and watches descriptors (`MemoryMetadata`, the
//! in-memory stand-in for etcd): the store passes the conformance suite; an engine publishes
//! its descriptor at start and after each change and withdraws it; peers look each other up
//! through the store and follow what it reports (a peer gone, a peer restarted) before any
//! request fails on it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{read_back, TestBytes, RW};
use futures::future::BoxFuture;
use futures::FutureExt;
use yuebing_engine::metadata::conformance::{
    dead_name, sample_descriptor, Backend, Capabilities, LiveSegment,
};
use yuebing_engine::metadata::memory::MemoryMetadata;
use yuebing_engine::{EngineConfig, MetadataStore, SegmentDescriptor, TransferEngine};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;

const TTL: Duration = Duration::from_secs(3);
/// Ceiling of every wait for something the engine does by itself.
const CEILING: Duration = Duration::from_secs(10);

/// The in-memory backend: every store is a clone of one `MemoryMetadata`.
struct Memory(MemoryMetadata);

/// A descriptor put through a store.
struct Stored {
    store: Arc<dyn MetadataStore>,
    descriptor: SegmentDescriptor,
}

impl LiveSegment for Stored {
    fn descriptor(&self) -> SegmentDescriptor {
        self.descriptor.clone()
    }

    fn restart(&mut self) -> BoxFuture<'_, ()> {
        async move {
            self.descriptor.instance_id = SegmentDescriptor::new_instance_id();
            self.store.put(&self.descriptor, TTL).await.unwrap();
        }
        .boxed()
    }

    fn withdraw(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move { self.store.remove(&self.descriptor.name).await.unwrap() }.boxed()
    }
}

impl Backend for Memory {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            stores: true,
            expires: false,
            watches: true,
        }
    }

    fn store(&self) -> BoxFuture<'_, Arc<dyn MetadataStore>> {
        async { Arc::new(self.0.clone()) as Arc<dyn MetadataStore> }.boxed()
    }

    fn publish<'a>(
        &'a self,
        store: &'a Arc<dyn MetadataStore>,
    ) -> BoxFuture<'a, Box<dyn LiveSegment>> {
        async move {
            let descriptor = sample_descriptor(&dead_name());
            store.put(&descriptor, TTL).await.unwrap();
            Box::new(Stored {
                store: store.clone(),
                descriptor,
            }) as Box<dyn LiveSegment>
        }
        .boxed()
    }

    fn short_ttl(&self) -> Duration {
        TTL
    }
}

yuebing_engine::metadata_conformance!(Memory(MemoryMetadata::new()));

/// An engine on `store`, its control service on `bind`; retried while a previous engine's
/// port is still being released.
async fn engine_on(store: &MemoryMetadata, bind: &str) -> TransferEngine {
    let config = EngineConfig {
        bind: bind.to_string(),
        metadata: Some(Arc::new(store.clone())),
        metadata_ttl: TTL,
        ..EngineConfig::default()
    };
    // The port may still be held for a moment.
    let what = format!("an engine on {bind}");
    eventually(&what, CEILING, move || {
        TransferEngine::start(config.clone())
    })
    .await
}

/// Whether the store holds `engine`'s current descriptor.
async fn published(store: &MemoryMetadata, engine: &TransferEngine) -> bool {
    store.get(engine.name()).await.ok() == Some(engine.descriptor())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_publishes_its_descriptor_and_each_change_then_withdraws_it() {
    let store = MemoryMetadata::new();
    let e = engine_on(&store, "127.0.0.1:0").await;
    assert_eq!(
        store.get(e.name()).await.unwrap(),
        e.descriptor(),
        "at start"
    );
    assert_eq!(store.puts()[0], (e.name().to_string(), TTL));

    let buf = e.allocate_exported(1 << 20, false, RW).unwrap();
    eventually("the exported buffer published", CEILING, || {
        published(&store, &e)
    })
    .await;
    assert_eq!(store.get(e.name()).await.unwrap().buffers.len(), 1);
    e.unregister(buf.addr()).unwrap();
    eventually("its unregistration published", CEILING, || {
        published(&store, &e)
    })
    .await;
    assert!(store.get(e.name()).await.unwrap().buffers.is_empty());
    let _local = e.allocate(1 << 20, false).unwrap();
    e.publish().await.unwrap();
    assert_eq!(store.get(e.name()).await.unwrap(), e.descriptor());

    e.withdraw().await.unwrap();
    assert_eq!(store.get(e.name()).await.unwrap_err().code(), -3203);
    let _late = e.allocate_exported(4096, false, RW).unwrap();
    e.publish().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        store.get(e.name()).await.unwrap_err().code(),
        -3203,
        "nothing is put after the withdrawal"
    );

    let dropped = engine_on(&store, "127.0.0.1:0").await;
    let name = dropped.name().to_string();
    drop(dropped);
    eventually("a dropped engine's descriptor removed", CEILING, || async {
        store.get(&name).await.is_err()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_meet_through_the_store_and_follow_what_it_reports() {
    let store = MemoryMetadata::new();
    let a = engine_on(&store, "127.0.0.1:0").await;
    let b = engine_on(&store, "127.0.0.1:0").await;
    let dst = a.allocate_exported(1 << 20, false, RW).unwrap();
    a.publish().await.unwrap();
    let src = b.allocate(1 << 20, false).unwrap();
    let data = pattern(1 << 20, 7);
    src.put(0, &data).unwrap();
    let peer = b.open_segment(a.name()).await.unwrap();
    b.write(src.addr(), peer, dst.addr(), 1 << 20)
        .await
        .unwrap();
    assert!(read_back(&dst, 0, 1 << 20) == data);

    // The store says `a` is gone (though it runs): b's requests fail at submit, typed.
    store.remove(a.name()).await.unwrap();
    eventually("b sees a gone", CEILING, || async {
        let r = b.write(src.addr(), peer, dst.addr(), 4096).await;
        r.is_err_and(|e| e.code() == -3203)
    })
    .await;
    // Back in the store: b reaches it again.
    a.publish().await.unwrap();
    eventually("b sees a back", CEILING, || async {
        b.write(src.addr(), peer, dst.addr(), 4096).await.is_ok()
    })
    .await;

    // `a` restarts on the same port: b's cached descriptor follows the store's, and its first
    // request reaches the new instance (with P2P metadata it would fail StaleSegment first).
    let name = a.name().to_string();
    drop((a, dst));
    eventually("a's descriptor removed with it", CEILING, || async {
        store.get(&name).await.is_err()
    })
    .await;
    let a = engine_on(&store, &name).await;
    let dst = a.allocate_exported(1 << 20, false, RW).unwrap();
    a.publish().await.unwrap();
    eventually("b follows the restart", CEILING, || async {
        b.segment_descriptor(peer).unwrap().as_ref() == &a.descriptor()
    })
    .await;
    b.write(src.addr(), peer, dst.addr(), 1 << 20)
        .await
        .unwrap();
    assert!(read_back(&dst, 0, 1 << 20) == data);
    b.close_segment(peer).unwrap();
}
