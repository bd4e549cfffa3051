//! The replicated log's unit: a *group* of consecutive [`LogEntry`]s written under one key
//! (group commit: one etcd transaction per group), `<prefix>/log/<first seq, 20 digits>`, so
//! that keys sort in log order and a range read returns the log in order.
//!
//! A group's value is a header (`YBLOGGRP`, format version, first sequence number, entry
//! count) then one frame per entry: `len: u32 LE | crc32: u32 LE | payload` (bincode), the
//! frames of the local log segments. Decoding checks all of it: the magic and version, every
//! checksum, that the entries are numbered from the first one without a gap, and that nothing
//! follows the last. A value that fails any check is `Corrupt` and applies nothing.

use std::io::Read;

use crate::error::{Error, Result};
use crate::master::disk::frame::{read_frame, write_frame, Frame};
use crate::master::log::{LogEntry, FORMAT_VERSION};

const MAGIC: &[u8; 8] = b"YBLOGGRP";
/// Header: magic, version (u32), first seq (u64), count (u32).
const HEADER: usize = 8 + 4 + 8 + 4;
/// Frame overhead per entry: length and checksum.
const FRAME: usize = 8;

/// Consecutive log entries stored as one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogGroup {
    /// The entries, numbered `first()`, `first() + 1`, … without a gap.
    entries: Vec<LogEntry>,
}

/// How large a group may be: etcd refuses a request over `--max-request-bytes` (1.5 MiB by
/// default) and a transaction of more than `--max-txn-ops` (128) operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Most bytes in one group's value.
    pub max_bytes: usize,
    /// Most entries in one group.
    pub max_entries: usize,
}

impl Default for GroupLimits {
    /// 1 MiB and 4096 entries: under etcd's default request limit with room for the key and
    /// the transaction around it.
    fn default() -> Self {
        GroupLimits {
            max_bytes: 1 << 20,
            max_entries: 4096,
        }
    }
}

impl LogGroup {
    /// A group of `entries`, which must be numbered consecutively (and be at least one).
    pub fn new(entries: Vec<LogEntry>) -> Result<LogGroup> {
        let Some(first) = entries.first().map(|e| e.seq) else {
            return Err(Error::params("a log group holds at least one entry"));
        };
        consecutive(&entries, first, "a new log group")?;
        Ok(LogGroup { entries })
    }

    /// Sequence number of the first entry.
    pub fn first(&self) -> u64 {
        self.entries[0].seq
    }

    /// Sequence number of the last entry.
    pub fn last(&self) -> u64 {
        self.entries[self.entries.len() - 1].seq
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    /// The entries, in order, by value.
    pub fn into_entries(self) -> Vec<LogEntry> {
        self.entries
    }

    /// The key of the group that starts at `first` under `prefix`.
    pub fn key(prefix: &str, first: u64) -> String {
        format!("{prefix}/log/{first:020}")
    }

    /// The first sequence number a log key under `prefix` names; `None` for any other key.
    pub fn parse_key(prefix: &str, key: &str) -> Option<u64> {
        let digits = key.strip_prefix(prefix)?.strip_prefix("/log/")?;
        match digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()) {
            true => digits.parse().ok(),
            false => None,
        }
    }

