//! The importing side's bookkeeping: the peers mapped so far, those that could not be reached
//! lately, and one import at a time per peer (whoever asks: `prepare`, a background mapping, a
//! forced transfer, a re-map for a buffer exported later), always on the blocking pool.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Inner, ShmPeer};
use crate::error::Error;

/// How long a peer that could not be imported is served by tcp before the next try.
pub(super) const UNREACHABLE_FOR: Duration = Duration::from_secs(10);

/// What this engine knows of the peers it imports.
#[derive(Default)]
pub(super) struct Imports {
    peers: Mutex<HashMap<PathBuf, Arc<ShmPeer>>>,
    /// Peers whose last import failed: when, and why.
    unreachable: Mutex<HashMap<PathBuf, (Instant, Error)>>,
    /// One lock per peer, held while importing it.
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Peers being imported in the background.
    background: Mutex<HashSet<PathBuf>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Imports {
    /// The peer behind `socket`, if it is mapped.
    pub(super) fn peer(&self, socket: &Path) -> Option<Arc<ShmPeer>> {
        lock(&self.peers).get(socket).cloned()
    }

    /// Why the last import of `socket` failed, if it did lately.
    pub(super) fn unreachable(&self, socket: &Path) -> Option<Error> {
        lock(&self.unreachable)
            .get(socket)
            .filter(|(at, _)| at.elapsed() < UNREACHABLE_FOR)
            .map(|(_, e)| e.clone())
    }

    /// Forgets everything about `socket` (the peer restarted or its segment was closed).
    pub(super) fn forget(&self, socket: &Path) {
        lock(&self.peers).remove(socket);
        lock(&self.unreachable).remove(socket);
        // An import under way keeps its lock; the next one makes a new entry.
        lock(&self.locks).remove(socket);
    }

    fn lock_for(&self, socket: &Path) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks)
            .entry(socket.to_path_buf())
            .or_default()
            .clone()
    }
}

impl Inner {
    /// The peer behind `socket`, mapped now (on the blocking pool) unless it already is. With
    /// `stale`, the caller found that mapping lacking (a buffer exported since): it is mapped
    /// again, unless another caller did that meanwhile. A recent failure is returned at once.
    pub(super) async fn import(
        self: &Arc<Self>,
        socket: &Path,
        stale: Option<&Arc<ShmPeer>>,
    ) -> Result<Arc<ShmPeer>, Error> {
        let peer_lock = self.imports.lock_for(socket);
        let _importing = peer_lock.lock().await;
        if let Some(p) = self.imports.peer(socket) {
            if stale.is_none_or(|s| !Arc::ptr_eq(s, &p)) {
                return Ok(p);
            }
        }
        if let Some(e) = self.imports.unreachable(socket) {
            return Err(e);
        }
        let (inner, path) = (self.clone(), socket.to_path_buf());
        // On the engine's runtime: the caller may be a plain thread.
        let imported = self
            .handle
            .spawn_blocking(move || inner.map_peer(&path))
            .await
            .unwrap_or_else(|e| {
                Err(Error::Io {
                    reason: e.to_string(),
                })
            });
        match imported {
            Ok(p) => {
                let p = Arc::new(p);
                lock(&self.imports.peers).insert(socket.to_path_buf(), p.clone());
                lock(&self.imports.unreachable).remove(socket);
                Ok(p)
            }
            Err(e) => {
                tracing::debug!(socket = %socket.display(), error = %e, "shm peer unreachable; tcp serves it");
                let failed = (Instant::now(), e.clone());
                lock(&self.imports.unreachable).insert(socket.to_path_buf(), failed);
                Err(e)
            }
        }
    }

    /// Imports the peer behind `socket` in the background, unless that is under way already;
    /// requests go over tcp meanwhile.
    pub(super) fn import_in_background(self: &Arc<Self>, socket: PathBuf) {
        if !lock(&self.imports.background).insert(socket.clone()) {
            return;
        }
        let inner = self.clone();
        self.handle.spawn(async move {
            let _ = inner.import(&socket, None).await;
            lock(&inner.imports.background).remove(&socket);
        });
    }

    /// Fetches the peer's export and maps it (blocking: a local Unix socket and `mmap`),
    /// keeping the mappings of the previous import that are still the same.
    fn map_peer(&self, socket: &Path) -> Result<ShmPeer, Error> {
        let previous = self.imports.peer(socket);
        let token = self.token.as_ref();
        ShmPeer::connect(socket, previous.as_deref(), token, self.hello_timeout)
    }
}
