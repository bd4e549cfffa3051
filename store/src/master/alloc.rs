//! Offsets inside one mounted range of store space.
//!
//! A best-fit allocator over free extents, kept twice: by offset (to merge neighbours on free) and
//! by (length, offset) (to find the smallest extent that fits). Sizes are rounded up to the
//! alignment, so every offset handed out is a multiple of it (relative to the range start).
//!
//! Why not the `offset-allocator` crate (the O(1) bin allocator Mooncake uses)? It was evaluated:
//! its sizes are `u32` units, its node table is sized up front, and it cannot allocate at a given
//! offset. The master must rebuild exactly the same placements from a snapshot plus an operation
//! log, which needs [`RangeAllocator::reserve`]; that is not expressible on top of it.

use std::collections::{BTreeMap, BTreeSet};

/// Free-space accounting of one range.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpaceReport {
    /// Bytes the range holds.
    pub capacity: u64,
    /// Bytes handed out.
    pub used: u64,
    /// The largest free extent.
    pub largest_free: u64,
    /// Number of free extents.
    pub free_extents: usize,
}

impl SpaceReport {
    /// `1 − largest_free / free`: 0 when the free space is one extent, towards 1 when it is
    /// scattered in many small ones.
    pub fn fragmentation(&self) -> f64 {
        let free = self.capacity - self.used;
        if free == 0 {
            0.0
        } else {
            1.0 - self.largest_free as f64 / free as f64
        }
    }
}

/// Best-fit allocator of offsets in `0..len`.
#[derive(Debug, Clone)]
pub struct RangeAllocator {
    len: u64,
    align: u64,
    used: u64,
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
}

impl RangeAllocator {
    /// A range of `len` bytes, all free, handing out offsets aligned to `align` (a power of two;
    /// the usable length is `len` rounded down to it).
    pub fn new(len: u64, align: u64) -> Self {
        let align = align.max(1).next_power_of_two();
        let len = len / align * align;
        let mut a = RangeAllocator {
            len,
            align,
            used: 0,
            by_offset: BTreeMap::new(),
            by_size: BTreeSet::new(),
        };
        if len > 0 {
            a.insert_free(0, len);
        }
        a
    }

    /// `size` rounded up to the alignment (what an allocation of `size` really takes), or `None`
    /// on overflow.
    pub fn rounded(&self, size: u64) -> Option<u64> {
        size.checked_add(self.align - 1)
            .map(|s| s / self.align * self.align)
    }

    /// Whether an allocation of `size` would fit now.
    pub fn fits(&self, size: u64) -> bool {
        match (self.rounded(size), self.by_size.last()) {
            (Some(s), Some(&(largest, _))) => s > 0 && s <= largest,
            _ => false,
        }
    }

    /// Hands out `size` bytes (rounded up) from the smallest free extent that holds them.
    pub fn allocate(&mut self, size: u64) -> Option<u64> {
        let size = self.rounded(size).filter(|&s| s > 0)?;
        let &(ext_len, ext_off) = self.by_size.range((size, 0)..).next()?;
        self.remove_free(ext_off, ext_len);
        if ext_len > size {
            self.insert_free(ext_off + size, ext_len - size);
        }
        self.used += size;
        Some(ext_off)
    }

    /// Takes exactly `offset..offset + size` (rounded up), which must be free. Used when
    /// rebuilding placements from a snapshot or log; `false` (and nothing changed) otherwise.
    pub fn reserve(&mut self, offset: u64, size: u64) -> bool {
        let Some(size) = self.rounded(size).filter(|&s| s > 0) else {
            return false;
        };
        if !offset.is_multiple_of(self.align) {
            return false;
        }
        let Some((&ext_off, &ext_len)) = self.by_offset.range(..=offset).next_back() else {
            return false;
        };
        let Some(end) = offset.checked_add(size) else {
            return false;
        };
        if end > ext_off + ext_len {
            return false;
        }
        self.remove_free(ext_off, ext_len);
        if offset > ext_off {
            self.insert_free(ext_off, offset - ext_off);
        }
        if ext_off + ext_len > end {
            self.insert_free(end, ext_off + ext_len - end);
        }
        self.used += size;
        true
    }

    /// Returns `offset..offset + size` (as allocated) to the free space, merging neighbours.
    /// Only ranges this allocator handed out may be freed; the master guarantees that.
    pub fn free(&mut self, offset: u64, size: u64) {
        let Some(size) = self.rounded(size).filter(|&s| s > 0) else {
            return;
        };
        debug_assert!(offset + size <= self.len, "free outside the range");
        let (mut start, mut len) = (offset, size);
        if let Some((&p_off, &p_len)) = self.by_offset.range(..offset).next_back() {
            debug_assert!(p_off + p_len <= offset, "double free");
            if p_off + p_len == offset {
                self.remove_free(p_off, p_len);
                start = p_off;
                len += p_len;
            }
        }
        if let Some(&n_len) = self.by_offset.get(&(offset + size)) {
            self.remove_free(offset + size, n_len);
            len += n_len;
        }
        self.insert_free(start, len);
        self.used -= size;
    }

    /// Bytes handed out.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Usable bytes.
    pub fn capacity(&self) -> u64 {
        self.len
    }

    /// Free-space accounting.
    pub fn report(&self) -> SpaceReport {
        SpaceReport {
            capacity: self.len,
            used: self.used,
            largest_free: self.by_size.last().map_or(0, |&(l, _)| l),
            free_extents: self.by_offset.len(),
        }
    }

    fn insert_free(&mut self, off: u64, len: u64) {
        self.by_offset.insert(off, len);
        self.by_size.insert((len, off));
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        self.by_offset.remove(&off);
        self.by_size.remove(&(len, off));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_aligned_and_merging() {
        let mut a = RangeAllocator::new(1000, 64);
        assert_eq!(a.capacity(), 960);
        let x = a.allocate(1).unwrap();
        let y = a.allocate(100).unwrap();
        let z = a.allocate(64).unwrap();
        assert_eq!((x, y, z), (0, 64, 192));
        assert_eq!(a.used(), 256);
        a.free(y, 100);
        // The 128-byte hole is the best fit for 100 bytes; the tail is bigger.
        assert_eq!(a.allocate(70), Some(64));
        a.free(64, 70);
        a.free(x, 1);
        a.free(z, 64);
        assert_eq!(a.used(), 0);
        let r = a.report();
        assert_eq!((r.free_extents, r.largest_free), (1, 960));
        assert_eq!(r.fragmentation(), 0.0);
    }

    #[test]
    fn full_zero_and_overflow_are_refused() {
        let mut a = RangeAllocator::new(128, 64);
        assert_eq!(a.allocate(0), None);
        assert_eq!(a.allocate(u64::MAX), None);
        assert!(a.allocate(128).is_some());
        assert_eq!(a.allocate(1), None);
        assert!(!a.fits(1));
    }

    #[test]
    fn reserve_takes_exact_ranges_or_nothing() {
        let mut a = RangeAllocator::new(1024, 64);
        assert!(a.reserve(128, 64));
        assert!(!a.reserve(128, 64), "taken");
        assert!(!a.reserve(100, 10), "unaligned");
        assert!(!a.reserve(960, 128), "past the end");
        assert!(a.reserve(0, 128));
        assert_eq!(a.allocate(64), Some(192));
        let r = a.report();
        assert_eq!(r.used, 256);
        assert!(r.fragmentation() == 0.0);
        a.free(128, 64);
        assert!(a.report().fragmentation() > 0.0);
    }
}
