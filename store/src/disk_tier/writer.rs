//! The disk tier's writer: one thread appends records to the head segment, makes each group
//! durable with one `fdatasync` (group commit), then indexes it and answers its writers. It
//! also rotates segments and compacts the emptiest ones, so that removed objects give their
//! space back.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::index::Location;
use super::record::{Head, HEAD_LEN};
use super::segment;
use super::{Shared, Tag};
use crate::error::{Error, Result};
use crate::files::{io_err, sync_dir, HEADER_LEN};

/// One object to write.
pub(crate) struct Job {
    pub(crate) key: String,
    pub(crate) tag: Tag,
    pub(crate) value: Bytes,
    /// The value's checksum, computed by the caller (on its own core, not the writer's).
    pub(crate) value_crc: u32,
    pub(crate) done: oneshot::Sender<Result<()>>,
}

/// Values up to this size are copied into the group's buffer and written with it; larger ones
/// are written from where they are.
const GATHER_MAX: usize = 256 << 10;
/// Pieces from this size on have their write-back started as soon as they are written.
const START_WRITEBACK_FROM: usize = 1 << 20;
/// Threads that write a group's large records at most.
const WRITE_THREADS: usize = 4;
/// A group of fewer bytes is written by the writer thread alone.
const PARALLEL_FROM: usize = 2 << 20;
/// A group holds at most this many bytes (or one larger value): large values written by
/// several writers at once share one `fdatasync` (`yuebing bench disk`: with groups of
/// 16 MiB, 16 MiB values were written at 0.58x of concurrent pwrite + fdatasync).
const GROUP_BYTES: usize = 64 << 20;
/// Compaction writes what it copies once this much is gathered.
const COPY_BYTES: usize = 16 << 20;
/// A segment is compacted once at most this share of its bytes is live...
const COMPACT_LIVE_SHARE: f64 = 0.5;

/// The segment records are appended to.
struct HeadSegment {
    n: u64,
    file: Arc<File>,
    len: u64,
    /// A write or sync of it failed: it may hold a hole, or pages the kernel dropped, so
    /// nothing more is acknowledged from it (a scan stops at the first damage).
    tainted: bool,
}

impl HeadSegment {
    fn path(&self, shared: &Shared) -> PathBuf {
        shared.dir.join(segment::name(self.n))
    }

    /// Writes what is `unwritten` in this segment and makes all of it durable; a failure
    /// taints it.
    fn write_out_and_sync(&mut self, shared: &Shared, unwritten: &mut Unwritten) -> Result<()> {
        let done = unwritten
            .write_out(&self.file)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_err(&self.path(shared), e));
        self.tainted |= done.is_err();
        done
    }
}

/// Runs the writer until every sender is gone, then makes what it wrote durable and returns.
pub(crate) fn run(shared: Arc<Shared>, first: u64, jobs: mpsc::Receiver<Job>) {
    let mut head = match create(&shared, first) {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "the disk tier cannot create a segment; writes fail");
            for job in jobs {
                let _ = job.done.send(Err(e.clone()));
            }
            return;
        }
    };
    while let Ok(job) = jobs.recv() {
        let mut group = vec![job];
        let mut bytes = group[0].value.len();
        while bytes < GROUP_BYTES {
            let Ok(job) = jobs.try_recv() else { break };
            bytes += job.value.len();
            group.push(job);
        }
        write_group(&shared, &mut head, group);
        if let Err(e) = compact(&shared, &mut head, None) {
            tracing::warn!(error = %e, "disk tier compaction failed");
        }
    }
}

/// A new, empty head segment `n` (header written and durable, the directory synced); a file
/// left by a failed attempt is removed.
fn create(shared: &Shared, n: u64) -> Result<HeadSegment> {
    let path = shared.dir.join(segment::name(n));
    let open = || {
        OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
    };
    // Segments are numbered above every one found at opening, so a file already there was
    // left by a create of this writer that failed: it holds nothing acknowledged.
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&path).and_then(|()| open())
        }
        opened => opened,
    }
    .map_err(|e| io_err(&path, e))?;
    let mut header = Vec::with_capacity(HEADER_LEN);
    segment::write_segment_header(&mut header).map_err(|e| io_err(&path, e))?;
    let made = file
        .write_all_at(&header, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(&path, e))
        .and_then(|()| sync_dir(&shared.dir));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    let file = Arc::new(file);
    let mut state = shared.lock();
    state.files.insert(n, file.clone());
    state.index.grew(n, HEADER_LEN as u64);
    Ok(HeadSegment {
        n,
        file,
        len: HEADER_LEN as u64,
        tainted: false,
    })
}

