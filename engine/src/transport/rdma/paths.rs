//! Paths to a peer: one connected queue pair per (local NIC, remote NIC), each with the task
//! that hands its completions to the slices waiting for them, room for as many requests as its
//! send queue holds, and the cool-down of paths that failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use super::verbs::{Completion, QueuePair, WcStatus, WorkRequest};
use crate::error::Error;

/// A (local NIC, remote NIC) pair, as indices into the two NIC lists.
pub(crate) type PathKey = (usize, usize);

/// How long [`Path::kill`] waits for the completions of a failed queue pair's requests.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// A posted request's waiter, and its room in the send queue, given back at its completion
/// (not when the waiter reads it: a transfer waiting for room may not be reading).
type Waiter = (oneshot::Sender<WcStatus>, OwnedSemaphorePermit);

/// What the path and its completion task share.
struct Shared {
    qp: Arc<dyn QueuePair>,
    waiters: Mutex<HashMap<u64, Waiter>>,
    /// Requests posted and not completed yet.
    outstanding: AtomicU64,
    /// Held while the completion queue is polled (by the task, or by `kill`).
    polling: Mutex<()>,
}

impl Shared {
    /// Polls the completion queue and hands each completion to its waiter; returns how many.
    fn poll(&self) -> usize {
        let _polling = self.polling.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Completion> = Vec::new();
        self.qp.poll(&mut out);
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for c in &out {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
            if let Some((tx, room)) = w.remove(&c.id) {
                let _ = tx.send(c.status);
                drop(room);
            }
        }
        out.len()
    }
}

/// One connected queue pair and its completion task. Dropped, it fails the queue pair and
/// stops the task.
pub(crate) struct Path {
    pub(crate) key: PathKey,
    shared: Arc<Shared>,
    /// One permit per send-queue entry: a request waits for room rather than overflow it.
    room: Arc<Semaphore>,
    next_id: AtomicU64,
    /// Failed on purpose (a transfer was dropped with requests on it), not by a fault.
    killed: AtomicBool,
    driver: tokio::task::JoinHandle<()>,
}

impl Path {
    /// Starts the completion task of `qp` (connected, with `depth` send-queue entries) on
    /// `handle`.
    pub(crate) fn start(
        key: PathKey,
        qp: Arc<dyn QueuePair>,
        depth: u32,
        handle: &Handle,
    ) -> Arc<Path> {
        let shared = Arc::new(Shared {
            qp,
            waiters: Mutex::default(),
            outstanding: AtomicU64::new(0),
            polling: Mutex::new(()),
        });
        let driver = handle.spawn(drive(shared.clone()));
        Arc::new(Path {
            key,
            shared,
            room: Arc::new(Semaphore::new(depth.max(1) as usize)),
            next_id: AtomicU64::new(1),
            killed: AtomicBool::new(false),
            driver,
        })
    }

    /// Posts one work request (its id is set here) once the send queue has room; the receiver
    /// gets its completion status, or is closed if the path is dropped first.
    pub(crate) async fn post(
        &self,
        mut wr: WorkRequest,
    ) -> Result<oneshot::Receiver<WcStatus>, Error> {
        let permit = self
            .room
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::invalid("rdma: the path is closed"))?;
        wr.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(wr.id, (tx, permit));
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.shared.qp.post(&[wr]) {
            self.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
            self.lock().remove(&wr.id);
            return Err(e);
        }
        Ok(rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.shared
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the queue pair can carry requests.
    pub(crate) fn is_usable(&self) -> bool {
        !self.shared.qp.is_failed()
    }

    /// Fails the queue pair on purpose and waits (polling its completion queue here, at most
    /// [`KILL_WAIT`]) until every request on it completed: only a reported completion (a
    /// flush, mostly) tells that the NIC is done with a request's memory. The other transfers'
    /// requests on it complete as flushed and go again on a fresh queue pair.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.shared.qp.fail();
        let deadline = Instant::now() + KILL_WAIT;
        while self.shared.outstanding.load(Ordering::Acquire) > 0 {
            if self.shared.poll() > 0 {
                continue;
            }
            if Instant::now() > deadline {
                tracing::error!(
                    path = ?self.key,
                    outstanding = self.shared.outstanding.load(Ordering::Acquire),
                    "rdma: a failed queue pair did not report all its requests in {KILL_WAIT:?}"
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Whether the path was failed on purpose rather than by a fault.
    pub(crate) fn was_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        self.shared.qp.fail();
        self.driver.abort();
    }
}

/// Hands completions to their waiters, waiting on the completion channel when there are none.
async fn drive(shared: Arc<Shared>) {
    loop {
        // Asked for before polling, so that a completion between the poll and the wait wakes it.
        let event = shared.qp.completed();
        if shared.poll() == 0 {
            event.await;
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
