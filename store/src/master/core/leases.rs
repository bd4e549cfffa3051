//! The read leases the master holds, counted by their end so that a scrape reads how many
//! there are without walking every object under the core's lock.

use std::collections::BTreeMap;

use crate::master::types::Millis;

/// How many objects' read leases end at each time (soft state, like the leases).
///
/// An object's lease moves here when it is granted or extended, and leaves when the object's
/// lease is reset (a replacing write) or the object is removed; [`LeaseEnds::held`] forgets
/// the ends that passed. Every object whose lease ends after [`LeaseEnds::pruned_at`] has its
/// end here, and nothing else does (`check_invariants` verifies it).
#[derive(Debug, Default)]
pub(crate) struct LeaseEnds {
    ends: BTreeMap<Millis, u64>,
    /// The entries of `ends`, summed.
    total: u64,
    /// Ends at or before this time were forgotten.
    pruned_at: Millis,
}

impl LeaseEnds {
    /// An object's lease that ended at `old` now ends at `new`.
    pub(crate) fn moved(&mut self, old: Millis, new: Millis) {
        if old == new {
            return;
        }
        self.ended(old);
        if new > self.pruned_at {
            *self.ends.entry(new).or_default() += 1;
            self.total += 1;
        }
    }

    /// An object whose lease ended at `end` lost it (reset or removed).
    pub(crate) fn ended(&mut self, end: Millis) {
        if end <= self.pruned_at {
            return;
        }
        if let Some(n) = self.ends.get_mut(&end) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.ends.remove(&end);
            }
        }
    }

    /// Objects under a lease at `now`: the ends up to `now` are forgotten first, so the work
    /// is in the number of ends that passed since the last call.
    pub(crate) fn held(&mut self, now: Millis) -> u64 {
        if now > self.pruned_at {
            let later = match now.checked_add(1) {
                Some(after) => self.ends.split_off(&after),
                None => BTreeMap::new(),
            };
            self.total -= self.ends.values().sum::<u64>();
            self.ends = later;
            self.pruned_at = now;
        }
        self.total
    }

    /// Ends at or before this time were forgotten.
    pub(crate) fn pruned_at(&self) -> Millis {
        self.pruned_at
    }

    /// Each end this book holds, with its count.
    pub(crate) fn ends(&self) -> impl Iterator<Item = (Millis, u64)> + '_ {
        self.ends.iter().map(|(&end, &n)| (end, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_leases_until_they_end() {
        let mut l = LeaseEnds::default();
        l.moved(0, 100);
        l.moved(0, 100);
        l.moved(0, 200);
        assert_eq!(l.held(50), 3);
        // An extension moves one lease; a reset or a removal drops it.
        l.moved(100, 300);
        l.ended(200);
        assert_eq!(l.held(100), 1, "the lease ending at 100 is over at 100");
        // Ends already forgotten change nothing.
        l.ended(100);
        l.moved(100, 100);
        assert_eq!(l.held(299), 1);
        assert_eq!(l.held(300), 0);
        assert_eq!(l.held(10), 0, "time never runs back");
        assert_eq!(l.ends().count(), 0);
    }

    #[test]
    fn the_end_of_time_is_pruned_too() {
        let mut l = LeaseEnds::default();
        l.moved(0, Millis::MAX);
        assert_eq!(l.held(Millis::MAX - 1), 1);
        assert_eq!(l.held(Millis::MAX), 0);
        assert_eq!(
            l.ends().count(),
            0,
            "nothing left that `ended` could no longer drop"
        );
    }
}