/// Replaces the head with a fresh segment (after the one it follows was made durable, or
/// because it is tainted).
fn next_segment(shared: &Shared, head: &mut HeadSegment) -> Result<()> {
    let n = head.n.checked_add(1).ok_or_else(|| Error::Internal {
        reason: "the disk tier ran out of segment numbers".into(),
    })?;
    *head = create(shared, n)?;
    Ok(())
}

/// Starts the next head segment when `need` more bytes would not fit the current one, after
/// writing what is `unwritten` in it and making it durable.
fn make_room(
    shared: &Shared,
    head: &mut HeadSegment,
    unwritten: &mut Unwritten,
    need: u64,
) -> Result<()> {
    if head.len > HEADER_LEN as u64 && head.len.saturating_add(need) > shared.segment_bytes {
        head.write_out_and_sync(shared, unwritten)?;
        next_segment(shared, head)?;
    }
    Ok(())
}

/// Bytes of `job`'s record.
fn record_len(job: &Job) -> u64 {
    (HEAD_LEN + job.key.len() + job.value.len()) as u64
}

/// Appends `group`, makes it durable, indexes it, and answers each writer.
///
/// Room for the whole group is made (by compacting) before anything is placed: compaction
/// appends to the head and re-indexes, and must never run between placing a record and
/// indexing it (it would count the placed record as dead, or copy an older record of its key
/// after it). If any write or sync fails, no job of the group is acknowledged, and the next
/// group starts a fresh segment.
fn write_group(shared: &Shared, head: &mut HeadSegment, group: Vec<Job>) {
    let mut failed: Option<Error> = None;
    if head.tainted {
        if let Err(e) = next_segment(shared, head) {
            failed = Some(e);
        }
    }
    let need: u64 = group.iter().map(record_len).sum();
    if failed.is_none() && !shared.fits(need) {
        if let Err(e) = compact(shared, head, Some(need)) {
            tracing::warn!(error = %e, "disk tier compaction failed");
            if head.tainted {
                failed = next_segment(shared, head).err();
            }
        }
    }
    let mut placed: Vec<(Job, Result<Location>)> = Vec::with_capacity(group.len());
    let mut unwritten = Unwritten::default();
    for job in group {
        let at = match &failed {
            Some(e) => Err(e.clone()),
            None => place(shared, head, &job, &mut unwritten),
        };
        if let Err(e @ Error::Io { .. }) = &at {
            failed = Some(e.clone());
        }
        placed.push((job, at));
    }
    if failed.is_none() {
        failed = head.write_out_and_sync(shared, &mut unwritten).err();
    }
    let mut state = shared.lock();
    for (job, at) in placed {
        let answer = match (&failed, at) {
            (None, Ok(at)) => {
                state.index.insert(job.key, at);
                Ok(())
            }
            (Some(e), _) => Err(e.clone()),
            (None, Err(e)) => Err(e),
        };
        let _ = job.done.send(answer);
    }
    drop(state);
    shared.forget_empty_segments(head.n);
}

/// Places one record: checks the tier's capacity, rotates the head if needed, and leaves the
/// record to be written with its group.
fn place(
    shared: &Shared,
    head: &mut HeadSegment,
    job: &Job,
    unwritten: &mut Unwritten,
) -> Result<Location> {
    let len = record_len(job);
    if !shared.fits(len) {
        let used = shared.lock().index.total_bytes();
        return Err(Error::DiskTierFull {
            need: len,
            free: shared.capacity.saturating_sub(used),
        });
    }
    make_room(shared, head, unwritten, len)?;
    let key = job.key.as_bytes();
    let h = Head::new(key, job.value.len() as u64, job.tag, job.value_crc);
    let offset = head.len;
    unwritten.place(offset, &h, key, &job.value);
    head.len += len;
    shared.lock().index.grew(head.n, len);
    Ok(Location {
        segment: head.n,
        offset,
        key_len: key.len() as u32,
        value_len: job.value.len() as u64,
        value_crc: job.value_crc,
        tag: job.tag,
    })
}

