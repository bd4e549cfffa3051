//! The disk tier's writer: one thread appends records to the head segment, makes each group
//! durable with one `fdatasync` (group commit), then indexes it and answers its writers. It
//! also rotates segments and compacts the emptiest ones, so that removed objects give their
//! space back.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
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
/// A segment is compacted once at most this share of its bytes is live...
const COMPACT_LIVE_SHARE: f64 = 0.5;

/// The segment records are appended to.
struct HeadSegment {
    n: u64,
    file: Arc<File>,
    len: u64,
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

/// A new, empty head segment `n` (header written and durable, the directory synced).
fn create(shared: &Shared, n: u64) -> Result<HeadSegment> {
    let path = shared.dir.join(segment::name(n));
    let file = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    let mut header = Vec::with_capacity(HEADER_LEN);
    segment::write_segment_header(&mut header).map_err(|e| io_err(&path, e))?;
    file.write_all_at(&header, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(&path, e))?;
    sync_dir(&shared.dir)?;
    let file = Arc::new(file);
    let mut state = shared.lock();
    state.files.insert(n, file.clone());
    state.index.grew(n, HEADER_LEN as u64);
    Ok(HeadSegment {
        n,
        file,
        len: HEADER_LEN as u64,
    })
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
        let path = shared.dir.join(segment::name(head.n));
        unwritten
            .write_out(&head.file)
            .and_then(|()| head.file.sync_data())
            .map_err(|e| io_err(&path, e))?;
        *head = create(shared, head.n + 1)?;
    }
    Ok(())
}

/// Appends `group`, makes it durable, indexes it, and answers each writer.
fn write_group(shared: &Shared, head: &mut HeadSegment, group: Vec<Job>) {
    let mut placed: Vec<(Job, Result<Location>)> = Vec::with_capacity(group.len());
    let mut unwritten = Unwritten::default();
    for job in group {
        let at = append(shared, head, &job, &mut unwritten);
        placed.push((job, at));
    }
    let path = shared.dir.join(segment::name(head.n));
    let synced = unwritten
        .write_out(&head.file)
        .and_then(|()| head.file.sync_data())
        .map_err(|e| io_err(&path, e));
    let failed = synced.is_err()
        || placed
            .iter()
            .any(|(_, at)| matches!(at, Err(Error::Io { .. })));
    let mut state = shared.lock();
    for (job, at) in placed {
        let answer = match (&synced, &at) {
            (Ok(()), Ok(at)) => {
                state.index.insert(job.key, *at);
                Ok(())
            }
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        let _ = job.done.send(answer);
    }
    drop(state);
    if failed {
        // What failed may have left part of a record in the head (and a failed fsync may
        // have lost pages): later records go to a fresh segment, so that a scan stopping at
        // the damage cannot lose them.
        match create(shared, head.n + 1) {
            Ok(fresh) => *head = fresh,
            Err(e) => tracing::warn!(error = %e, "the disk tier cannot start a fresh segment"),
        }
    }
    shared.forget_empty_segments(head.n);
}

/// Places one record: checks the tier's capacity (compacting if that makes room), rotates the
/// head if needed, and leaves the record to be written with its group.
fn append(
    shared: &Shared,
    head: &mut HeadSegment,
    job: &Job,
    unwritten: &mut Unwritten,
) -> Result<Location> {
    let key = job.key.as_bytes();
    let record_len = (HEAD_LEN + key.len() + job.value.len()) as u64;
    if !shared.fits(record_len) {
        // Compaction appends what it keeps to the head: what is placed goes first.
        unwritten
            .write_out(&head.file)
            .map_err(|e| io_err(&shared.dir, e))?;
        compact(shared, head, Some(record_len))?;
        if !shared.fits(record_len) {
            let used = shared.lock().index.total_bytes();
            return Err(Error::DiskTierFull {
                need: record_len,
                free: shared.capacity.saturating_sub(used),
            });
        }
    }
    make_room(shared, head, unwritten, record_len)?;
    let h = Head::new(key, job.value.len() as u64, job.tag, job.value_crc);
    let offset = head.len;
    unwritten.place(offset, &h, key, &job.value);
    head.len += record_len;
    shared.lock().index.grew(head.n, record_len);
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
        if value.len() > GATHER_MAX {
            self.large.push((offset, head_and_key, value.clone()));
            return;
        }
        match self.runs.last_mut() {
            Some((at, run)) if *at + run.len() as u64 == offset => {
                run.extend_from_slice(&head_and_key);
                run.extend_from_slice(value);
            }
            _ => self
                .runs
                .push((offset, [&head_and_key[..], value].concat())),
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
    for (key, old) in live {
        let record = match super::read_record(&file, &victim_path, &key, &old) {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, key, "dropping a damaged record while compacting");
                shared.lock().index.remove(&key, Some(old));
                continue;
            }
        };
        let len = (record.head.len() + record.value.len()) as u64;
        make_room(shared, head, &mut Unwritten::default(), len)?;
        let path = shared.dir.join(segment::name(head.n));
        let value_at = head.len + record.head.len() as u64;
        head.file
            .write_all_at(&record.head, head.len)
            .and_then(|()| head.file.write_all_at(&record.value, value_at))
            .map_err(|e| io_err(&path, e))?;
        let new = Location {
            segment: head.n,
            offset: head.len,
            ..old
        };
        head.len += len;
        shared.lock().index.grew(head.n, len);
        moved.push((key, old, new));
    }
    let path = shared.dir.join(segment::name(head.n));
    head.file.sync_data().map_err(|e| io_err(&path, e))?;
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