    /// The group as one value.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(HEADER + 64 * self.entries.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.first().to_le_bytes());
        let count = u32::try_from(self.entries.len())
            .map_err(|_| Error::params("over 2^32 entries in one log group"))?;
        out.extend_from_slice(&count.to_le_bytes());
        for e in &self.entries {
            write_frame(&mut out, e).map_err(|e| Error::Internal {
                reason: format!("encoding a log entry: {e}"),
            })?;
        }
        Ok(out)
    }

    /// Decodes the value stored under `key` (named in errors), checking everything (see the
    /// module docs).
    pub fn decode(key: &str, value: &[u8]) -> Result<LogGroup> {
        let corrupt = |reason: String| Error::Corrupt {
            path: key.to_string(),
            reason,
        };
        if value.len() < HEADER || &value[..8] != MAGIC {
            return Err(corrupt("not a log group (short, or bad magic)".into()));
        }
        let word = |at: usize| {
            u32::from_le_bytes([value[at], value[at + 1], value[at + 2], value[at + 3]])
        };
        let version = word(8);
        if version != FORMAT_VERSION {
            return Err(Error::InvalidVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let first = u64::from(word(12)) | u64::from(word(16)) << 32;
        let count = word(20) as usize;
        if count == 0 {
            return Err(corrupt("a log group of no entries".into()));
        }
        let mut rest = &value[HEADER..];
        // Each entry takes at least a frame header: a damaged count must not reserve wildly.
        let mut entries = Vec::with_capacity(count.min(rest.len() / FRAME));
        while entries.len() < count {
            match read_frame::<LogEntry>(&mut rest) {
                Ok(Frame::Value(e, _)) => entries.push(e),
                Ok(Frame::End) => {
                    return Err(corrupt(format!(
                        "{count} entries announced, {} found",
                        entries.len()
                    )))
                }
                Ok(Frame::Torn(why)) => return Err(corrupt(why)),
                Err(e) => return Err(corrupt(e.to_string())),
            }
        }
        if rest.read(&mut [0u8; 1]).map_or(true, |n| n > 0) {
            return Err(corrupt("bytes after the last entry".into()));
        }
        consecutive(&entries, first, key)?;
        Ok(LogGroup { entries })
    }
}

/// `Corrupt` unless `entries` are numbered `first`, `first + 1`, … without a gap.
fn consecutive(entries: &[LogEntry], first: u64, what: &str) -> Result<()> {
    for (i, e) in entries.iter().enumerate() {
        let want = first.checked_add(i as u64);
        if want != Some(e.seq) {
            return Err(Error::Corrupt {
                path: what.to_string(),
                reason: format!("entry {i} is seq {}, expected {first} + {i}", e.seq),
            });
        }
    }
    Ok(())
}

/// Cuts `entries` (consecutive) into groups within `limits`, in order. An entry too large for
/// a group by itself is `InvalidParams` (records are small: keys are at most a few KiB).
pub fn split_groups(entries: Vec<LogEntry>, limits: GroupLimits) -> Result<Vec<LogGroup>> {
    let mut groups = Vec::new();
    let mut current: Vec<LogEntry> = Vec::new();
    let mut bytes = HEADER;
    for e in entries {
        let size = FRAME
            + bincode::serialized_size(&e).map_err(|err| Error::Internal {
                reason: format!("sizing a log entry: {err}"),
            })? as usize;
        if HEADER + size > limits.max_bytes {
            return Err(Error::params(format!(
                "log entry {} takes {size} bytes, more than a log group holds ({})",
                e.seq, limits.max_bytes
            )));
        }
        if !current.is_empty()
            && (bytes + size > limits.max_bytes || current.len() >= limits.max_entries)
        {
            groups.push(LogGroup::new(std::mem::take(&mut current))?);
            bytes = HEADER;
        }
        bytes += size;
        current.push(e);
    }
    if !current.is_empty() {
        groups.push(LogGroup::new(current)?);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::log::Record;

    fn entry(seq: u64, key: &str) -> LogEntry {
        LogEntry {
            seq,
            epoch: 3,
            now: 1000 + seq,
            record: Record::Remove {
                key: key.into(),
                evicted: false,
                hold_until: 0,
            },
        }
    }

    fn run(first: u64, n: u64) -> Vec<LogEntry> {
        (first..first + n)
            .map(|s| entry(s, &format!("k{s}")))
            .collect()
    }

    #[test]
    fn a_group_round_trips_and_names_its_key_in_log_order() {
        let g = LogGroup::new(run(41, 5)).unwrap();
        let back = LogGroup::decode("p/log/x", &g.encode().unwrap()).unwrap();
        assert_eq!(back, g);
        assert_eq!((back.first(), back.last()), (41, 45));
        let (a, b) = (LogGroup::key("yb/c1", 9), LogGroup::key("yb/c1", 10));
        assert!(a < b, "keys sort in log order: {a} {b}");
        assert_eq!(LogGroup::parse_key("yb/c1", &b), Some(10));
        for other in [
            "yb/c1/log/12",
            "yb/c2/log/00000000000000000010",
            "yb/c1/leader",
        ] {
            assert_eq!(LogGroup::parse_key("yb/c1", other), None, "{other}");
        }
    }

    #[test]
    fn gaps_and_empty_groups_are_refused() {
        let mut gap = run(1, 3);
        gap[2].seq = 5;
        assert_eq!(LogGroup::new(gap).unwrap_err().code(), -1500);
        assert_eq!(LogGroup::new(Vec::new()).unwrap_err().code(), -600);
    }

    #[test]
    fn every_kind_of_damage_is_corrupt_and_never_a_panic() {
        let good = LogGroup::new(run(7, 4)).unwrap().encode().unwrap();
        // Every truncation, and every single flipped bit, fails (or, for a flip in the
        // version, is InvalidVersion); none decodes to other entries.
        for cut in 0..good.len() {
            let e = LogGroup::decode("k", &good[..cut]).unwrap_err();
            assert_eq!(e.code(), -1500, "cut at {cut}: {e}");
        }
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                let e = LogGroup::decode("k", &bad).unwrap_err();
                assert!(matches!(e.code(), -1500 | -300), "{byte}/{bit}: {e}");
            }
        }
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(LogGroup::decode("k", &longer).unwrap_err().code(), -1500);
        // A header announcing a huge count over a short body.
        let mut huge = good[..HEADER].to_vec();
        huge[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(LogGroup::decode("k", &huge).unwrap_err().code(), -1500);
    }

    #[test]
    fn splitting_respects_both_limits_and_keeps_the_order() {
        let entries = run(1, 100);
        let limits = GroupLimits {
            max_bytes: 600,
            max_entries: 7,
        };
        let groups = split_groups(entries.clone(), limits).unwrap();
        assert!(groups.len() > 100 / 7, "{}", groups.len());
        let mut next = 1;
        for g in &groups {
            assert_eq!(g.first(), next);
            assert!(g.entries().len() <= 7);
            assert!(g.encode().unwrap().len() <= 600);
            next = g.last() + 1;
        }
        let flat: Vec<_> = groups
            .into_iter()
            .flat_map(LogGroup::into_entries)
            .collect();
        assert_eq!(flat, entries);
        let tiny = GroupLimits {
            max_bytes: 40,
            max_entries: 7,
        };
        assert_eq!(split_groups(run(1, 1), tiny).unwrap_err().code(), -600);
    }
}
