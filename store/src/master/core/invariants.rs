//! A full consistency check of the core, for tests and debugging (it scans everything).

use std::collections::{BTreeMap, HashMap};

use super::Master;
use crate::master::task::TaskState;
use crate::master::types::{Millis, MountId};

impl Master {
    /// Checks that no two allocations overlap, every allocation lies inside a mounted range,
    /// the allocators' used bytes equal the replicas, writes, running tasks, held space and
    /// what is left of grants they back, objects and writes agree, the presence holds exactly
    /// the objects' keys, and exactly the running tasks have work. Returns the first violation
    /// found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut extents: HashMap<MountId, Vec<(u64, u64, String)>> = HashMap::new();
        let mut add = |r: &crate::master::Replica, size: u64, what: String| {
            let len = self.space.align_up(size);
            extents
                .entry(r.mount)
                .or_default()
                .push((r.offset, len, what));
        };
        for (k, o) in self.objects.iter() {
            if o.replicas.is_empty() {
                return Err(format!("object {k:?} has no replica"));
            }
            o.replicas
                .iter()
                .for_each(|r| add(r, o.size, format!("object {k:?}")));
            if o.writing != self.writes.contains_key(k) {
                return Err(format!("object {k:?}: writing flag disagrees with writes"));
            }
            if self.presence().exist(k) != Ok(true) {
                return Err(format!("object {k:?} is missing from the presence"));
            }
        }
        if self.presence().len() != self.objects.len() {
            return Err(format!(
                "the presence holds {} keys for {} objects",
                self.presence().len(),
                self.objects.len()
            ));
        }
        for (k, w) in self.writes.iter() {
            if w.replaces != self.objects.contains_key(k) || (w.in_place && !w.replaces) {
                return Err(format!(
                    "write {k:?}: replaces/in_place disagree with the objects"
                ));
            }
            w.replicas
                .iter()
                .for_each(|r| add(r, w.size, format!("write {k:?}")));
        }
        for h in &self.held {
            add(&h.replica, h.size, "held".into());
        }
        for (id, g) in &self.grants {
            if self.space.get(g.mount).is_none() {
                return Err(format!("{id} lies on unknown mount {}", g.mount.0));
            }
            g.extents()
                .for_each(|(r, len)| add(&r, len, id.to_string()));
        }
        for (id, t) in self.tasks.iter() {
            if (t.state == TaskState::Processing) != t.work.is_some() {
                return Err(format!("task {id}: work disagrees with its state"));
            }
            if let Some(w) = &t.work {
                w.targets
                    .iter()
                    .for_each(|r| add(r, w.size, format!("task {id}")));
            }
        }
        let mut total = 0;
        for (mount, mut list) in extents {
            let m = self
                .space
                .get(mount)
                .ok_or_else(|| format!("an allocation on unknown mount {}", mount.0))?;
            list.sort();
            let mut end = 0;
            let mut used = 0;
            for (off, len, what) in &list {
                if *off < end {
                    return Err(format!(
                        "{what} overlaps another allocation on mount {}",
                        mount.0
                    ));
                }
                end = off + len;
                used += len;
            }
            if end > m.alloc.capacity() {
                return Err(format!("an allocation runs past mount {}", mount.0));
            }
            if used != m.alloc.used() {
                return Err(format!(
                    "mount {}: allocator says {} used, allocations sum to {used}",
                    mount.0,
                    m.alloc.used()
                ));
            }
            total += used;
        }
        if total != self.space.used() {
            return Err(format!(
                "used bytes {} differ from the allocations' {total}",
                self.space.used()
            ));
        }
        self.check_lease_ends()
    }

    /// Every object whose lease ends after the lease book's last prune has its end in the
    /// book, and the book holds nothing else.
    fn check_lease_ends(&self) -> Result<(), String> {
        let pruned = self.leases.pruned_at();
        let mut ends: BTreeMap<Millis, u64> = BTreeMap::new();
        for (_, o) in self.objects.iter().filter(|(_, o)| o.lease_until > pruned) {
            *ends.entry(o.lease_until).or_default() += 1;
        }
        let book: BTreeMap<Millis, u64> = self.leases.ends().collect();
        if book != ends {
            return Err(format!(
                "lease book {book:?} differs from the objects' lease ends {ends:?}"
            ));
        }
        Ok(())
    }
}
