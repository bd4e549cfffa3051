//! [`EtcdSink`]: the elected master's [`LogSink`]. A task on the master's runtime takes the
//! entries queued since its last append (group commit) and appends them to the etcd log under
//! the leader's epoch; the master answers a call once the log is durable past its entries.
//!
//! An append whose outcome is unknown (a timeout, etcd unavailable) is made again with the
//! same bytes, for up to the election's TTL. Once an append fails for good the sink stays
//! failed and every call gets the error: the master's state may hold entries the log lacks.
//! [`crate::Error::Deposed`] (the guard refused: another master leads) becomes the store's
//! `NotLeader`, since those entries certainly did not happen and the client may send the call
//! to the new leader; any other error leaves the entries' fate unknown and is passed on with
//! its etcd code, which clients do not retry.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use yuebing_store::master::ha::{split_groups, GroupLimits, LogGroup};
use yuebing_store::master::{LogEntry, LogSink};

use crate::error::Error;
use crate::log::{Epoch, EtcdLog};
use crate::task::Task;

/// The log's state as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// Every entry up to this one is in etcd.
    durable: u64,
    /// Why appending stopped, once it has.
    failed: Option<yuebing_store::Error>,
}

/// The elected master's log sink (see the module docs). Its writer starts at
/// [`EtcdSink::lead`]; entries appended before are a bug of the caller (a standby makes none)
/// and fail the sink.
pub struct EtcdSink {
    state: watch::Sender<State>,
    queue: mpsc::UnboundedSender<Vec<LogEntry>>,
    /// The queue's other end, until the writer takes it.
    pending: Mutex<Option<mpsc::UnboundedReceiver<Vec<LogEntry>>>>,
    writer: Mutex<Option<Task>>,
}

impl EtcdSink {
    /// A sink whose entries up to `durable` are already in the log (those a standby replayed).
    pub fn new(durable: u64) -> Arc<EtcdSink> {
        let (queue, pending) = mpsc::unbounded_channel();
        Arc::new(EtcdSink {
            state: watch::channel(State {
                durable,
                failed: None,
            })
            .0,
            queue,
            pending: Mutex::new(Some(pending)),
            writer: Mutex::new(None),
        })
    }

    /// Records that the standby replayed the log up to `seq` (all of it durable in etcd).
    pub fn replayed(&self, seq: u64) {
        self.state.send_if_modified(|s| {
            let newer = seq > s.durable;
            s.durable = s.durable.max(seq);
            newer
        });
    }

    /// Starts appending to `log` in `epoch`, on `handle`'s runtime; the writer stops when the
    /// sink is dropped. Call it once, after the log was caught up and resumed for `epoch`.
    /// An append whose outcome is unknown is tried again for up to `give_up`.
    pub fn lead(
        &self,
        log: Arc<EtcdLog>,
        epoch: Epoch,
        give_up: Duration,
        handle: &tokio::runtime::Handle,
    ) {
        let Some(rx) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let state = self.state.clone();
        let task = handle.spawn(write(log, epoch, give_up, rx, state));
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(Task::new(task));
    }

    /// Resolves once the sink failed, with the error every call gets.
    pub async fn failed(&self) -> yuebing_store::Error {
        let mut rx = self.state.subscribe();
        let failed = match rx.wait_for(|s| s.failed.is_some()).await {
            Ok(state) => state.failed.clone(),
            Err(_) => None,
        };
        failed.unwrap_or_else(|| yuebing_store::Error::Internal {
            reason: "the etcd log sink is gone".into(),
        })
    }

    /// Fails the sink with `error` (the leadership was lost): every call gets it from now on.
    pub fn fail(&self, error: yuebing_store::Error) {
        fail(&self.state, error);
    }
}

fn fail(state: &watch::Sender<State>, error: yuebing_store::Error) {
    state.send_modify(|s| {
        if s.failed.is_none() {
            s.failed = Some(error);
        }
    });
}

/// The store's error for an append that failed.
pub(crate) fn store_error(e: Error) -> yuebing_store::Error {
    match e {
        Error::Deposed { .. } | Error::LeaseLost { .. } => {
            yuebing_store::Error::NotLeader { leader: None }
        }
        other => yuebing_store::Error::Remote {
            code: other.code(),
            message: other.to_string(),
        },
    }
}

/// The pause before an append whose outcome is unknown is made again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The writer: appends what is queued, group after group, until the sink goes or fails. A
/// group whose append timed out or found etcd unavailable (its outcome unknown) is appended
/// again, the same bytes, for up to `give_up` (the election's TTL: past it the leadership is
/// lost anyway): if it had committed, etcd finds the same value and the append succeeds.
async fn write(
    log: Arc<EtcdLog>,
    epoch: Epoch,
    give_up: Duration,
    mut rx: mpsc::UnboundedReceiver<Vec<LogEntry>>,
    state: watch::Sender<State>,
) {
    while let Some(first) = rx.recv().await {
        let mut entries = first;
        while let Ok(more) = rx.try_recv() {
            entries.extend(more);
        }
        let groups = match split_groups(entries, GroupLimits::default()) {
            Ok(groups) => groups,
            Err(e) => {
                fail(&state, e);
                return;
            }
        };
        for group in groups {
            if let Err(e) = append(&log, &group, &epoch, give_up).await {
                tracing::error!(error = %e, "the etcd log refused an append; this master stops serving");
                fail(&state, store_error(e));
                return;
            }
            state.send_modify(|s| s.durable = s.durable.max(group.last()));
        }
    }
}

/// Appends one group, again while its outcome is unknown, for up to `give_up`.
async fn append(
    log: &EtcdLog,
    group: &LogGroup,
    epoch: &Epoch,
    give_up: Duration,
) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        match log.append(group, epoch).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && start.elapsed() < give_up => {
                tracing::warn!(error = %e, first = group.first(), "appending to the etcd log again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
}

impl LogSink for EtcdSink {
    fn append(&self, entries: Vec<LogEntry>) {
        if self.state.borrow().failed.is_some() {
            return;
        }
        let started = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none();
        if !started {
            fail(
                &self.state,
                yuebing_store::Error::NotLeader { leader: None },
            );
            return;
        }
        let _ = self.queue.send(entries);
    }

    fn wait(&self, seq: u64) -> BoxFuture<'_, yuebing_store::Result<()>> {
        let mut rx = self.state.subscribe();
        async move {
            let state = rx
                .wait_for(|s| s.durable >= seq || s.failed.is_some())
                .await
                .map_err(|_| yuebing_store::Error::Internal {
                    reason: "the etcd log sink is gone".into(),
                })?;
            match (&state.failed, state.durable >= seq) {
                (_, true) => Ok(()),
                (Some(e), false) => Err(e.clone()),
                (None, false) => Err(yuebing_store::Error::Internal {
                    reason: "the etcd log sink woke without progress".into(),
                }),
            }
        }
        .boxed()
    }

    fn durable_seq(&self) -> u64 {
        self.state.borrow().durable
    }

    fn failure(&self) -> Option<yuebing_store::Error> {
        self.state.borrow().failed.clone()
    }
}
