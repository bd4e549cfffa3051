//! A node's disk tier: objects kept in files on local disk (an SSD), the layer under the
//! memory replicas.
//!
//! # On disk
//! ```text
//! <dir>/LOCK                         held (flock) by the process using the tier
//! <dir>/segment-<n>.ydt              a header, then records appended one after another
//! ```
//! A record is a checksummed head, the key and the value ([`record`]). Records are only ever
//! appended, to the newest segment (the head), by one writer thread that makes each group of
//! writes durable with one `fdatasync` before any of them is readable or acknowledged: an
//! acknowledged write survives a crash, and one not acknowledged may be lost but is never read
//! back torn. A removed or replaced object's record is dead; segments whose records are mostly
//! dead are compacted (their live records copied to the head) and deleted, so space comes
//! back.
//!
//! Why segments and not a file per object: the tier holds many small objects (KV-cache blocks
//! of tens of KiB), and a file per object costs an inode, an open and two fsyncs (file and
//! directory) per object, where a segment pays one `fdatasync` per group of objects and writes
//! sequentially, which flash handles best.
//!
//! # Opening
//! [`DiskTier::open`] scans every segment and checks every record (head and value checksums).
//! A scan stops at the first record cut short or damaged: in the newest segment that is
//! taken for a crash mid-append (a write never acknowledged; damage there cannot be told
//! from one), elsewhere for damage that loses the records after it in that segment (a
//! record's length is only known from an intact head); both are reported in [`Recovery`].
//! Nothing is cut: writing goes on in a fresh segment. A segment is deleted once none of its
//! intact records is live (at opening too), with whatever followed its damage. Each read
//! checks the value's checksum again, so bytes damaged later are never served.
//!
//! The writer never acknowledges a write from a segment where a write or sync failed (a hole
//! or dropped pages there would stop a later scan): after a failure, the whole group fails
//! and the next one starts a fresh segment.
//!
//! Removals are not written down: after a restart the tier holds every record still on disk,
//! and its owner decides (with the master) which of them are still objects, by their [`Tag`].
//!
//! # Layout
//! - [`record`]: a record's bytes, checked before they are trusted.
//! - `segment`: segment files, their names and header, and the scan at opening.
//! - `index`: which record holds each object, and how live each segment is.
//! - `writer`: the thread that appends, syncs, rotates and compacts.

mod index;
pub(crate) mod record;
mod segment;
mod writer;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use self::index::{Index, Location};
use self::record::{Checked, Head, HEAD_LEN, MAX_KEY_LEN};
use crate::error::{Error, Result};
use crate::files::{io_err, lock_dir, sync_dir, HEADER_LEN};

/// What the owner of a disk replica calls it (the master's identity of the object it is a
/// copy of): stored with the record and given back after a restart, so that a record of an
/// object removed and put again is told from the new one. Opaque to the tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tag(pub [u8; 16]);

/// Where a disk tier lives and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskTierConfig {
    /// Its directory (created if missing).
    pub dir: PathBuf,
    /// Bytes its files may take in all; a write that would pass it fails with
    /// [`Error::DiskTierFull`] once compaction cannot make room. Compaction may take up to one
    /// segment more while it copies.
    pub capacity: u64,
    /// Bytes of one segment file (a larger value gets a segment of its own).
    pub segment_bytes: u64,
}

impl DiskTierConfig {
    /// A tier in `dir` of at most `capacity` bytes, in segments of 256 MiB (or an eighth of
    /// the capacity, if that is smaller, but at least 1 MiB).
    pub fn new(dir: impl Into<PathBuf>, capacity: u64) -> Self {
        DiskTierConfig {
            dir: dir.into(),
            capacity,
            segment_bytes: (capacity / 8).clamp(1 << 20, 256 << 20),
        }
    }
}

/// An object a tier holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its key.
    pub key: String,
    /// What its owner calls it.
    pub tag: Tag,
    /// Bytes of its value.
    pub len: u64,
}

/// What opening a tier found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The objects it holds, checksums verified.
    pub held: Vec<Held>,
    /// Bytes after the last intact record of the newest segment: a write that never finished
    /// (a crash mid-append; it was never acknowledged). They stay in place, dead, until the
    /// segment is compacted.
    pub torn_bytes: u64,
    /// Damage found before the end of a segment: the file and what was found. The records
    /// after it in that file are lost.
    pub damaged: Vec<(String, String)>,
}

/// How much a tier holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes it may take.
    pub capacity: u64,
    /// Bytes its files take (dead records until compacted, and headers, included).
    pub used: u64,
    /// Bytes of the records of the objects it holds.
    pub live: u64,
    /// Objects it holds.
    pub objects: u64,
}

