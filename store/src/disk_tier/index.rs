//! Where each object's record is, and how much of each segment is still live: the disk tier's
//! state without its files, so its accounting is tested alone.

use std::collections::{BTreeMap, HashMap};

use super::Tag;
use crate::files::HEADER_LEN;

/// Where one object's record sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) segment: u64,
    pub(crate) offset: u64,
    pub(crate) key_len: u32,
    pub(crate) value_len: u64,
    pub(crate) value_crc: u32,
    pub(crate) tag: Tag,
}

impl Location {
    /// Bytes of the whole record.
    pub(crate) fn record_len(&self) -> u64 {
        super::record::HEAD_LEN as u64 + u64::from(self.key_len) + self.value_len
    }
}

/// One segment's bytes: all it holds, and those of records still indexed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fill {
    pub(crate) total: u64,
    pub(crate) live: u64,
}

impl Fill {
    /// Bytes of its dead records (neither live nor its header).
    fn dead(&self) -> u64 {
        self.total
            .saturating_sub(self.live)
            .saturating_sub(HEADER_LEN as u64)
    }
}

/// The objects on disk and the fill of every segment.
#[derive(Debug, Default)]
pub(crate) struct Index {
    objects: HashMap<String, Location>,
    segments: BTreeMap<u64, Fill>,
}

impl Index {
    /// `segment` grew by `len` bytes: it was created (its header), found when the tier
    /// opened, or a record was appended (before it is indexed).
    pub(crate) fn grew(&mut self, segment: u64, len: u64) {
        self.segments.entry(segment).or_default().total += len;
    }

    /// Indexes `key` at `at`; the record it replaces, if any, is dead from now on.
    pub(crate) fn insert(&mut self, key: String, at: Location) -> Option<Location> {
        self.segments.entry(at.segment).or_default().live += at.record_len();
        let old = self.objects.insert(key, at);
        if let Some(old) = old {
            self.dead(old);
        }
        old
    }

    /// Forgets `key`, if it is at `expected` (or anywhere, for `None`).
    pub(crate) fn remove(&mut self, key: &str, expected: Option<Location>) -> Option<Location> {
        let at = *self.objects.get(key)?;
        if expected.is_some_and(|e| e != at) {
            return None;
        }
        self.objects.remove(key);
        self.dead(at);
        Some(at)
    }

    fn dead(&mut self, at: Location) {
        if let Some(fill) = self.segments.get_mut(&at.segment) {
            fill.live = fill.live.saturating_sub(at.record_len());
        }
    }

    /// Where `key` is.
    pub(crate) fn get(&self, key: &str) -> Option<Location> {
        self.objects.get(key).copied()
    }

    /// Every object and its location.
    pub(crate) fn objects(&self) -> impl Iterator<Item = (&String, &Location)> {
        self.objects.iter()
    }

    /// How many objects are indexed.
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// Bytes of every segment file.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.segments.values().map(|f| f.total).sum()
    }

    /// Bytes of the records still indexed.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.segments.values().map(|f| f.live).sum()
    }

    /// A segment's fill.
    pub(crate) fn fill(&self, segment: u64) -> Option<Fill> {
        self.segments.get(&segment).copied()
    }

    /// Bytes of dead records in every segment other than `head`: what compaction can give
    /// back.
    pub(crate) fn reclaimable(&self, head: u64) -> u64 {
        self.segments
            .iter()
            .filter(|(&n, _)| n != head)
            .map(|(_, f)| f.dead())
            .sum()
    }

    /// The segment other than `head` with dead records whose share of live record bytes is
    /// lowest, if that share is at most `max_live` (0.0 ..= 1.0): the next one to compact.
    pub(crate) fn emptiest(&self, head: u64, max_live: f64) -> Option<u64> {
        self.segments
            .iter()
            .filter(|(&n, f)| n != head && f.dead() > 0)
            .map(|(&n, f)| (n, f.live as f64 / (f.dead() + f.live) as f64))
            .filter(|&(_, share)| share <= max_live)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, _)| n)
    }

    /// The objects in `segment`.
    pub(crate) fn in_segment(&self, segment: u64) -> Vec<(String, Location)> {
        self.objects
            .iter()
            .filter(|(_, at)| at.segment == segment)
            .map(|(k, at)| (k.clone(), *at))
            .collect()
    }

    /// Forgets a segment whose file was deleted.
    pub(crate) fn drop_segment(&mut self, segment: u64) {
        self.segments.remove(&segment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(segment: u64, value_len: u64) -> Location {
        Location {
            segment,
            offset: 12,
            key_len: 1,
            value_len,
            value_crc: 0,
            tag: Tag::default(),
        }
    }

    #[test]
    fn live_bytes_follow_inserts_replacements_and_removals() {
        let mut ix = Index::default();
        ix.grew(1, 12);
        ix.grew(2, 12);
        let a = at(1, 59); // 100 bytes with head and key
        ix.grew(1, 100);
        assert_eq!(ix.insert("a".into(), a), None);
        ix.grew(1, 100);
        ix.insert("b".into(), at(1, 59));
        assert_eq!(
            ix.fill(1),
            Some(Fill {
                total: 212,
                live: 200
            })
        );
        // A newer record of "a" elsewhere leaves the old one dead.
        ix.grew(2, 100);
        assert_eq!(ix.insert("a".into(), at(2, 59)), Some(a));
        assert_eq!(ix.fill(1).unwrap().live, 100);
        // A removal that expects the old place changes nothing.
        assert_eq!(ix.remove("a", Some(a)), None);
        assert_eq!(ix.remove("b", None), Some(at(1, 59)));
        assert_eq!((ix.len(), ix.live_bytes(), ix.total_bytes()), (1, 100, 324));
        // Segment 1 has no live bytes: it is the one to compact (never the head); segment 2
        // has no dead record.
        assert_eq!(ix.emptiest(2, 0.5), Some(1));
        assert_eq!(ix.emptiest(1, 1.0), None);
        assert_eq!((ix.reclaimable(2), ix.reclaimable(1)), (200, 0));
        assert!(ix.in_segment(1).is_empty());
        assert_eq!(ix.in_segment(2).len(), 1);
    }
}
