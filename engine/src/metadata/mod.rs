//! Where segment descriptors are published and looked up.
//!
//! [`MetadataStore`] is the seam: get / put / remove a descriptor by segment name, plus a
//! liveness hook so a dead engine's descriptor disappears (a TTL lease in etcd, inherent in the
//! embedded P2P mode). The embedded default, [`P2pMetadata`], needs no external service: a
//! segment's name is its engine's rpc `host:port`, and `get` asks that engine for its
//! descriptor over yuebing-rpc (Mooncake's P2P handshake). "Restarted under the same name" thus
//! means restarted on the same port. etcd's implementation lives in `yuebing-etcd`; with the
//! feature `testing`, `conformance` holds the suite that every implementation passes, and
//! `memory` a store in memory that stores and watches descriptors, for tests of engines
//! published through a store.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::FutureExt;
use yuebing_rpc::{CallOptions, Endpoint, PoolConfig, PoolRegistry};

use crate::error::Error;
use crate::segment::SegmentDescriptor;
use crate::service::{EngineControlRpc, SERVICE};

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod memory;

/// A store of segment descriptors.
///
/// What every implementation promises, checked by the conformance suite
/// (`metadata::conformance`, feature `testing`) with the capabilities it declares:
/// - `get` of a name that has no live descriptor is [`Error::SegmentNotFound`] (−3203), never a
///   transport error of the backend's own;
/// - a backend that stores descriptors returns from `get` what the last `put` of that name
///   wrote, and nothing after `remove`; one that serves them live (P2P) accepts `put` and
///   `remove` and ignores them;
/// - a backend with leases keeps a put descriptor alive while the store that put it lives, and
///   lets it expire about `ttl` after that store is dropped or its process dies;
/// - errors are typed and carry stable codes; nothing the backend returns makes it panic.
pub trait MetadataStore: Send + Sync {
    /// The current descriptor of the segment `name`.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SegmentDescriptor, Error>>;
    /// Publishes `descriptor`, kept alive for `ttl` unless refreshed (backends without leases
    /// may ignore the TTL).
    fn put<'a>(
        &'a self,
        descriptor: &'a SegmentDescriptor,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), Error>>;
    /// Withdraws the segment `name`.
    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), Error>>;

    /// The descriptors the segment `name` takes from now on, where the backend can watch (etcd
    /// can). The first item is its current state, each later one a change: `Some(descriptor)`
    /// for a put, `None` when it disappeared (removed, or its lease expired). Reading the
    /// current state first and then every change after it, a watcher misses nothing between
    /// its `get` and its watch. An `Err` item (the service unreachable, history compacted)
    /// ends the stream; watching again starts from the current state.
    ///
    /// `None` where the backend cannot watch: callers then `get` again when a request fails
    /// with `StaleSegment` or `PeerFailed`, as the engine does.
    fn watch<'a>(
        &'a self,
        name: &'a str,
    ) -> Option<BoxStream<'a, Result<Option<SegmentDescriptor>, Error>>> {
        let _ = name;
        None
    }
}

/// The embedded metadata: each engine serves its own descriptor; nothing is stored.
#[derive(Debug, Clone)]
pub struct P2pMetadata {
    pools: PoolRegistry<EngineControlRpc>,
}

impl P2pMetadata {
    /// Looks peers up through pools made on the current runtime, presenting `token`.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(token: Option<yuebing_rpc::Token>) -> Self {
        Self::new_on(token, tokio::runtime::Handle::current())
    }

    /// Looks peers up through pools whose connections and tasks live on `handle`'s runtime.
    pub fn new_on(token: Option<yuebing_rpc::Token>, handle: tokio::runtime::Handle) -> Self {
        Self::with_registry(Self::registry(token, handle))
    }

    /// Looks peers up through `pools` (shared with the engine's other control calls).
    pub fn with_registry(pools: PoolRegistry<EngineControlRpc>) -> Self {
        P2pMetadata { pools }
    }

    /// Pools of control-service clients on `handle`, presenting `token`; `descriptor` is
    /// declared idempotent, `notify` is not.
    pub fn registry(
        token: Option<yuebing_rpc::Token>,
        handle: tokio::runtime::Handle,
    ) -> PoolRegistry<EngineControlRpc> {
        let config = PoolConfig {
            token,
            max_connections: 1,
            ..PoolConfig::new(SERVICE).idempotent(["descriptor"])
        };
        PoolRegistry::new_on(config, Duration::from_secs(60), handle)
    }
}

impl MetadataStore for P2pMetadata {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SegmentDescriptor, Error>> {
        async move {
            let endpoint: Endpoint = name.parse().map_err(|_| Error::SegmentNotFound {
                name: name.to_string(),
            })?;
            let pool = self.pools.get(&endpoint);
            let opts = CallOptions::method("descriptor").timeout(Duration::from_secs(5));
            let bytes = pool
                .call_with(opts, |c, ctx| async move { c.descriptor(ctx).await })
                .await
                .map_err(|e| match e {
                    yuebing_rpc::Error::Connect { .. } => Error::SegmentNotFound {
                        name: name.to_string(),
                    },
                    other => Error::Rpc(other),
                })?;
            SegmentDescriptor::from_json(&bytes)
        }
        .boxed()
    }

    fn put<'a>(
        &'a self,
        _: &'a SegmentDescriptor,
        _: Duration,
    ) -> BoxFuture<'a, Result<(), Error>> {
        // The engine serves its descriptor live; there is nothing to store.
        async { Ok(()) }.boxed()
    }

    fn remove<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        // A stopped engine stops answering: that is its removal.
        async { Ok(()) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn p2p_lookup_of_a_dead_or_bad_name_is_segment_not_found() {
        let md = P2pMetadata::new(None);
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        for name in [dead.as_str(), "not a name"] {
            let err = md.get(name).await.unwrap_err();
            assert_eq!(err.code(), -3203, "{name}: {err}");
        }
        assert!(md.watch("x").is_none(), "P2P cannot watch");
        let d = SegmentDescriptor::new("n", "127.0.0.1:1", 1);
        md.put(&d, Duration::from_secs(1)).await.unwrap();
        md.remove("n").await.unwrap();
    }
}
