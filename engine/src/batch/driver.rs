//! The batch table behind one lock, with the effects performed: waiters woken, and a
//! cancellation switch per batch for the tasks still running.
//!
//! A batch outlives a cancel: `cancel` trips the switch that the tasks then in flight hold and
//! puts a fresh one in its place for the tasks submitted after it. The swap happens under the
//! table's lock, as does a submit's taking of the switch, so the table and the switches see a
//! submit and a cancel in the same order: a task the cancel found in the table holds the
//! switch it trips (or, Waiting, is Canceled at once and never starts), and a task added after
//! it holds the fresh one.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{BatchId, BatchStatus, BatchTable, Effect};
use crate::error::Error;
use crate::request::SegmentHandle;

/// Where a batch's notification stands.
#[derive(Debug, Default)]
pub(crate) enum NotifyState {
    /// The batch carries none.
    #[default]
    None,
    /// To be delivered to `segment` once the batch completed.
    Pending {
        segment: SegmentHandle,
        message: Vec<u8>,
    },
    /// Being delivered.
    Sending,
    /// Delivered (or not sent, the batch having failed); the delivery error, if any.
    Done(Option<Error>),
}

/// Per-batch wake-up, cancellation and notification.
#[derive(Debug, Default)]
pub(crate) struct BatchSignals {
    /// Woken when the batch finishes (and again when its notification went out).
    pub(crate) finished: Notify,
    /// The switch of the tasks submitted since the last cancel, which trips it and replaces
    /// it (see the module docs). Taken and replaced only under the table's lock.
    cancel: Mutex<CancellationToken>,
    notify: Mutex<NotifyState>,
}

impl BatchSignals {
    pub(crate) fn notify(&self) -> MutexGuard<'_, NotifyState> {
        self.notify.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cancel_switch(&self) -> MutexGuard<'_, CancellationToken> {
        self.cancel.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The engine's batches.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    table: Mutex<BatchTable>,
    signals: Mutex<HashMap<BatchId, Arc<BatchSignals>>>,
}

impl Batches {
    fn signals_map(&self) -> MutexGuard<'_, HashMap<BatchId, Arc<BatchSignals>>> {
        self.signals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the table, then performs the effects it produced.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut BatchTable) -> R) -> R {
        let (r, effects) = {
            let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            let r = f(&mut table);
            let effects: Vec<Effect> = std::iter::from_fn(|| table.poll_effect()).collect();
            (r, effects)
        };
        for Effect::Finished(id) in effects {
            if let Some(s) = self.signals_map().get(&id) {
                s.finished.notify_waiters();
            }
        }
        r
    }

    pub(crate) fn allocate(&self, capacity: usize) -> Result<BatchId, Error> {
        let id = self.with(|t| t.allocate(capacity))?;
        self.signals_map().insert(id, Arc::default());
        Ok(id)
    }

    pub(crate) fn free(&self, id: BatchId) -> Result<(), Error> {
        self.with(|t| t.free(id))?;
        self.signals_map().remove(&id);
        Ok(())
    }

    pub(crate) fn signals(&self, id: BatchId) -> Result<Arc<BatchSignals>, Error> {
        self.signals_map()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::UnknownBatch { id: id.to_string() })
    }

    /// Waits until every task of the batch is final; returns the batch's status.
    pub(crate) async fn wait(&self, id: BatchId) -> Result<BatchStatus, Error> {
        let signals = self.signals(id)?;
        loop {
            let notified = signals.finished.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let mut status = self.with(|t| t.status(id))?;
            if status.state.is_final() {
                match &*signals.notify() {
                    NotifyState::None => return Ok(status),
                    NotifyState::Done(e) => {
                        status.notify_error = e.clone();
                        return Ok(status);
                    }
                    NotifyState::Pending { .. } | NotifyState::Sending => {}
                }
            }
            notified.await;
        }
    }

    /// Adds tasks of the given lengths to the batch (see [`BatchTable::submit`]); returns
    /// their indices and the switch that stops them, tripped by the next `cancel`.
    pub(crate) fn submit(
        &self,
        id: BatchId,
        tasks: &[u64],
    ) -> Result<(Range<usize>, CancellationToken), Error> {
        let signals = self.signals(id)?;
        self.with(|t| {
            let added = t.submit(id, tasks)?;
            Ok((added, signals.cancel_switch().clone()))
        })
    }

    /// Cancels the batch's unfinished tasks and stops those running; tasks submitted after it
    /// run normally.
    pub(crate) fn cancel(&self, id: BatchId) -> Result<usize, Error> {
        let signals = self.signals(id)?;
        let (n, tripped) = self.with(|t| {
            let n = t.cancel(id)?;
            let fresh = CancellationToken::new();
            Ok::<_, Error>((n, std::mem::replace(&mut *signals.cancel_switch(), fresh)))
        })?;
        tripped.cancel();
        Ok(n)
    }
}
