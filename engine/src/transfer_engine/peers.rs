//! Watching the descriptors of open peer segments, where the metadata store can watch.
//!
//! The engine caches each open segment's descriptor. With the embedded P2P metadata it learns
//! that a peer restarted only when a request fails (`StaleSegment`, `PeerFailed`) and then
//! fetches the descriptor again. A store that can watch (etcd) tells it sooner: one task per
//! open peer name follows that name's descriptor, and
//! - a new instance (the peer restarted) replaces the cached descriptor of every handle of
//!   that name, the transports dropping what they kept for the old one, before any request
//!   fails on it; a changed descriptor of the same instance (memory registered) replaces it
//!   too;
//! - a descriptor gone (removed, or its lease expired: the peer stopped or died) marks the
//!   name gone: requests to it fail at submit with `SegmentNotFound` (−3203) until it is back.
//!
//! The re-`get` on a failed request stays, as the fallback while a watch is broken (a watch
//! that ends is opened again after [`REWATCH`]). The tasks live on the engine's runtime, hold
//! the engine only weakly, and stop when the last handle of their name is closed or the
//! engine is dropped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::task::AbortOnDropHandle;

use super::{Inner, TransferEngine, OWN};
use crate::error::Error;
use crate::metadata::MetadataStore;
use crate::segment::SegmentDescriptor;

/// The pause before a watch that ended (etcd unreachable, history compacted) is opened again.
const REWATCH: Duration = Duration::from_secs(1);

/// The watches of one engine's peers, and the names their store reported gone.
#[derive(Default)]
pub(super) struct PeerWatches {
    /// Whether the engine's store can watch (decided once, at start).
    enabled: bool,
    /// One task per watched name; each stops when dropped.
    tasks: Mutex<HashMap<String, AbortOnDropHandle<()>>>,
    /// Names whose descriptor the store reported gone.
    gone: std::sync::RwLock<HashSet<String>>,
}

impl PeerWatches {
    /// Watches for an engine on `store` (none for no store, or one that cannot watch).
    pub(super) fn new(store: Option<&Arc<dyn MetadataStore>>) -> Self {
        // A watch stream does nothing until polled: asking for one only tells whether the
        // store can watch.
        let enabled = store.is_some_and(|s| s.watch("").is_some());
        PeerWatches {
            enabled,
            ..PeerWatches::default()
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortOnDropHandle<()>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `name` gone or back.
    fn set_gone(&self, name: &str, gone: bool) {
        if !self.enabled {
            return;
        }
        let mut set = self.gone.write().unwrap_or_else(|p| p.into_inner());
        match gone {
            true => set.insert(name.to_string()),
            false => set.remove(name),
        };
    }

    /// `SegmentNotFound` if the store reported `segment` gone.
    pub(super) fn check(&self, segment: &SegmentDescriptor) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        let set = self.gone.read().unwrap_or_else(|p| p.into_inner());
        match set.contains(&segment.name) {
            true => Err(Error::SegmentNotFound {
                name: segment.name.clone(),
            }),
            false => Ok(()),
        }
    }
}

impl TransferEngine {
    /// Starts watching the peer `name` (once per name) if the store can watch.
    pub(super) fn watch_peer(&self, name: &str) {
        let watches = &self.inner.watches;
        let Some(store) = self.inner.metadata.clone().filter(|_| watches.enabled) else {
            return;
        };
        let mut tasks = watches.tasks();
        if tasks.contains_key(name) {
            return;
        }
        let task = follow(store, name.to_string(), Arc::downgrade(&self.inner));
        tasks.insert(
            name.to_string(),
            AbortOnDropHandle::new(self.inner.handle.spawn(task)),
        );
    }

    /// Stops watching `name` when no open handle has that name any more.
    pub(super) fn unwatch_unused(&self, name: &str) {
        let in_use = self
            .lock_segments()
            .iter()
            .any(|(h, d)| *h != OWN && d.name == name);
        if !in_use {
            self.inner.watches.tasks().remove(name);
            self.inner.watches.set_gone(name, false);
        }
    }

    /// The store found `name` (a look-up succeeded): it is not gone.
    pub(super) fn peer_found(&self, name: &str) {
        self.inner.watches.set_gone(name, false);
    }

    /// Applies what the watch of `name` reported (see the module documentation).
    async fn apply_peer_state(&self, name: &str, state: Option<SegmentDescriptor>) {
        let cached: Vec<Arc<SegmentDescriptor>> = self
            .lock_segments()
            .iter()
            .filter(|(h, d)| **h != OWN && d.name == name)
            .map(|(_, d)| d.clone())
            .collect();
        let mut instances: Vec<&Arc<SegmentDescriptor>> = Vec::new();
        for d in &cached {
            if !instances.iter().any(|i| i.instance_id == d.instance_id) {
                instances.push(d);
            }
        }
        let Some(fresh) = state else {
            tracing::info!(segment = %name, "segment gone from the metadata store");
            self.inner.watches.set_gone(name, true);
            self.forget_all(&instances);
            return;
        };
        self.peer_found(name);
        let fresh = Arc::new(fresh);
        let restarted: Vec<_> = instances
            .into_iter()
            .filter(|d| d.instance_id != fresh.instance_id)
            .collect();
        if !restarted.is_empty() {
            tracing::info!(segment = %name, new = fresh.instance_id, "segment restarted; descriptor replaced");
            self.forget_all(&restarted);
            self.prepare_transports(&fresh).await;
        }
        for (h, d) in self.lock_segments().iter_mut() {
            if *h != OWN && d.name == name && **d != *fresh {
                *d = fresh.clone();
            }
        }
    }

    /// Lets every transport drop what it keeps for each of `segments`.
    fn forget_all(&self, segments: &[&Arc<SegmentDescriptor>]) {
        for t in self.transports() {
            for d in segments {
                t.forget(d);
            }
        }
    }
}

/// Follows the descriptor of `name` in `store` for as long as the engine lives.
async fn follow(store: Arc<dyn MetadataStore>, name: String, engine: Weak<Inner>) {
    loop {
        let Some(mut changes) = store.watch(&name) else {
            return;
        };
        while let Some(item) = changes.next().await {
            match item {
                Ok(state) => {
                    let Some(inner) = engine.upgrade() else {
                        return;
                    };
                    TransferEngine { inner }
                        .apply_peer_state(&name, state)
                        .await;
                }
                Err(e) => {
                    tracing::debug!(segment = %name, error = %e, "watch of a peer failed")
                }
            }
        }
        tokio::time::sleep(REWATCH).await;
    }
}
