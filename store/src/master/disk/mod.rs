//! The master's data directory: operation-log segments and snapshots.
//!
//! ```text
//! <data-dir>/LOCK                            held (flock) by the running master
//! <data-dir>/snapshot-<seq>.ysnap            the durable state up to <seq>
//! <data-dir>/log-<first seq>.ylog            entries from <first seq> on
//! ```
//! On start the newest readable snapshot is loaded and every later log entry replayed; a torn
//! entry at the very end of the last segment (a crash mid-append: it was never acknowledged) is
//! cut off, damage anywhere else is `Corrupt`. Writing a snapshot at `S` starts a new segment at
//! `S + 1`, after which older segments and snapshots are deleted.

#[cfg(test)]
mod decode_fuzz;
pub(crate) mod frame;
mod writer;

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use self::frame::{read_frame, Frame};
use self::frame::{LOG_MAGIC, SNAPSHOT_MAGIC};
pub(crate) use self::writer::{Durable, LogWriter};
use super::log::LogEntry;
use super::snapshot::Snapshot;
use super::types::Millis;
use super::{Master, MasterConfig};
use crate::error::{Error, Result};
use crate::files::{io_err, lock_dir, numbered, read_header, sync_dir, write_header, HEADER_LEN};
use crate::master::log::FORMAT_VERSION;

/// An opened data directory (it stays locked while this value lives).
#[derive(Debug)]
pub(crate) struct DataDir {
    dir: PathBuf,
    lock: std::sync::Mutex<Option<File>>,
}

/// What opening a data directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Sequence number of the snapshot loaded (0: none).
    pub snapshot_seq: u64,
    /// Log entries replayed after it.
    pub replayed: u64,
    /// Bytes of a torn final entry that were cut off.
    pub truncated_bytes: u64,
}

/// The snapshot files of `dir`, oldest first.
pub(crate) fn snapshot_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    numbered(dir, "snapshot-", ".ysnap")
}

/// `snapshot` as a snapshot file holds it: the header, then its frames.
pub(crate) fn encode_snapshot(snapshot: &Snapshot) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    write_header(&mut buf, SNAPSHOT_MAGIC, FORMAT_VERSION)
        .and_then(|()| snapshot.write_frames(&mut buf))
        .map_err(|e| Error::Internal {
            reason: format!("encoding snapshot {}: {e}", snapshot.seq),
        })?;
    Ok(buf)
}

