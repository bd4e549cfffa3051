//! Paths to a peer: one connected queue pair per (local NIC, remote NIC), each with the task
//! that hands its completions to the slices waiting for them, and the cool-down of paths that
//! failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::verbs::{Completion, QueuePair, WcStatus, WorkRequest};
use crate::error::Error;

/// A (local NIC, remote NIC) pair, as indices into the two NIC lists.
pub(crate) type PathKey = (usize, usize);

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<WcStatus>>>>;

/// One connected queue pair and its completion task. Dropped, it fails the queue pair (so that
/// nothing it carries touches memory again) and stops the task.
pub(crate) struct Path {
    pub(crate) key: PathKey,
    qp: Arc<dyn QueuePair>,
    waiters: Waiters,
    next_id: AtomicU64,
    driver: tokio::task::JoinHandle<()>,
}

impl Path {
    /// Starts the completion task of `qp` (connected) on `handle`.
    pub(crate) fn start(key: PathKey, qp: Arc<dyn QueuePair>, handle: &Handle) -> Arc<Path> {
        let waiters: Waiters = Arc::default();
        let driver = handle.spawn(drive(qp.clone(), waiters.clone()));
        Arc::new(Path {
            key,
            qp,
            waiters,
            next_id: AtomicU64::new(1),
            driver,
        })
    }

    /// Posts one work request (its id is set here); the receiver gets its completion status,
    /// or is closed if the path is dropped first.
    pub(crate) fn post(&self, mut wr: WorkRequest) -> Result<oneshot::Receiver<WcStatus>, Error> {
        wr.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(wr.id, tx);
        if let Err(e) = self.qp.post(&[wr]) {
            self.lock().remove(&wr.id);
            return Err(e);
        }
        Ok(rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<WcStatus>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the queue pair can carry requests.
    pub(crate) fn is_usable(&self) -> bool {
        !self.qp.is_failed()
    }

    /// Fails the queue pair on purpose: once this returns, none of its requests touches
    /// memory again (see `verbs`). The other requests on it complete as flushed and go again
    /// on a fresh queue pair, with no cool-down (only a transport error cools a path down).
    pub(crate) fn kill(&self) {
        self.qp.fail();
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        self.qp.fail();
        self.driver.abort();
    }
}

/// Hands completions to their waiters, waiting on the completion channel when there are none.
async fn drive(qp: Arc<dyn QueuePair>, waiters: Waiters) {
    let mut out: Vec<Completion> = Vec::new();
    loop {
        // Asked for before polling, so that a completion between the poll and the wait wakes it.
        let event = qp.completed();
        qp.poll(&mut out);
        if out.is_empty() {
            event.await;
            continue;
        }
        let mut w = waiters.lock().unwrap_or_else(|p| p.into_inner());
        for c in out.drain(..) {
            if let Some(tx) = w.remove(&c.id) {
                let _ = tx.send(c.status);
            }
        }
    }
}

/// When failed paths may be tried again.
#[derive(Default)]
pub(crate) struct Cooldowns {
    until: Mutex<HashMap<(u64, PathKey), Instant>>,
}

impl Cooldowns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, PathKey), Instant>> {
        self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path `key` to instance `peer` failed: not tried again for `period`.
    pub(crate) fn failed(&self, peer: u64, key: PathKey, period: Duration) {
        self.lock().insert((peer, key), Instant::now() + period);
    }

    /// Whether the path may be tried now.
    pub(crate) fn ready(&self, peer: u64, key: PathKey) -> bool {
        let mut map = self.lock();
        match map.get(&(peer, key)) {
            Some(&t) if t > Instant::now() => false,
            Some(_) => {
                map.remove(&(peer, key));
                true
            }
            None => true,
        }
    }

    /// Forgets the paths to `peer` (it restarted or was closed).
    pub(crate) fn forget(&self, peer: u64) {
        self.lock().retain(|(p, _), _| *p != peer);
    }
}
