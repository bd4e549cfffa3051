//! Notifications: a short message delivered to the target segment once a whole batch completed
//! and its data landed — whether or not anyone polls — and never for a failed batch.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Mutex;

use yuebing_rpc::{CallOptions, Endpoint};

use super::{TransferEngine, OWN};
use crate::batch::driver::NotifyState;
use crate::batch::{BatchId, TaskState};
use crate::error::Error;
use crate::request::{SegmentHandle, TransferRequest};
use crate::service::Notification;

/// Largest notification message, in bytes.
pub const MAX_NOTIFY_MESSAGE: usize = 4096;

/// Received notifications, bounded.
#[derive(Debug)]
pub(crate) struct NotificationQueue {
    queue: Mutex<VecDeque<Notification>>,
    capacity: usize,
}

impl NotificationQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        NotificationQueue {
            queue: Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Notification>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `n`, or refuses when full (the sender gets the error; nothing is dropped).
    pub(crate) fn push(&self, n: Notification) -> Result<(), Error> {
        let mut q = self.lock();
        if q.len() >= self.capacity {
            return Err(Error::NotificationQueueFull);
        }
        q.push_back(n);
        Ok(())
    }

    pub(crate) fn take_all(&self) -> Vec<Notification> {
        self.lock().drain(..).collect()
    }
}

impl TransferEngine {
    /// Like [`TransferEngine::submit`], and once every task of the batch completed (its data
    /// landed), `message` (≤ 4 KiB) is delivered to the target segment, which all requests must
    /// name. A failed or canceled batch sends nothing. [`TransferEngine::wait`] returns after
    /// the delivery; a refused delivery shows in [`crate::BatchStatus::notify_error`]. A batch
    /// that already has a task that ended without completing (a batch reused after a cancel,
    /// or after a failure) could never send it, so it is refused
    /// ([`Error::InvalidArgument`]): use a fresh batch.
    pub fn submit_with_notify(
        &self,
        batch: BatchId,
        requests: &[TransferRequest],
        message: Vec<u8>,
    ) -> Result<Range<usize>, Error> {
        if message.len() > MAX_NOTIFY_MESSAGE {
            return Err(Error::invalid(format!(
                "notification of {} bytes (at most {MAX_NOTIFY_MESSAGE})",
                message.len()
            )));
        }
        let segment = match requests {
            [] => {
                return Err(Error::invalid(
                    "a notifying submit needs at least one request",
                ))
            }
            [first, rest @ ..] if rest.iter().all(|r| r.target == first.target) => first.target,
            _ => {
                return Err(Error::invalid(
                    "all requests of a notifying batch must target one segment",
                ))
            }
        };
        let signals = self.inner.batches.signals(batch)?;
        let tasks = self.status(batch)?.tasks;
        for task in 0..tasks {
            let state = self.task_status(batch, task)?.state;
            if state.is_final() && state != TaskState::Completed {
                return Err(Error::invalid(format!(
                    "{batch} has a task that ended {state:?}: a notification on it could never \
                     be sent; submit it on a fresh batch"
                )));
            }
        }
        {
            let mut state = signals.notify();
            if !matches!(*state, NotifyState::None) {
                return Err(Error::invalid(format!(
                    "{batch} already carries a notification"
                )));
            }
            *state = NotifyState::Pending { segment, message };
        }
        self.submit(batch, requests).inspect_err(|_| {
            *signals.notify() = NotifyState::None;
        })
    }

    /// Takes every notification received so far, oldest first.
    pub fn take_notifications(&self) -> Vec<Notification> {
        self.inner.notifications.take_all()
    }

    /// Called by a task that found its batch finished: delivers the batch's notification (if
    /// it completed; once, whoever calls first) and wakes the waiters again.
    pub(super) async fn after_task(&self, batch: BatchId) {
        let Ok(signals) = self.inner.batches.signals(batch) else {
            return;
        };
        let Ok(status) = self.status(batch) else {
            return;
        };
        if !status.state.is_final() {
            return;
        }
        let pending = {
            let mut state = signals.notify();
            match std::mem::replace(&mut *state, NotifyState::Sending) {
                NotifyState::Pending { segment, message } => Some((segment, message)),
                other => {
                    *state = other;
                    None
                }
            }
        };
        let Some((segment, message)) = pending else {
            return;
        };
        let outcome = if status.state == TaskState::Completed {
            self.deliver(segment, message).await.err()
        } else {
            None
        };
        *signals.notify() = NotifyState::Done(outcome);
        signals.finished.notify_waiters();
    }

    async fn deliver(&self, segment: SegmentHandle, message: Vec<u8>) -> Result<(), Error> {
        let from = self.name().to_string();
        if segment == OWN {
            return self
                .inner
                .notifications
                .push(Notification { from, message });
        }
        let target = self.segment_descriptor(segment)?;
        let control = self.inner.control.as_ref().ok_or_else(|| {
            Error::invalid("this engine has no control client (use TransferEngine::start)")
        })?;
        let endpoint: Endpoint = target.endpoint.parse()?;
        let code = control
            .get(&endpoint)
            .call_with(CallOptions::method("notify"), |c, ctx| {
                let (from, message) = (from.clone(), message.clone());
                async move { c.notify(ctx, from, message).await }
            })
            .await?;
        match code {
            0 => Ok(()),
            c if c == Error::NotificationQueueFull.code() => Err(Error::NotificationQueueFull),
            c => Err(Error::PeerFailed {
                reason: format!("notification refused with code {c}"),
            }),
        }
    }
}