/// Writes `dir`'s snapshot at `seq` with `write` (which writes the encoded snapshot, streamed
/// through a buffer): a temporary file, fsync, rename, fsync of the directory. Blocking.
pub(crate) fn write_snapshot_file(
    dir: &Path,
    seq: u64,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<PathBuf> {
    let name = format!("snapshot-{seq:020}.ysnap");
    let tmp = dir.join(format!("{name}.tmp"));
    let fin = dir.join(&name);
    let file = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write(&mut w)
        .and_then(|()| w.flush())
        .and_then(|()| w.get_ref().sync_all())
        .map_err(|e| io_err(&tmp, e))?;
    fs::rename(&tmp, &fin).map_err(|e| io_err(&fin, e))?;
    sync_dir(dir)?;
    Ok(fin)
}

/// The newest readable snapshot in `dir` (unreadable ones are skipped with a warning; one of
/// another format version is an error).
pub(crate) fn load_newest_snapshot(dir: &Path) -> Result<Option<Snapshot>> {
    for (seq, path) in numbered(dir, "snapshot-", ".ysnap")?.into_iter().rev() {
        let shown = path.display().to_string();
        let file = File::open(&path).map_err(|e| io_err(&path, e))?;
        let mut r = BufReader::new(file);
        let loaded = read_header(&mut r, SNAPSHOT_MAGIC, FORMAT_VERSION, &shown).and_then(|full| {
            if !full {
                return Err(Error::Corrupt {
                    path: shown.clone(),
                    reason: "empty".into(),
                });
            }
            match Snapshot::read_frames(&mut r).map_err(|e| io_err(&path, e))? {
                Frame::Value(s, _) if s.seq == seq => Ok(s),
                Frame::Value(s, _) => Err(Error::Corrupt {
                    path: shown.clone(),
                    reason: format!("holds seq {} under the name of {seq}", s.seq),
                }),
                Frame::End => Err(Error::Corrupt {
                    path: shown.clone(),
                    reason: "no state".into(),
                }),
                Frame::Torn(why) => Err(Error::Corrupt {
                    path: shown.clone(),
                    reason: why,
                }),
            }
        });
        match loaded {
            Ok(s) => return Ok(Some(s)),
            Err(e @ Error::InvalidVersion { .. }) => return Err(e),
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable snapshot"),
        }
    }
    Ok(None)
}

impl DataDir {
    /// Opens (creating it if needed) and locks `dir`, rebuilds the master from it at `now`,
    /// and starts the log writer after the last entry (timing its fsyncs in `fsync`).
    pub(crate) fn open(
        dir: &Path,
        cfg: MasterConfig,
        now: Millis,
        fsync: metrics::Histogram,
    ) -> Result<(DataDir, Master, LogWriter, Recovery)> {
        let lock = lock_dir(dir, "master")?;
        let data = DataDir {
            dir: dir.to_path_buf(),
            lock: std::sync::Mutex::new(Some(lock)),
        };
        let mut recovery = Recovery::default();
        let snapshot = data.load_snapshot()?;
        recovery.snapshot_seq = snapshot.as_ref().map_or(0, |s| s.seq);
        let (entries, truncated) = data.read_log()?;
        recovery.truncated_bytes = truncated;
        recovery.replayed = entries
            .iter()
            .filter(|e| e.seq > recovery.snapshot_seq)
            .count() as u64;
        let master = Master::restore(cfg, true, snapshot, entries, now)?;
        let writer = LogWriter::start(dir, master.last_seq() + 1, fsync)?;
        Ok((data, master, writer, recovery))
    }

    /// Releases the directory lock (after the master stopped writing), so another master may
    /// open it.
    pub(crate) fn release(&self) {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn load_snapshot(&self) -> Result<Option<Snapshot>> {
        load_newest_snapshot(&self.dir)
    }

    /// Every entry of every segment, in order; a torn tail of the last segment is cut off.
    fn read_log(&self) -> Result<(Vec<LogEntry>, u64)> {
        let segments = numbered(&self.dir, "log-", ".ylog")?;
        let mut entries = Vec::new();
        let mut truncated = 0;
        let count = segments.len();
        for (i, (_, path)) in segments.into_iter().enumerate() {
            let shown = path.display().to_string();
            let file = File::open(&path).map_err(|e| io_err(&path, e))?;
            let total = file.metadata().map_err(|e| io_err(&path, e))?.len();
            let mut r = BufReader::new(file);
            if !read_header(&mut r, LOG_MAGIC, FORMAT_VERSION, &shown)? {
                continue;
            }
            let mut good = HEADER_LEN as u64;
            loop {
                match read_frame::<LogEntry>(&mut r).map_err(|e| io_err(&path, e))? {
                    Frame::Value(e, n) => {
                        entries.push(e);
                        good += n as u64;
                    }
                    Frame::End => break,
                    Frame::Torn(why) if i + 1 == count => {
                        tracing::warn!(file = %shown, offset = good, reason = %why, "cutting a torn log tail");
                        let f = OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .map_err(|e| io_err(&path, e))?;
                        f.set_len(good).map_err(|e| io_err(&path, e))?;
                        f.sync_all().map_err(|e| io_err(&path, e))?;
                        truncated = total - good;
                        break;
                    }
                    Frame::Torn(why) => {
                        return Err(Error::Corrupt {
                            path: shown,
                            reason: format!("at offset {good}: {why}"),
                        })
                    }
                }
            }
        }
        Ok((entries, truncated))
    }

    /// Writes `snapshot` durably (temporary file, fsync, rename), then deletes the segments and
    /// snapshots it makes unnecessary. Blocking: run it off the async runtime.
    pub(crate) fn write_snapshot(&self, snapshot: &Snapshot) -> Result<()> {
        write_snapshot_file(&self.dir, snapshot.seq, |w| {
            write_header(w, SNAPSHOT_MAGIC, FORMAT_VERSION)?;
            snapshot.write_frames(w)
        })?;
        for (seq, path) in numbered(&self.dir, "snapshot-", ".ysnap")? {
            if seq < snapshot.seq {
                let _ = fs::remove_file(path);
            }
        }
        for (first, path) in numbered(&self.dir, "log-", ".ylog")? {
            if first <= snapshot.seq {
                let _ = fs::remove_file(path);
            }
        }
        sync_dir(&self.dir)
    }
}
