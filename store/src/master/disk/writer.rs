//! The operation-log writer: one thread appends entries to the current segment and makes them
//! durable with one `fdatasync` per group (group commit). Callers learn the durable sequence
//! number through a watch channel and release their responses once it covers their entries.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::frame::{write_frame, LOG_MAGIC};
use crate::error::{Error, Result};
use crate::files::{io_err, sync_dir, write_header};
use crate::master::log::LogEntry;

/// The durable position, or why the log stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Durable {
    /// Every entry up to this sequence number is on disk.
    Upto(u64),
    /// Writing failed; nothing after `Upto` can be made durable any more.
    Failed(String),
}

enum Cmd {
    Append(Vec<LogEntry>),
    /// Close the current segment and start `log-<next_seq>`.
    Rotate(u64),
}

/// Handle to the writer thread. [`LogWriter::close`] (or dropping it) writes what is queued
/// and stops the thread.
pub(crate) struct LogWriter {
    tx: Mutex<Option<mpsc::Sender<Cmd>>>,
    durable: watch::Receiver<Durable>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The file name of the segment whose first entry is `seq`.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("log-{seq:020}.ylog")
}

fn create_segment(dir: &Path, first_seq: u64) -> Result<(BufWriter<File>, PathBuf)> {
    let path = dir.join(segment_name(first_seq));
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write_header(&mut w, LOG_MAGIC, crate::master::log::FORMAT_VERSION)
        .map_err(|e| io_err(&path, e))?;
    w.flush().map_err(|e| io_err(&path, e))?;
    w.get_ref().sync_all().map_err(|e| io_err(&path, e))?;
    sync_dir(dir)?;
    Ok((w, path))
}

impl LogWriter {
    /// Starts a writer whose first segment begins at `next_seq` (entries up to `next_seq - 1`
    /// are already durable); it records how long each group commit's flush and `fdatasync`
    /// took in `fsync`.
    pub(crate) fn start(dir: &Path, next_seq: u64, fsync: metrics::Histogram) -> Result<LogWriter> {
        let (out, path) = create_segment(dir, next_seq)?;
        let (tx, rx) = mpsc::channel();
        let (durable_tx, durable) = watch::channel(Durable::Upto(next_seq - 1));
        let dir = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("yuebing-oplog".into())
            .spawn(move || run(dir, out, path, rx, durable_tx, &fsync))
            .map_err(|e| io_err(Path::new("oplog thread"), e))?;
        Ok(LogWriter {
            tx: Mutex::new(Some(tx)),
            durable,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn sender(&self) -> MutexGuard<'_, Option<mpsc::Sender<Cmd>>> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues entries (in order); they become durable in the background. Nothing is queued
    /// once the log is closed.
    pub(crate) fn append(&self, entries: Vec<LogEntry>) {
        if let Some(tx) = &*self.sender() {
            let _ = tx.send(Cmd::Append(entries));
        }
    }

    /// Starts a new segment at `next_seq` after what is queued.
    pub(crate) fn rotate(&self, next_seq: u64) {
        if let Some(tx) = &*self.sender() {
            let _ = tx.send(Cmd::Rotate(next_seq));
        }
    }

    /// Writes what is queued, stops the writer thread and waits for it (blocking: its last
    /// `fdatasync`). Once it returns, this log touches no file again. Repeating it is harmless.
    pub(crate) fn close(&self) {
        self.sender().take();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// Waits until every entry up to `seq` is durable.
    pub(crate) async fn wait(&self, seq: u64) -> Result<()> {
        let mut rx = self.durable.clone();
        let state = rx
            .wait_for(|d| {
                matches!(d, Durable::Upto(s) if *s >= seq) || matches!(d, Durable::Failed(_))
            })
            .await
            .map_err(|_| Error::Internal {
                reason: "the operation-log writer stopped".into(),
            })?;
        match &*state {
            Durable::Upto(_) => Ok(()),
            Durable::Failed(reason) => Err(Error::Io {
                path: "operation log".into(),
                reason: reason.clone(),
            }),
        }
    }

    /// The durable position now.
    pub(crate) fn durable(&self) -> Durable {
        self.durable.borrow().clone()
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.close();
    }
}

fn run(
    dir: PathBuf,
    mut out: BufWriter<File>,
    mut path: PathBuf,
    rx: mpsc::Receiver<Cmd>,
    durable: watch::Sender<Durable>,
    fsync: &metrics::Histogram,
) {
    let mut last = match &*durable.borrow() {
        Durable::Upto(s) => *s,
        Durable::Failed(_) => return,
    };
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let result = (|| -> Result<()> {
            for cmd in batch {
                match cmd {
                    Cmd::Append(entries) => {
                        for e in &entries {
                            write_frame(&mut out, e).map_err(|err| io_err(&path, err))?;
                            last = e.seq;
                        }
                    }
                    Cmd::Rotate(next) => {
                        out.flush().map_err(|e| io_err(&path, e))?;
                        out.get_ref().sync_data().map_err(|e| io_err(&path, e))?;
                        (out, path) = create_segment(&dir, next)?;
                    }
                }
            }
            let started = std::time::Instant::now();
            let synced = out
                .flush()
                .and_then(|()| out.get_ref().sync_data())
                .map_err(|e| io_err(&path, e));
            fsync.record(started.elapsed().as_secs_f64());
            synced
        })();
        match result {
            Ok(()) => {
                durable.send_replace(Durable::Upto(last));
            }
            Err(e) => {
                tracing::error!(error = %e, "operation log failed; mutations stop");
                durable.send_replace(Durable::Failed(e.to_string()));
                return;
            }
        }
    }
}
