//! [`MemoryMetadata`]: a [`MetadataStore`] in this process's memory (feature `testing`).
//!
//! It stores descriptors and can watch them, like etcd, but needs nothing external: tests use
//! it to run engines whose descriptors are published and watched through a store. Clones share
//! one map: what one clone puts, every other sees. It has no leases: a descriptor stays until
//! it is removed, whatever its TTL (the TTLs asked for are recorded, see
//! [`MemoryMetadata::puts`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;

use super::MetadataStore;
use crate::error::Error;
use crate::segment::SegmentDescriptor;

/// Descriptors in memory, each name's on a watch channel (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct MemoryMetadata {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The state of each name ever put or watched: its descriptor, or `None`.
    names: Mutex<HashMap<String, watch::Sender<Option<SegmentDescriptor>>>>,
    /// Every put so far: the name and the TTL asked for.
    puts: Mutex<Vec<(String, Duration)>>,
}

impl MemoryMetadata {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The puts so far, oldest first: each descriptor's name and the TTL asked for.
    pub fn puts(&self) -> Vec<(String, Duration)> {
        self.shared
            .puts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The channel of `name`, made empty on first use.
    fn channel(&self, name: &str) -> watch::Sender<Option<SegmentDescriptor>> {
        self.shared
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| watch::Sender::new(None))
            .clone()
    }
}

impl MetadataStore for MemoryMetadata {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<SegmentDescriptor, Error>> {
        let found = self.channel(name).borrow().clone();
        let result = found.ok_or_else(|| Error::SegmentNotFound {
            name: name.to_string(),
        });
        async move { result }.boxed()
    }

    fn put<'a>(
        &'a self,
        descriptor: &'a SegmentDescriptor,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let result = if descriptor.name.is_empty() {
            Err(Error::invalid("a segment descriptor without a name"))
        } else {
            self.shared
                .puts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((descriptor.name.clone(), ttl));
            self.channel(&descriptor.name)
                .send_replace(Some(descriptor.clone()));
            Ok(())
        };
        async move { result }.boxed()
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.channel(name).send_replace(None);
        async { Ok(()) }.boxed()
    }

    /// The current state, then the state after each change; a watcher slower than the
    /// changes sees the newest state, not every one in between.
    fn watch<'a>(
        &'a self,
        name: &'a str,
    ) -> Option<BoxStream<'a, Result<Option<SegmentDescriptor>, Error>>> {
        let mut receiver = self.channel(name).subscribe();
        let current = receiver.borrow_and_update().clone();
        let changes = futures::stream::unfold(receiver, |mut receiver| async move {
            // The sender lives in the shared map as long as any clone of the store does.
            receiver.changed().await.ok()?;
            let state = receiver.borrow_and_update().clone();
            Some((Ok(state), receiver))
        });
        Some(
            futures::stream::once(async move { Ok(current) })
                .chain(changes)
                .boxed(),
        )
    }
}
