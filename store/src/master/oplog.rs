//! Where a master's durable records go: its data directory's log (`LogWriter`, with
//! `--data-dir`), or a [`LogSink`] that its HA driver gives it (an elected master's log in
//! etcd). Either way a call is answered only once every entry it made (and every entry made
//! before it) is durable.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::disk::{Durable, LogWriter};
use super::log::LogEntry;
use crate::error::{Error, Result};

/// A replicated log an elected master writes through: it makes entries durable in order
/// (group commit is its business) and says how far it got. Once it fails it stays failed:
/// the master then answers every call with that error, because its state may hold entries
/// the log does not.
pub trait LogSink: Send + Sync + 'static {
    /// Queues `entries` (consecutive, following those queued before) to be made durable.
    fn append(&self, entries: Vec<LogEntry>);
    /// Resolves once every entry up to `upto` is durable (`Ok`). If the log stops first, the
    /// error says what became of the call that waits, whose own entries start at `own`
    /// (`None`: it made none): if it made none, or none of them was handed to the log, it
    /// certainly did not happen (`NotLeader`: the client may send it to another master);
    /// otherwise its outcome is unknown (an error clients do not retry).
    fn wait(&self, upto: u64, own: Option<u64>) -> BoxFuture<'_, Result<()>>;
    /// The last sequence number known durable.
    fn durable_seq(&self) -> u64;
    /// Why the log stopped, once it has.
    fn failure(&self) -> Option<Error>;
}

/// The master's log, whichever it is.
pub(crate) enum OpLog {
    /// The data directory's.
    Disk(LogWriter),
    /// A replicated one.
    Sink(Arc<dyn LogSink>),
}

impl OpLog {
    pub(crate) fn append(&self, entries: Vec<LogEntry>) {
        match self {
            OpLog::Disk(log) => log.append(entries),
            OpLog::Sink(sink) => sink.append(entries),
        }
    }

    /// Waits until every entry up to `upto` is durable; `own` is the first entry the waiting
    /// call made, if any (see [`LogSink::wait`]).
    pub(crate) async fn wait(&self, upto: u64, own: Option<u64>) -> Result<()> {
        match self {
            OpLog::Disk(log) => log.wait(upto).await,
            OpLog::Sink(sink) => sink.wait(upto, own).await,
        }
    }

    /// The error every call gets once the log stopped.
    pub(crate) fn failure(&self) -> Option<Error> {
        match self {
            OpLog::Disk(log) => match log.durable() {
                Durable::Upto(_) => None,
                Durable::Failed(reason) => Some(Error::Io {
                    path: "operation log".into(),
                    reason,
                }),
            },
            OpLog::Sink(sink) => sink.failure(),
        }
    }

    /// The last durable sequence number (0 once a disk log failed).
    pub(crate) fn durable_seq(&self) -> u64 {
        match self {
            OpLog::Disk(log) => match log.durable() {
                Durable::Upto(s) => s,
                Durable::Failed(_) => 0,
            },
            OpLog::Sink(sink) => sink.durable_seq(),
        }
    }

    /// The data directory's log, for snapshots and closing.
    pub(crate) fn disk(&self) -> Option<&LogWriter> {
        match self {
            OpLog::Disk(log) => Some(log),
            OpLog::Sink(_) => None,
        }
    }
}