/// What the tier's threads and its handle share.
struct Shared {
    dir: PathBuf,
    capacity: u64,
    segment_bytes: u64,
    state: Mutex<State>,
    /// Held while the tier is open (released when the writer has stopped).
    _lock: File,
}

struct State {
    index: Index,
    /// Every segment's file, open for reading (the head's for writing too).
    files: BTreeMap<u64, Arc<File>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `len` more bytes fit the capacity.
    fn fits(&self, len: u64) -> bool {
        self.lock().index.total_bytes().saturating_add(len) <= self.capacity
    }

    /// Deletes the segments other than `head` that hold no live record.
    fn forget_empty_segments(&self, head: u64) {
        let mut state = self.lock();
        let empty: Vec<u64> = state
            .files
            .keys()
            .copied()
            .filter(|&n| n != head && state.index.fill(n).is_none_or(|f| f.live == 0))
            .collect();
        if empty.is_empty() {
            return;
        }
        for n in &empty {
            state.files.remove(n);
            state.index.drop_segment(*n);
        }
        drop(state);
        // Unlinked outside the lock (deleting a large file takes a while); readers still
        // holding a file keep reading it: an unlinked file lives on until its last
        // descriptor closes.
        for n in &empty {
            let path = self.dir.join(segment::name(*n));
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(file = %path.display(), error = %e, "cannot delete an empty disk tier segment");
            }
        }
        if let Err(e) = sync_dir(&self.dir) {
            tracing::warn!(error = %e, "cannot sync the disk tier's directory");
        }
    }
}

/// A node's disk tier (see the [module docs](self)). Share it behind an `Arc`.
pub struct DiskTier {
    shared: Arc<Shared>,
    jobs: Mutex<Option<mpsc::Sender<writer::Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    rt: Handle,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("dir", &self.shared.dir)
            .field("usage", &self.usage())
            .finish()
    }
}

impl DiskTier {
    /// Opens (creating it if needed) and locks the tier in `cfg.dir`, checks every record, and
    /// starts its writer; reads run on `rt`'s blocking pool. Blocking: it reads every segment.
    pub fn open(cfg: DiskTierConfig, rt: &Handle) -> Result<(DiskTier, Recovery)> {
        if cfg.capacity == 0 || cfg.segment_bytes <= HEADER_LEN as u64 {
            return Err(Error::InvalidParams {
                reason: format!(
                    "a disk tier needs a capacity and segments larger than {HEADER_LEN} bytes"
                ),
            });
        }
        let lock = lock_dir(&cfg.dir, "process using the disk tier")?;
        let (state, recovery, last) = recover(&cfg.dir)?;
        let first = last.checked_add(1).ok_or_else(|| Error::Corrupt {
            path: cfg.dir.display().to_string(),
            reason: "a segment file bears the highest number there is".into(),
        })?;
        let shared = Arc::new(Shared {
            dir: cfg.dir,
            capacity: cfg.capacity,
            segment_bytes: cfg.segment_bytes,
            state: Mutex::new(state),
            _lock: lock,
        });
        // Segments whose every record was replaced in a later one.
        shared.forget_empty_segments(first);
        let (tx, rx) = mpsc::channel();
        let for_writer = shared.clone();
        let writer = std::thread::Builder::new()
            .name("yuebing-disk-tier".into())
            .spawn(move || writer::run(for_writer, first, rx))
            .map_err(|e| io_err(Path::new("disk tier writer thread"), e))?;
        Ok((
            DiskTier {
                shared,
                jobs: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
                rt: rt.clone(),
            },
            recovery,
        ))
    }

