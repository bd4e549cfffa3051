//! Bootstrapping a standby from the leader's snapshot (issue 16, item 5). Once the leader has
//! truncated the replicated log, a new standby (or one that fell behind the truncation point)
//! cannot rebuild its state from the log alone: it fetches the leader's newest snapshot over
//! rpc, in chunks (a snapshot may be far larger than one rpc frame), and tails the log after it.
//!
//! - [`Offered`]: an encoded snapshot a master offers, taken at a sequence number the log has
//!   made durable (so it is a prefix of the log that no failover takes back).
//! - [`SnapshotChunk`]: one piece of it on the wire.
//! - [`Offered::chunk`]: the server side; [`fetch`]: the client side, which checks that every
//!   chunk belongs to the same snapshot, that they join up, and the frame's checksum.
//!
//! The encoding is the snapshot file's (a header with magic and format version, then one
//! frame `len | crc32 | bincode`), so damage in transit is detected like damage on disk.

use std::io::Cursor;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::files::read_header;
use crate::master::disk::encode_snapshot;
use crate::master::disk::frame::{Frame, SNAPSHOT_MAGIC};
use crate::master::log::FORMAT_VERSION;
use crate::master::{MasterClient, Snapshot};

/// Largest chunk a server sends, whatever is asked (well under the rpc's default frame).
pub const MAX_CHUNK: u64 = 4 << 20;

/// A snapshot a master offers to standbys, encoded once.
#[derive(Debug, Clone)]
pub struct Offered {
    /// The last log entry it includes.
    pub seq: u64,
    /// Its encoding (see the module docs).
    pub bytes: Bytes,
}

/// One piece of an offered snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The snapshot's sequence number.
    pub seq: u64,
    /// Its whole encoded length.
    pub total: u64,
    /// Where this piece starts.
    pub offset: u64,
    /// The piece.
    pub bytes: Bytes,
}

impl Offered {
    /// Encodes `snapshot` to offer it.
    pub fn encode(snapshot: &Snapshot) -> Result<Offered> {
        Ok(Offered {
            seq: snapshot.seq,
            bytes: Bytes::from(encode_snapshot(snapshot)?),
        })
    }

    /// The piece of at most `max_len` bytes (capped at [`MAX_CHUNK`]) from `offset`, if `seq`
    /// is this snapshot's (0: whichever it is). A `seq` that is not this one, or an offset
    /// past the end, is `InvalidParams`: the caller starts again from the snapshot now offered.
    pub fn chunk(&self, seq: u64, offset: u64, max_len: u64) -> Result<SnapshotChunk> {
        if seq != 0 && seq != self.seq {
            return Err(Error::params(format!(
                "snapshot {seq} {REPLACED} (the newest is {}); fetch again",
                self.seq
            )));
        }
        let total = self.bytes.len() as u64;
        if offset > total {
            return Err(Error::params(format!(
                "offset {offset} is past the end of snapshot {} ({total} bytes)",
                self.seq
            )));
        }
        let len = max_len.clamp(1, MAX_CHUNK).min(total - offset);
        // Both fit in usize: offset + len <= total, the length of a slice.
        let (start, end) = (offset as usize, (offset + len) as usize);
        Ok(SnapshotChunk {
            seq: self.seq,
            total,
            offset,
            bytes: self.bytes.slice(start..end),
        })
    }
}

/// Decodes an encoded snapshot (see the module docs); damage is `Corrupt`, another format
/// version `InvalidVersion`.
pub fn decode(bytes: &[u8], what: &str) -> Result<Snapshot> {
    let mut r = Cursor::new(bytes);
    if !read_header(&mut r, SNAPSHOT_MAGIC, FORMAT_VERSION, what)? {
        return Err(corrupt(what, "shorter than its header".into()));
    }
    let snapshot = match Snapshot::read_frames(&mut r) {
        Ok(Frame::Value(s, _)) => s,
        Ok(Frame::End) => return Err(corrupt(what, "no state".into())),
        Ok(Frame::Torn(why)) => return Err(corrupt(what, why)),
        Err(e) => return Err(corrupt(what, e.to_string())),
    };
    if r.position() != bytes.len() as u64 {
        return Err(corrupt(what, "bytes after the snapshot".into()));
    }
    Ok(snapshot)
}

/// A fetched snapshot, still encoded: decode it off the async runtime (it may be large).
#[derive(Debug)]
pub struct Fetched {
    /// The sequence number its chunks named.
    pub seq: u64,
    /// Where it came from, for errors.
    pub from: String,
    /// Its encoding.
    pub bytes: Vec<u8>,
}

impl Fetched {
    /// The snapshot (blocking: checksum and decoding of the whole state). `Corrupt` when it
    /// does not decode or holds another sequence number than its chunks named.
    pub fn decode(self) -> Result<Snapshot> {
        let what = format!("snapshot {} from {}", self.seq, self.from);
        let snapshot = decode(&self.bytes, &what)?;
        if snapshot.seq != self.seq {
            return Err(corrupt(
                &what,
                format!(
                    "it holds seq {} under the name of {}",
                    snapshot.seq, self.seq
                ),
            ));
        }
        Ok(snapshot)
    }
}

