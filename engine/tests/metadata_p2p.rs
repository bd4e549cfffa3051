//! The embedded P2P metadata against the MetadataStore conformance suite: each segment is a
//! real engine serving its own descriptor; `put` and `remove` are accepted no-ops and it
//! cannot watch, which its capabilities declare.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use yuebing_engine::metadata::conformance::{Backend, Capabilities, LiveSegment};
use yuebing_engine::{EngineConfig, MetadataStore, P2pMetadata, SegmentDescriptor, TransferEngine};
use yuebing_testkit::eventually;

/// The P2P backend: stores are `P2pMetadata`s, segments are engines on 127.0.0.1.
struct P2p;

/// An engine whose descriptor the P2P metadata serves.
struct Engine(TransferEngine);

impl LiveSegment for Engine {
    fn descriptor(&self) -> SegmentDescriptor {
        self.0.descriptor()
    }

    fn restart(&mut self) -> BoxFuture<'_, ()> {
        async move {
            let name = self.0.name().to_string();
            let data = self.0.data_endpoint();
            // Stop the old engine before its ports are taken again.
            let placeholder = TransferEngine::new(EngineConfig::default());
            drop(std::mem::replace(&mut self.0, placeholder));
            self.0 = start_on(&name, data).await;
        }
        .boxed()
    }

    fn withdraw(self: Box<Self>) -> BoxFuture<'static, ()> {
        drop(self);
        async {}.boxed()
    }
}

/// Starts an engine on `bind` (and `data_bind`), retrying while the previous engine's ports
/// are still being released.
async fn start_on(bind: &str, data_bind: Option<String>) -> TransferEngine {
    let config = EngineConfig {
        bind: bind.to_string(),
        data_bind,
        ..EngineConfig::default()
    };
    // The ports may still be held for a moment.
    let what = format!("an engine on {bind}");
    eventually(&what, Duration::from_secs(10), move || {
        TransferEngine::start(config.clone())
    })
    .await
}

impl Backend for P2p {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            stores: false,
            expires: false,
            watches: false,
        }
    }

    fn store(&self) -> BoxFuture<'_, Arc<dyn MetadataStore>> {
        async { Arc::new(P2pMetadata::new(None)) as Arc<dyn MetadataStore> }.boxed()
    }

    fn publish<'a>(&'a self, _: &'a Arc<dyn MetadataStore>) -> BoxFuture<'a, Box<dyn LiveSegment>> {
        async { Box::new(Engine(start_on("127.0.0.1:0", None).await)) as Box<dyn LiveSegment> }
            .boxed()
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_secs(1)
    }
}

yuebing_engine::metadata_conformance!(P2p);

/// A put of a live engine's name does not hide or change what that engine serves, and a
/// remove does not withdraw it: the engine is the only source of its descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_remove_do_not_touch_a_live_engine() {
    let engine = start_on("127.0.0.1:0", None).await;
    let md = P2pMetadata::new(None);
    let mut other = engine.descriptor();
    other.instance_id ^= 1;
    md.put(&other, Duration::from_secs(1)).await.unwrap();
    assert_eq!(md.get(engine.name()).await.unwrap(), engine.descriptor());
    md.remove(engine.name()).await.unwrap();
    assert_eq!(md.get(engine.name()).await.unwrap(), engine.descriptor());
}
