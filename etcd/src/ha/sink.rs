//! [`EtcdSink`]: the elected master's [`LogSink`]. A task on the master's runtime takes the
//! entries queued since its last append (group commit) and appends them to the etcd log under
//! the leader's epoch; the master answers a call once the log is durable past its entries.
//!
//! An append whose outcome is unknown (a timeout, etcd unavailable) is made again with the
//! same bytes, for up to the election's TTL (if it had committed, etcd finds the same bytes and
//! reports success). Once the sink fails — an append refused or given up, or the leadership
//! lost — it stops appending and stays failed, since the master's state may hold entries the
//! log lacks. What a waiting call then learns depends on its own entries:
//! - none (a read), or none handed to etcd yet, or all in an append etcd refused (`Deposed`,
//!   `LogConflict`: nothing written): it certainly did not happen, `NotLeader`, and the client
//!   may send it to the new leader;
//! - some handed to etcd in an append whose outcome is unknown: an error with the etcd code
//!   saying so, which clients do not retry.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use yuebing_store::master::ha::{split_groups, GroupLimits, LogGroup};
use yuebing_store::master::{LogEntry, LogSink, Record};

use crate::error::Error;
use crate::log::{Epoch, EtcdLog};
use crate::task::Task;

/// The log's state as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// Every entry up to this one is in etcd.
    durable: u64,
    /// The last entry handed to etcd in an append that may have committed.
    sent: u64,
    /// Why appending stopped, once it has.
    failed: Option<Error>,
    /// What this master made durable as leader.
    accepted: Option<Accepted>,
}

/// What a leader made durable in its epoch: its record of the writes it accepted, to compare
/// with the other masters' and with the log (no two epochs may interleave).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The epoch it appended in.
    pub epoch: i64,
    /// Sequence numbers of its first and last durable entries.
    pub seqs: (u64, u64),
    /// etcd revisions of its first and last appends.
    pub revisions: (i64, i64),
    /// Writes it made durable (`WriteEnd` records: ended puts and upserts).
    pub write_ends: u64,
}

impl Accepted {
    fn add(this: &mut Option<Accepted>, epoch: i64, group: &LogGroup, revision: i64) {
        let ends = group
            .entries()
            .iter()
            .filter(|e| matches!(e.record, Record::WriteEnd { .. }))
            .count() as u64;
        let span = this.get_or_insert(Accepted {
            epoch,
            seqs: (group.first(), group.last()),
            revisions: (revision, revision),
            write_ends: 0,
        });
        span.seqs.1 = group.last();
        span.revisions.1 = revision;
        span.write_ends += ends;
    }
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
                sent: durable,
                failed: None,
                accepted: None,
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
            s.sent = s.sent.max(seq);
            newer
        });
    }

    /// Starts appending to `log` in `epoch`, on `handle`'s runtime; the writer stops when the
    /// sink is dropped or fails. Call it once, after the log was caught up and resumed for
    /// `epoch`. An append whose outcome is unknown is tried again for up to `give_up`.
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

    /// Resolves once the sink failed, with why.
    pub async fn failed(&self) -> Error {
        let mut rx = self.state.subscribe();
        let failed = match rx.wait_for(|s| s.failed.is_some()).await {
            Ok(state) => state.failed.clone(),
            Err(_) => None,
        };
        failed.unwrap_or_else(|| Error::Client {
            reason: "the etcd log sink is gone".into(),
        })
    }

    /// What this master made durable as leader (`None` if it never appended).
    pub fn accepted(&self) -> Option<Accepted> {
        self.state.borrow().accepted.clone()
    }

    /// Resolves once every entry up to `seq` is in etcd, or with why the sink failed first.
    pub async fn durable_reached(&self, seq: u64) -> Result<(), Error> {
        let mut rx = self.state.subscribe();
        let state = rx
            .wait_for(|s| s.durable >= seq || s.failed.is_some())
            .await
            .map_err(|_| Error::Client {
                reason: "the etcd log sink is gone".into(),
            })?;
        match (&state.failed, state.durable >= seq) {
            (_, true) => Ok(()),
            (Some(why), false) => Err(why.clone()),
            (None, false) => Err(Error::Client {
                reason: "the etcd log sink woke without progress".into(),
            }),
        }
    }

    /// Fails the sink (the leadership was lost): it appends nothing more, and every call gets
    /// an error from now on (see the module docs).
    pub fn fail(&self, why: Error) {
        fail(&self.state, why);
    }
}