/// What a chunk's error says when the snapshot it asked for was replaced by a newer offer.
const REPLACED: &str = "is no longer offered";

/// Fetches the snapshot `master` offers, `chunk` bytes per call, within `within` (each call
/// too); `progress` hears (bytes so far, total) after each chunk. A snapshot replaced while
/// being fetched is fetched again from its start (at most a few times).
pub async fn fetch(
    master: &MasterClient,
    chunk: u64,
    within: Duration,
    mut progress: impl FnMut(u64, u64),
) -> Result<Fetched> {
    let until = Instant::now() + within;
    let master = master.until(until);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match fetch_once(&master, chunk, until, &mut progress).await {
            // Replaced while fetched: the newer one is offered now.
            Err(Error::InvalidParams { reason }) if attempts < 4 && reason.contains(REPLACED) => {
                tracing::info!(reason, "the offered snapshot changed; fetching the new one");
            }
            other => return other,
        }
    }
}

async fn fetch_once(
    master: &MasterClient,
    chunk: u64,
    until: Instant,
    progress: &mut impl FnMut(u64, u64),
) -> Result<Fetched> {
    let first = master.snapshot_chunk(0, 0, chunk).await?;
    let (seq, total) = (first.seq, first.total);
    let what = format!("snapshot {seq} from {}", master.endpoint());
    usize::try_from(total).map_err(|_| corrupt(&what, "too large".into()))?;
    // Grown as chunks arrive: `total` comes from the network.
    let mut buf: Vec<u8> = Vec::with_capacity(first.bytes.len());
    let mut next = first;
    loop {
        if next.seq != seq || next.total != total || next.offset != buf.len() as u64 {
            return Err(corrupt(
                &what,
                format!(
                    "a chunk of snapshot {} ({} bytes) at {} does not continue {} bytes",
                    next.seq,
                    next.total,
                    next.offset,
                    buf.len()
                ),
            ));
        }
        if next.bytes.is_empty() && (buf.len() as u64) < total {
            return Err(corrupt(&what, "an empty chunk before the end".into()));
        }
        buf.extend_from_slice(&next.bytes);
        progress(buf.len() as u64, total);
        if buf.len() as u64 >= total {
            break;
        }
        if Instant::now() >= until {
            return Err(Error::Timeout);
        }
        next = master.snapshot_chunk(seq, buf.len() as u64, chunk).await?;
    }
    Ok(Fetched {
        seq,
        from: master.endpoint().to_string(),
        bytes: buf,
    })
}

fn corrupt(what: &str, reason: String) -> Error {
    Error::Corrupt {
        path: what.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{Master, MasterConfig};

    fn offered() -> (Snapshot, Offered) {
        let snapshot = Master::new(MasterConfig::default(), true).snapshot();
        let offered = Offered::encode(&snapshot).unwrap();
        (snapshot, offered)
    }

    #[test]
    fn chunks_join_into_the_snapshot_and_damage_is_corrupt() {
        let (snapshot, offered) = offered();
        let total = offered.bytes.len() as u64;
        let mut joined = Vec::new();
        while (joined.len() as u64) < total {
            let c = offered.chunk(offered.seq, joined.len() as u64, 7).unwrap();
            assert_eq!((c.total, c.offset), (total, joined.len() as u64));
            assert!(c.bytes.len() <= 7);
            joined.extend_from_slice(&c.bytes);
        }
        assert_eq!(decode(&joined, "t").unwrap(), snapshot);
        let last = joined.len() - 1;
        joined[last] ^= 1;
        assert_eq!(decode(&joined, "t").unwrap_err().code(), -1500);
        joined[last] ^= 1;
        joined.push(0);
        assert_eq!(decode(&joined, "t").unwrap_err().code(), -1500);
        assert_eq!(decode(&joined[..5], "t").unwrap_err().code(), -1500);
    }

    #[test]
    fn another_seq_or_an_offset_past_the_end_is_refused() {
        let (_, offered) = offered();
        let total = offered.bytes.len() as u64;
        let e = offered.chunk(offered.seq + 1, 0, 10).unwrap_err();
        assert!(e.to_string().contains("fetch again"), "{e}");
        assert_eq!(offered.chunk(0, total + 1, 10).unwrap_err().code(), -600);
        assert!(offered.chunk(0, total, 10).unwrap().bytes.is_empty());
        // A huge ask is capped, a zero ask still makes progress.
        assert_eq!(offered.chunk(0, 0, 0).unwrap().bytes.len(), 1);
        assert_eq!(
            offered.chunk(0, 0, u64::MAX).unwrap().bytes.len() as u64,
            total.min(MAX_CHUNK)
        );
    }
}