/// Bytes to write and where.
type Piece<'a> = (u64, &'a [u8]);

/// Records placed in the head segment and not written yet: written together before the
/// group's `fdatasync`, large ones by several threads at once, so that copying them into the
/// page cache uses every core (one thread copying reached 0.6-0.7x of concurrent
/// `pwrite`s at 1 and 16 MiB in `yuebing bench disk`).
#[derive(Default)]
struct Unwritten {
    /// Small records, gathered into runs of adjacent bytes: each run's offset and bytes.
    runs: Vec<(u64, Vec<u8>)>,
    /// Large records: each one's offset, its head and key, and its value.
    large: Vec<(u64, Vec<u8>, Bytes)>,
}

impl Unwritten {
    /// Places the record of `head`, `key` and `value` at `offset`.
    fn place(&mut self, offset: u64, head: &Head, key: &[u8], value: &Bytes) {
        let mut head_and_key = head.encode().to_vec();
        head_and_key.extend_from_slice(key);
        self.put(offset, head_and_key, value.clone());
    }

    /// Places a record read back (by compaction) at `offset`.
    fn place_record(&mut self, offset: u64, record: super::Record) {
        self.put(offset, record.head, Bytes::from(record.value));
    }

    /// Bytes placed and not written yet.
    fn bytes(&self) -> usize {
        let runs: usize = self.runs.iter().map(|(_, r)| r.len()).sum();
        let large: usize = self.large.iter().map(|(_, h, v)| h.len() + v.len()).sum();
        runs + large
    }

    fn put(&mut self, offset: u64, head_and_key: Vec<u8>, value: Bytes) {
        if value.len() > GATHER_MAX {
            self.large.push((offset, head_and_key, value));
            return;
        }
        match self.runs.last_mut() {
            Some((at, run)) if *at + run.len() as u64 == offset => {
                run.extend_from_slice(&head_and_key);
                run.extend_from_slice(&value);
            }
            _ => self
                .runs
                .push((offset, [&head_and_key[..], &value[..]].concat())),
        }
    }

    /// Writes everything placed to `file` and forgets it.
    fn write_out(&mut self, file: &File) -> std::io::Result<()> {
        let runs = std::mem::take(&mut self.runs);
        let large = std::mem::take(&mut self.large);
        let mut pieces: Vec<Piece<'_>> = runs.iter().map(|(at, b)| (*at, &b[..])).collect();
        for (at, head_and_key, value) in &large {
            pieces.push((*at, head_and_key));
            pieces.push((*at + head_and_key.len() as u64, value));
        }
        let bytes: usize = pieces.iter().map(|(_, b)| b.len()).sum();
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(WRITE_THREADS)
            .min(large.len());
        if threads < 2 || bytes < PARALLEL_FROM {
            return pieces
                .iter()
                .try_for_each(|&(at, b)| write_piece(file, at, b));
        }
        // Dealt out largest first, each to the thread with the fewest bytes so far.
        pieces.sort_by_key(|(_, b)| std::cmp::Reverse(b.len()));
        // Each thread's bytes and pieces.
        let mut shares: Vec<(usize, Vec<Piece<'_>>)> = vec![(0, Vec::new()); threads];
        for piece in pieces {
            let least = shares
                .iter_mut()
                .min_by_key(|(n, _)| *n)
                .expect("threads >= 2");
            least.0 += piece.1.len();
            least.1.push(piece);
        }
        std::thread::scope(|scope| {
            let writers: Vec<_> = shares
                .iter()
                .map(|(_, share)| {
                    scope.spawn(move || {
                        share
                            .iter()
                            .try_for_each(|&(at, b)| write_piece(file, at, b))
                    })
                })
                .collect();
            writers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(std::io::Error::other("a disk tier write thread panicked"))
                })
            })
        })
    }
}

