//! The client's heartbeat: a ping every interval; on `NeedRemount` (the master restarted or
//! expired this client) the store space is mounted again; on `TasksWaiting` the copy and move
//! tasks the master assigned to this client are taken and started. What the pings found is
//! the client's [`Standing`] (its admin server's `/ready`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Inner;
use crate::master::PingResult;

/// The heartbeat task; it stops when dropped, when the client is gone, or at `stop`.
pub(crate) struct Heartbeat(std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>);

impl Heartbeat {
    pub(crate) fn start(inner: Weak<Inner>, handle: &tokio::runtime::Handle) -> Heartbeat {
        Heartbeat(std::sync::Mutex::new(Some(handle.spawn(async move {
            loop {
                let Some(every) = inner.upgrade().map(|i| i.cfg.heartbeat) else {
                    return;
                };
                tokio::time::sleep(every).await;
                let Some(client) = inner.upgrade() else {
                    return;
                };
                beat(&client, every * 3).await;
            }
        }))))
    }
}

impl Heartbeat {
    /// No heartbeat: for a handle on a client whose own handles keep beating.
    pub(crate) fn none() -> Heartbeat {
        Heartbeat(std::sync::Mutex::new(None))
    }

    fn take(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Stops the pings and returns once the task is gone, so that no remount it had under way
    /// lands after this (a closed client must not mount its space again).
    pub(crate) async fn stop(&self) {
        if let Some(task) = self.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(task) = self.take() {
            task.abort();
        }
    }
}

/// When the master last confirmed this client with its store space mounted: at start, at
/// each ping it answered without asking for a remount, and at each remount it applied.
#[derive(Debug)]
pub(crate) struct Standing {
    start: Instant,
    /// Milliseconds from `start` to the last confirmation, plus one (0: none since the master
    /// asked for a remount, or never).
    confirmed: AtomicU64,
}

impl Standing {
    /// Confirmed now (the client just mounted its space).
    pub(crate) fn new() -> Standing {
        let s = Standing {
            start: Instant::now(),
            confirmed: AtomicU64::new(0),
        };
        s.confirm();
        s
    }

    fn confirm(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.confirmed.store(ms + 1, Ordering::Release);
    }

    fn lose(&self) {
        self.confirmed.store(0, Ordering::Release);
    }

    /// Whether the master confirmed this client within `within`.
    pub(crate) fn is_current(&self, within: Duration) -> bool {
        match self.confirmed.load(Ordering::Acquire) {
            0 => false,
            at => {
                let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
                now.saturating_sub(at - 1) <= u64::try_from(within.as_millis()).unwrap_or(u64::MAX)
            }
        }
    }
}

async fn beat(c: &Arc<Inner>, bound: std::time::Duration) {
    let until = std::time::Instant::now() + bound;
    let ping = c.masters.call(until, |m| async move { m.ping().await });
    let answered = tokio::time::timeout(bound, ping).await;
    let heard = matches!(answered, Ok(Ok(_)));
    let need = match answered {
        Ok(Ok(PingResult::Ok)) => false,
        Ok(Ok(PingResult::NeedRemount)) => {
            c.standing.lose();
            // A master that does not know this client may not know the leases its locations
            // were kept under (an in-memory master restarted): keep none of them.
            c.cache.forget_all();
            // Nor may a put start writing into its grants: the master may place other
            // objects there. Those it still knows end once their writers are done.
            let idle = c.grants.retire_all();
            super::grants::end(c, idle);
            true
        }
        Ok(Ok(PingResult::TasksWaiting)) => {
            // Confirmed when the answer came, not after the tasks were taken.
            if !c.spaces.remount_is_due() {
                c.standing.confirm();
            }
            super::tasks::take(c, bound).await;
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "ping failed");
            false
        }
        Err(_) => {
            tracing::warn!("ping timed out");
            false
        }
    };
    if heard {
        super::grants::end(c, c.grants.take_owed());
    }
    // Also when a call's outcome at the master is unknown (its ids may be stale).
    let due = c.spaces.take_remount_due();
    if !(due || need) {
        if heard {
            c.standing.confirm();
        }
        return;
    }
    let until = std::time::Instant::now() + bound;
    let _turn = c.spaces.turn().await;
    let specs = c.spaces.specs();
    let remount = c.masters.call(until, |m| {
        let specs = specs.clone();
        async move { m.remount(specs).await }
    });
    match tokio::time::timeout(bound, remount).await {
        Ok(Ok(ids)) => {
            c.standing.confirm();
            let dropped = c.spaces.remounted(&specs, &ids);
            c.spaces
                .retire(&c.engine, dropped, std::time::Duration::ZERO);
            tracing::info!(client = %c.id, "store space mounted again");
        }
        // Applied there or not: the next beat remounts again.
        Ok(Err(e)) => {
            c.spaces.remount_soon();
            tracing::warn!(error = %e, "remount failed; retrying");
        }
        Err(_) => {
            c.spaces.remount_soon();
            tracing::warn!("remount timed out; retrying");
        }
    }
}