fn fail(state: &watch::Sender<State>, why: Error) {
    state.send_modify(|s| {
        if s.failed.is_none() {
            s.failed = Some(why);
        }
    });
}

/// The error of a call that certainly did not happen: the client may send it elsewhere.
fn not_run() -> yuebing_store::Error {
    yuebing_store::Error::NotLeader { leader: None }
}

/// The error of a call whose entries may or may not be in the log.
fn unknown(why: &Error) -> yuebing_store::Error {
    yuebing_store::Error::Remote {
        code: why.code(),
        message: format!("this master stopped before the call's outcome was known: {why}"),
    }
}

/// The pause before an append whose outcome is unknown is made again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The writer: appends what is queued, group after group, until the sink goes or fails.
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
                fail(&state, Error::Log(e));
                return;
            }
        };
        for group in groups {
            // Nothing more goes to etcd once the sink failed (the leadership was lost).
            let failed = state.borrow().failed.is_some();
            if failed {
                return;
            }
            state.send_modify(|s| s.sent = s.sent.max(group.last()));
            match append(&log, &group, &epoch, give_up, &state).await {
                Ok(revision) => state.send_modify(|s| {
                    s.durable = s.durable.max(group.last());
                    Accepted::add(&mut s.accepted, epoch.create_revision, &group, revision);
                }),
                Err(e) => {
                    tracing::error!(error = %e, "the etcd log refused an append; this master stops serving");
                    let refused = matches!(e, Error::Deposed { .. } | Error::LogConflict { .. });
                    state.send_modify(|s| {
                        if refused {
                            // Nothing of this group was written.
                            s.sent = s.durable;
                        }
                        if s.failed.is_none() {
                            s.failed = Some(e);
                        }
                    });
                    return;
                }
            }
        }
    }
}

/// Appends one group; again, the same bytes, while its outcome is unknown, for up to
/// `give_up` and unless the sink failed meanwhile.
async fn append(
    log: &EtcdLog,
    group: &LogGroup,
    epoch: &Epoch,
    give_up: Duration,
    state: &watch::Sender<State>,
) -> Result<i64, Error> {
    let start = Instant::now();
    loop {
        match log.append(group, epoch).await {
            Ok(revision) => return Ok(revision),
            Err(e) if e.is_retryable() && start.elapsed() < give_up => {
                if state.borrow().failed.is_some() {
                    return Err(e);
                }
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
                Error::Client {
                    reason: "entries appended before this master led".into(),
                },
            );
            return;
        }
        let _ = self.queue.send(entries);
    }

    fn wait(&self, upto: u64, own: Option<u64>) -> BoxFuture<'_, yuebing_store::Result<()>> {
        let mut rx = self.state.subscribe();
        async move {
            let state = rx
                .wait_for(|s| s.durable >= upto || s.failed.is_some())
                .await
                .map_err(|_| yuebing_store::Error::Internal {
                    reason: "the etcd log sink is gone".into(),
                })?;
            if state.durable >= upto {
                return Ok(());
            }
            let why = state.failed.clone().unwrap_or_else(|| Error::Client {
                reason: "the etcd log sink woke without progress".into(),
            });
            Err(match own {
                Some(first) if first <= state.sent => unknown(&why),
                _ => not_run(),
            })
        }
        .boxed()
    }

    fn durable_seq(&self) -> u64 {
        self.state.borrow().durable
    }

    fn failure(&self) -> Option<yuebing_store::Error> {
        self.state.borrow().failed.as_ref().map(|_| not_run())
    }
}
