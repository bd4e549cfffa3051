//! The serving side's check of a remote access against its registered buffers (pure).
//!
//! A request is accepted only if `[addr, addr + len)` lies inside one buffer: the exact range or
//! a sub-range. Zero size, overflow, out of bounds, partial overlap and a range spanning two
//! adjacent buffers are refused before any byte is copied.

use crate::error::Error;
use crate::memory::Region;

/// Checks an access against `buffers` (sorted by address, disjoint) and returns the buffer that
/// holds it.
pub fn check_access(buffers: &[Region], addr: u64, len: u64) -> Result<Region, Error> {
    if len == 0 {
        return Err(Error::invalid("a transfer of 0 bytes"));
    }
    let oob = || Error::OutOfBounds { addr, len };
    let end = addr.checked_add(len).ok_or_else(oob)?;
    // The last buffer starting at or before `addr`.
    let i = buffers.partition_point(|b| b.addr <= addr);
    let b = i.checked_sub(1).map(|i| buffers[i]).ok_or_else(oob)?;
    if end <= b.end() {
        Ok(b)
    } else {
        Err(oob())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::Location;
    use proptest::prelude::*;

    fn buf(addr: u64, len: u64) -> Region {
        Region {
            addr,
            len,
            location: Location::default(),
        }
    }

    #[test]
    fn the_cases_the_issue_lists() {
        let bufs = [buf(1000, 100), buf(1100, 100)];
        assert!(check_access(&bufs, 1000, 100).is_ok(), "exact");
        assert!(check_access(&bufs, 1010, 20).is_ok(), "sub-range");
        assert!(
            check_access(&bufs, 1100, 100).is_ok(),
            "second buffer, exact"
        );
        let refused = [
            (900, 10, -3504),          // before everything
            (1300, 1, -3504),          // after everything
            (990, 20, -3504),          // partial overlap at the start
            (1190, 20, -3504),         // partial overlap at the end
            (1050, 100, -3504),        // spans two adjacent buffers
            (1000, 0, -3001),          // zero size
            (u64::MAX - 5, 10, -3504), // overflow
        ];
        for (addr, len, code) in refused {
            assert_eq!(
                check_access(&bufs, addr, len).unwrap_err().code(),
                code,
                "{addr}+{len}"
            );
        }
        assert!(check_access(&[], 0, 1).is_err());
    }

    proptest! {
        #[test]
        fn accepted_iff_inside_one_buffer(
            starts in proptest::collection::btree_set(0u64..10_000, 1..8),
            addr in 0u64..12_000,
            len in 0u64..3_000,
        ) {
            let starts: Vec<u64> = starts.into_iter().collect();
            let bufs: Vec<Region> = starts
                .iter()
                .enumerate()
                .map(|(i, &s)| {
                    let next = starts.get(i + 1).copied().unwrap_or(s + 500);
                    buf(s, (next - s).clamp(1, 500))
                })
                .collect();
            let inside = len > 0 && bufs.iter().any(|b| addr >= b.addr && addr + len <= b.end());
            prop_assert_eq!(check_access(&bufs, addr, len).is_ok(), inside);
        }
    }
}
