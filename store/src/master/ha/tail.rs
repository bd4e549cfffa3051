//! A standby's position in the replicated log. It reads groups in key order and applies each
//! only if it continues exactly where the applied log ends and no entry's epoch goes
//! backwards; anything else (a gap: a group lost or truncated away; a group wholly applied
//! already; an older epoch after a newer one) stops the tail for good: it fails closed rather
//! than apply a log with a hole. A group that straddles the applied position (a standby
//! bootstrapped from a snapshot taken in the middle of a group) gives only its entries after
//! it. A standby that stopped bootstraps again from a snapshot.

use crate::error::{Error, Result};
use crate::master::ha::group::LogGroup;
use crate::master::log::LogEntry;

/// Where a standby's applied log ends, and whether it may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// Sequence number of the last entry applied (0: none; the snapshot's when bootstrapped).
    applied: u64,
    /// Epoch of the last entry applied.
    epoch: u64,
    /// Why the tail stopped, once it has.
    failed: Option<String>,
}

impl Tail {
    /// A tail whose state holds every entry up to `applied` (a snapshot's sequence number, or
    /// 0), written in `epoch` or earlier.
    pub fn after(applied: u64, epoch: u64) -> Tail {
        Tail {
            applied,
            epoch,
            failed: None,
        }
    }

    /// Sequence number of the last entry applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The key's first sequence number that the next group must have.
    pub fn next(&self) -> u64 {
        self.applied + 1
    }

    /// Why the tail stopped, if it did.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Takes the next group, read under `key`: its entries after the applied position, in
    /// order. `Corrupt` (and the tail stops for good) unless it holds [`Tail::next`] and starts
    /// no later, and no epoch goes back.
    pub fn accept(&mut self, key: &str, group: LogGroup) -> Result<Vec<LogEntry>> {
        if let Some(why) = &self.failed {
            return Err(corrupt(key, format!("the tail stopped earlier: {why}")));
        }
        let problem = if group.first() > self.next() || group.last() < self.next() {
            Some(format!(
                "log gap: the group starts at {}, the applied log ends at {}",
                group.first(),
                self.applied
            ))
        } else {
            let mut epoch = self.epoch;
            let applied = self.applied;
            group
                .entries()
                .iter()
                .filter(|e| e.seq > applied)
                .find_map(|e| {
                    let back = e.epoch < epoch;
                    epoch = e.epoch;
                    back.then(|| {
                        format!(
                            "entry {} has epoch {}, after epoch {}",
                            e.seq,
                            e.epoch,
                            self.epoch.max(epoch)
                        )
                    })
                })
        };
        if let Some(why) = problem {
            self.failed = Some(why.clone());
            return Err(corrupt(key, why));
        }
        let mut entries = group.into_entries();
        entries.retain(|e| e.seq > self.applied);
        let Some(last) = entries.last() else {
            // Not reached: the group holds next() (checked above).
            return Ok(entries);
        };
        self.applied = last.seq;
        self.epoch = last.epoch;
        Ok(entries)
    }
}

fn corrupt(key: &str, reason: String) -> Error {
    Error::Corrupt {
        path: key.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::log::Record;

    fn group(first: u64, n: u64, epoch: u64) -> LogGroup {
        LogGroup::new(
            (first..first + n)
                .map(|seq| LogEntry {
                    seq,
                    epoch,
                    now: seq,
                    record: Record::Release,
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn groups_apply_in_order_from_a_snapshot() {
        let mut t = Tail::after(10, 2);
        assert_eq!(t.next(), 11);
        assert_eq!(t.accept("k", group(11, 3, 2)).unwrap().len(), 3);
        assert_eq!(t.accept("k", group(14, 1, 3)).unwrap()[0].seq, 14);
        assert_eq!((t.applied(), t.failed()), (14, None));
    }

    #[test]
    fn a_group_that_straddles_the_snapshot_gives_its_entries_after_it() {
        let mut t = Tail::after(10, 2);
        let entries = t.accept("k", group(8, 5, 2)).unwrap();
        assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [11, 12]);
        assert_eq!(t.applied(), 12);
    }

    #[test]
    fn a_gap_an_applied_group_or_an_older_epoch_stops_the_tail_for_good() {
        for (bad, why) in [
            (group(13, 2, 2), "gap"),
            (group(8, 3, 2), "gap"),
            (group(11, 2, 1), "epoch"),
        ] {
            let mut t = Tail::after(10, 2);
            let e = t.accept("yb/log/x", bad).unwrap_err();
            assert_eq!(e.code(), -1500);
            assert!(e.to_string().contains(why), "{e}");
            assert_eq!(t.applied(), 10, "nothing applied");
            // Even the right group is refused now: the standby must bootstrap again.
            assert!(t.accept("k", group(11, 1, 2)).is_err());
            assert!(t.failed().is_some());
        }
    }
}