/// Writes `bytes` at `at` in `file`; a large piece's write-back to the device is started at
/// once (`sync_file_range`), so that the device works while the next piece is copied and the
/// group's `fdatasync` waits only for what is left.
fn write_piece(file: &File, at: u64, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all_at(bytes, at)?;
    if bytes.len() >= START_WRITEBACK_FROM {
        let (Ok(offset), Ok(len)) = (i64::try_from(at), i64::try_from(bytes.len())) else {
            return Ok(());
        };
        // SAFETY: sync_file_range reads no memory of ours; it takes a descriptor that `file`
        // keeps open for the call, and plain integers. Its outcome is only a hint: the
        // group's fdatasync is what makes the bytes durable.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    Ok(())
}

/// Compacts segments other than the head: those at most half live once the tier's dead bytes
/// add up to a segment, or, when a write of `need` bytes does not fit, any with dead bytes,
/// emptiest first, until it fits. Live records are copied to the head, made durable,
/// re-indexed (unless removed or replaced meanwhile), and the old file is deleted.
fn compact(shared: &Shared, head: &mut HeadSegment, need: Option<u64>) -> Result<()> {
    // Copies go to the head: never to one where a write or sync failed.
    if head.tainted {
        next_segment(shared, head)?;
    }
    loop {
        let victim = {
            let state = shared.lock();
            let ix = &state.index;
            match need {
                Some(need) => {
                    let short =
                        (ix.total_bytes().saturating_add(need)).saturating_sub(shared.capacity);
                    // Copying is only worth it if it can make the room.
                    if short == 0 || ix.reclaimable(head.n) < short {
                        return Ok(());
                    }
                    ix.emptiest(head.n, 1.0)
                }
                None if ix.reclaimable(head.n) >= shared.segment_bytes => {
                    ix.emptiest(head.n, COMPACT_LIVE_SHARE)
                }
                None => None,
            }
        };
        let Some(victim) = victim else { return Ok(()) };
        compact_one(shared, head, victim)?;
    }
}

fn compact_one(shared: &Shared, head: &mut HeadSegment, victim: u64) -> Result<()> {
    let (live, file) = {
        let state = shared.lock();
        (
            state.index.in_segment(victim),
            state.files.get(&victim).cloned(),
        )
    };
    let Some(file) = file else {
        shared.lock().index.drop_segment(victim);
        return Ok(());
    };
    let victim_path = shared.dir.join(segment::name(victim));
    let mut moved = Vec::with_capacity(live.len());
    let mut copies = Unwritten::default();
    for (key, old) in live {
        let record = match super::read_record(&file, &victim_path, &key, &old) {
            Ok(record) => record,
            Err(e @ Error::Corrupt { .. }) => {
                tracing::warn!(error = %e, key, "dropping a damaged record while compacting");
                shared.lock().index.remove(&key, Some(old));
                continue;
            }
            // Anything else (a failed read) leaves the segment as it is.
            Err(e) => return Err(e),
        };
        let len = (record.head.len() + record.value.len()) as u64;
        make_room(shared, head, &mut copies, len)?;
        let new = Location {
            segment: head.n,
            offset: head.len,
            ..old
        };
        copies.place_record(head.len, record);
        head.len += len;
        shared.lock().index.grew(head.n, len);
        moved.push((key, old, new));
        // What is copied is written as it goes (and synced once at the end, or when the head
        // rotates), so a segment's live records are never all in memory at once.
        if copies.bytes() >= COPY_BYTES {
            if let Err(e) = copies.write_out(&head.file) {
                head.tainted = true;
                return Err(io_err(&head.path(shared), e));
            }
        }
    }
    head.write_out_and_sync(shared, &mut copies)?;
    let mut state = shared.lock();
    for (key, old, new) in moved {
        // Removed or replaced while it was copied: the copy is dead.
        if state.index.get(&key) == Some(old) {
            state.index.insert(key, new);
        }
    }
    drop(state);
    shared.forget_empty_segments(head.n);
    Ok(())
}