    /// Writes `value` as `key`'s record, tagged `tag`; returns once it is durable and readable
    /// (a newer write of `key` replaces an older one).
    pub async fn write(&self, key: &str, tag: Tag, value: Bytes) -> Result<()> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(Error::InvalidParams {
                reason: format!("a disk tier key has 1 to {MAX_KEY_LEN} bytes"),
            });
        }
        let (done, answer) = oneshot::channel();
        let job = writer::Job {
            key: key.to_string(),
            tag,
            value_crc: crc32fast::hash(&value),
            value,
            done,
        };
        let closed = || Error::Internal {
            reason: "the disk tier is closed".into(),
        };
        {
            let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.as_ref()
                .ok_or_else(closed)?
                .send(job)
                .map_err(|_| closed())?;
        }
        answer.await.map_err(|_| closed())?
    }

    /// `key`'s value and tag, read and checked (its checksums and key); a record found damaged
    /// is forgotten and answered [`Error::Corrupt`].
    pub async fn read(&self, key: &str) -> Result<(Tag, Vec<u8>)> {
        let (at, file) = {
            let state = self.shared.lock();
            let at = state.index.get(key).ok_or_else(|| Error::ObjectNotFound {
                key: key.to_string(),
            })?;
            let file = state.files.get(&at.segment).cloned();
            (at, file)
        };
        let Some(file) = file else {
            return Err(Error::Internal {
                reason: format!("disk tier segment {} has no open file", at.segment),
            });
        };
        let shared = self.shared.clone();
        let key = key.to_string();
        let read = self.rt.spawn_blocking(move || {
            let path = shared.dir.join(segment::name(at.segment));
            let record = read_record(&file, &path, &key, &at);
            if let Err(Error::Corrupt { .. }) = &record {
                shared.lock().index.remove(&key, Some(at));
            }
            record.map(|r| (at.tag, r.value))
        });
        read.await.map_err(|e| Error::Internal {
            reason: format!("a disk tier read did not finish: {e}"),
        })?
    }

    /// Forgets `key`'s record (its space comes back when its segment is compacted); whether
    /// the tier held it.
    pub fn remove(&self, key: &str) -> bool {
        let removed = self.shared.lock().index.remove(key, None).is_some();
        removed
    }

    /// The objects the tier holds.
    pub fn held(&self) -> Vec<Held> {
        held(&self.shared.lock().index)
    }

    /// How much the tier holds.
    pub fn usage(&self) -> Usage {
        let state = self.shared.lock();
        Usage {
            capacity: self.shared.capacity,
            used: state.index.total_bytes(),
            live: state.index.live_bytes(),
            objects: state.index.len() as u64,
        }
    }

    /// Stops the writer once it has written what is queued, and releases the directory.
    /// Blocking. Dropping the tier does the same without waiting.
    pub fn close(self) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

fn held(index: &Index) -> Vec<Held> {
    let mut out: Vec<Held> = index
        .objects()
        .map(|(key, at)| Held {
            key: key.clone(),
            tag: at.tag,
            len: at.value_len,
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// A record read back and checked.
pub(crate) struct Record {
    /// Its head and key.
    pub(crate) head: Vec<u8>,
    /// Its value.
    pub(crate) value: Vec<u8>,
}

/// Reads `key`'s record at `at` from `file` and checks it: the head, the key, the tag and the
/// value's checksum. The value is read into a buffer of its own (one more `pread`, no copy).
fn read_record(file: &File, path: &Path, key: &str, at: &Location) -> Result<Record> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.display().to_string(),
        reason: format!("record of {key:?} at byte {}: {reason}", at.offset),
    };
    let read = |buf: &mut [u8], offset: u64| {
        file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                corrupt("the file ends inside it".into())
            } else {
                io_err(path, e)
            }
        })
    };
    let mut head = vec![0u8; HEAD_LEN + at.key_len as usize];
    read(&mut head, at.offset)?;
    let checked = match Head::check(&head) {
        Checked::Head(checked) => checked,
        Checked::Short => return Err(corrupt("cut short".into())),
        Checked::Damaged(why) => return Err(corrupt(why.into())),
    };
    if checked.key(&head) != key.as_bytes()
        || checked.tag != at.tag
        || checked.value_len != at.value_len
    {
        return Err(corrupt("another record is there".into()));
    }
    let len = usize::try_from(at.value_len).map_err(|_| corrupt("too large".into()))?;
    let mut value = vec![0u8; len];
    read(&mut value, at.offset + head.len() as u64)?;
    if crc32fast::hash(&value) != checked.value_crc {
        return Err(corrupt("value checksum mismatch".into()));
    }
    Ok(Record { head, value })
}

/// Scans every segment of `dir` into an index. Nothing is cut: records are only appended to
/// a fresh segment after opening. Returns
/// the state, what was found, and the highest segment number (0 if none).
fn recover(dir: &Path) -> Result<(State, Recovery, u64)> {
    let mut state = State {
        index: Index::default(),
        files: BTreeMap::new(),
    };
    let mut recovery = Recovery::default();
    let segments = segment::list(dir)?;
    let last = segments.last().map_or(0, |(n, _)| *n);
    for (n, path) in segments {
        let scanned = segment::scan(n, &path)?;
        let file = File::open(&path).map_err(|e| io_err(&path, e))?;
        let len = file.metadata().map_err(|e| io_err(&path, e))?.len();
        if let Some(why) = &scanned.damage {
            tracing::warn!(file = %path.display(), reason = %why, "disk tier segment ends in damage");
            if n == last {
                recovery.torn_bytes += len.saturating_sub(scanned.good_end);
            } else {
                recovery
                    .damaged
                    .push((path.display().to_string(), why.clone()));
            }
        }
        state.index.grew(n, len);
        for (key, at) in scanned.records {
            state.index.insert(key, at);
        }
        state.files.insert(n, Arc::new(file));
    }
    recovery.held = held(&state.index);
    Ok((state, recovery, last))
}

#[cfg(test)]
mod tests;
