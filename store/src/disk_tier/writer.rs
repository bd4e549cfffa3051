//! The disk tier's writer: one thread appends records to the head segment, makes each group
//! durable with one `fdatasync` (group commit), then indexes it and answers its writers. It
//! also rotates segments and compacts the emptiest ones, so that removed objects give their
//! space back.

use std::fs::{File, OpenOptions};
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
    pub(crate) done: oneshot::Sender<Result<()>>,
}

/// Values up to this size are copied into the group's buffer and written with it; larger ones
/// are written from where they are.
const GATHER_MAX: usize = 256 << 10;
/// A group holds at most this many bytes (or one larger value).
const GROUP_BYTES: usize = 16 << 20;
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
/// writing what `gathered` holds for it and making it durable.
fn make_room(
    shared: &Shared,
    head: &mut HeadSegment,
    gathered: &mut Vec<u8>,
    need: u64,
) -> Result<()> {
    if head.len > HEADER_LEN as u64 && head.len.saturating_add(need) > shared.segment_bytes {
        let path = shared.dir.join(segment::name(head.n));
        flush(head, gathered)
            .and_then(|()| head.file.sync_data())
            .map_err(|e| io_err(&path, e))?;
        *head = create(shared, head.n + 1)?;
    }
    Ok(())
}

/// Appends `group`, makes it durable, indexes it, and answers each writer.
fn write_group(shared: &Shared, head: &mut HeadSegment, group: Vec<Job>) {
    let mut placed: Vec<(Job, Result<Location>)> = Vec::with_capacity(group.len());
    let mut gathered: Vec<u8> = Vec::new();
    for job in group {
        let at = append(shared, head, &job, &mut gathered);
        placed.push((job, at));
    }
    let path = shared.dir.join(segment::name(head.n));
    let synced = flush(head, &mut gathered)
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
/// head if needed, and gathers the record (written with the group) or, for a large value,
/// writes it directly.
fn append(
    shared: &Shared,
    head: &mut HeadSegment,
    job: &Job,
    gathered: &mut Vec<u8>,
) -> Result<Location> {
    let key = job.key.as_bytes();
    let value = &job.value[..];
    let record_len = (HEAD_LEN + key.len() + value.len()) as u64;
    if !shared.fits(record_len) {
        // Compaction appends what it keeps to the head: what is gathered goes first.
        flush(head, gathered).map_err(|e| io_err(&shared.dir, e))?;
        compact(shared, head, Some(record_len))?;
        if !shared.fits(record_len) {
            let used = shared.lock().index.total_bytes();
            return Err(Error::DiskTierFull {
                need: record_len,
                free: shared.capacity.saturating_sub(used),
            });
        }
    }
    make_room(shared, head, gathered, record_len)?;
    let h = Head::new(key, value.len() as u64, job.tag, crc32fast::hash(value));
    let offset = head.len;
    if value.len() <= GATHER_MAX {
        gathered.extend_from_slice(&h.encode());
        gathered.extend_from_slice(key);
        gathered.extend_from_slice(value);
    } else {
        let path = shared.dir.join(segment::name(head.n));
        let mut head_and_key = h.encode().to_vec();
        head_and_key.extend_from_slice(key);
        flush(head, gathered)
            .and_then(|()| head.file.write_all_at(&head_and_key, offset))
            .and_then(|()| {
                let at = offset + head_and_key.len() as u64;
                head.file.write_all_at(value, at)
            })
            .map_err(|e| io_err(&path, e))?;
    }
    head.len += record_len;
    shared.lock().index.grew(head.n, record_len);
    Ok(Location {
        segment: head.n,
        offset,
        key_len: key.len() as u32,
        value_len: value.len() as u64,
        value_crc: h.value_crc,
        tag: job.tag,
    })
}

/// Writes what is gathered: the records that end the head segment.
fn flush(head: &HeadSegment, gathered: &mut Vec<u8>) -> std::io::Result<()> {
    if gathered.is_empty() {
        return Ok(());
    }
    head.file
        .write_all_at(gathered, head.len - gathered.len() as u64)?;
    gathered.clear();
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
        make_room(shared, head, &mut Vec::new(), record.len() as u64)?;
        let path = shared.dir.join(segment::name(head.n));
        head.file
            .write_all_at(&record, head.len)
            .map_err(|e| io_err(&path, e))?;
        let new = Location {
            segment: head.n,
            offset: head.len,
            ..old
        };
        head.len += record.len() as u64;
        shared.lock().index.grew(head.n, record.len() as u64);
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
