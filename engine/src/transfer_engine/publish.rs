//! Publishing the engine's own descriptor in a metadata store that stores descriptors.
//!
//! With the embedded P2P metadata the engine serves its descriptor live and nothing is
//! published. Given a store ([`EngineConfig::metadata`](super::EngineConfig::metadata)), the
//! engine puts its descriptor there when it starts (awaited: a start whose put fails fails),
//! again whenever it changes (memory registered or unregistered, a transport added), and
//! removes it when it is dropped or [`TransferEngine::withdraw`] is called.
//!
//! Changes are put by one task on the engine's runtime, woken by a [`Notify`] (several changes
//! before it wakes make one put). Every put — the task's and [`TransferEngine::publish`]'s —
//! holds one lock and reads the descriptor under it, so the last put is always of the newest
//! descriptor, and none comes after the withdrawal. A failed put is tried again after
//! [`RETRY`], with the newest descriptor.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use super::{Inner, TransferEngine};
use crate::error::Error;
use crate::metadata::MetadataStore;
use crate::segment::SegmentDescriptor;

/// The pause before a failed put is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// What the engine and its publishing task share.
struct Shared {
    store: Arc<dyn MetadataStore>,
    /// The engine's segment name.
    name: String,
    ttl: Duration,
    /// Held across each put and the remove; `true` once withdrawn (nothing is put after).
    withdrawn: tokio::sync::Mutex<bool>,
    /// Woken at each change of the descriptor.
    changed: Notify,
}

impl Shared {
    /// Puts the descriptor `describe` gives under the lock (nothing once withdrawn, or when
    /// `describe` has none: the engine is gone).
    async fn put(&self, describe: impl FnOnce() -> Option<SegmentDescriptor>) -> Result<(), Error> {
        let withdrawn = self.withdrawn.lock().await;
        if *withdrawn {
            return Ok(());
        }
        match describe() {
            Some(d) => self.store.put(&d, self.ttl).await,
            None => Ok(()),
        }
    }

    /// Removes the descriptor, once; no put follows.
    async fn withdraw(&self) -> Result<(), Error> {
        let mut withdrawn = self.withdrawn.lock().await;
        if std::mem::replace(&mut *withdrawn, true) {
            return Ok(());
        }
        self.store.remove(&self.name).await
    }
}

/// The publication of one engine's descriptor; withdrawn (by a task on the engine's runtime)
/// when dropped with the engine.
pub(super) struct Publisher {
    shared: Arc<Shared>,
    handle: Handle,
    /// Puts the changes; stops when this is dropped.
    _task: AbortOnDropHandle<()>,
}

impl Publisher {
    /// Puts `engine`'s descriptor in `store` with `ttl` and starts the task that puts it again
    /// at each change.
    pub(super) async fn start(
        engine: &Arc<Inner>,
        store: Arc<dyn MetadataStore>,
        ttl: Duration,
    ) -> Result<Publisher, Error> {
        let shared = Arc::new(Shared {
            store,
            name: engine.config.name.clone(),
            ttl,
            withdrawn: tokio::sync::Mutex::new(false),
            changed: Notify::new(),
        });
        shared.put(|| Some(engine.descriptor())).await?;
        let task = engine
            .handle
            .spawn(republish(shared.clone(), Arc::downgrade(engine)));
        Ok(Publisher {
            shared,
            handle: engine.handle.clone(),
            _task: AbortOnDropHandle::new(task),
        })
    }

    /// The descriptor changed: the task puts it again soon.
    pub(super) fn changed(&self) {
        self.shared.changed.notify_one();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        // Best effort: a runtime that is shutting down runs nothing more, and a store with
        // leases lets the descriptor expire instead.
        self.handle.spawn(async move {
            if let Err(e) = shared.withdraw().await {
                tracing::debug!(segment = %shared.name, error = %e, "descriptor not removed; it expires with its lease");
            }
        });
    }
}

/// The task: at each change, puts the newest descriptor, trying again until a put succeeds.
async fn republish(shared: Arc<Shared>, engine: Weak<Inner>) {
    loop {
        shared.changed.notified().await;
        // The engine is only borrowed to describe it, never held across a put.
        while let Err(e) = shared
            .put(|| engine.upgrade().map(|inner| inner.descriptor()))
            .await
        {
            tracing::warn!(segment = %shared.name, error = %e, "descriptor not published; retrying");
            tokio::time::sleep(RETRY).await;
        }
    }
}

impl TransferEngine {
    /// Starts publishing this engine's descriptor in `store` (see the module documentation).
    pub(super) async fn start_publishing(
        &self,
        store: Arc<dyn MetadataStore>,
        ttl: Duration,
    ) -> Result<(), Error> {
        let publisher = Publisher::start(&self.inner, store, ttl).await?;
        if self.inner.publisher.set(publisher).is_err() {
            return Err(Error::invalid(
                "the engine publishes its descriptor already",
            ));
        }
        Ok(())
    }

    /// Puts this engine's current descriptor in its metadata store and waits until it is
    /// stored: after it returns, peers that look this engine up find at least this
    /// descriptor (say, memory just registered for them). Changes are published by
    /// themselves soon after they happen; this is for callers that must know. Nothing to do
    /// with the embedded P2P metadata (the engine serves its descriptor itself) or after
    /// [`TransferEngine::withdraw`].
    ///
    /// # Errors
    /// The store's, typed (etcd's keep their codes, −5000 …).
    pub async fn publish(&self) -> Result<(), Error> {
        match self.inner.publisher.get() {
            Some(p) => p.shared.put(|| Some(self.inner.descriptor())).await,
            None => Ok(()),
        }
    }

    /// Removes this engine's descriptor from its metadata store and stops publishing it: peers
    /// no longer find this engine, and those that watch it see it gone. The engine itself
    /// goes on (transfers already addressed to it are served). Dropping the engine does this
    /// too, on its runtime and best effort; a process about to exit calls this first. Nothing
    /// to do with the embedded P2P metadata.
    ///
    /// # Errors
    /// The store's, typed; with a store with leases, the descriptor then expires by itself.
    pub async fn withdraw(&self) -> Result<(), Error> {
        match self.inner.publisher.get() {
            Some(p) => p.shared.withdraw().await,
            None => Ok(()),
        }
    }
}
