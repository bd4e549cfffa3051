//! The check of a remote access against a segment's exported buffers (pure), as an initiator
//! makes it against a peer's descriptor (where no code of the target runs, as over shm, that
//! check is the one that counts).
//!
//! A request is accepted only if `[addr, addr + len)` lies inside one buffer: the exact range or
//! a sub-range, and that buffer's rights allow the request's direction. Zero size, overflow, out
//! of bounds, partial overlap, a range spanning two adjacent buffers, and a buffer registered
//! local-only are refused (`OutOfBounds`); a buffer exported without the right for the direction
//! is `AccessDenied`. All before any byte is copied.

use crate::error::Error;
use crate::memory::Region;
use crate::request::Opcode;

/// Checks a peer's access in direction `opcode` against `buffers` (sorted by address,
/// disjoint) and returns the buffer that holds it.
pub fn check_access(
    buffers: &[Region],
    addr: u64,
    len: u64,
    opcode: Opcode,
) -> Result<Region, Error> {
    let b = check_bounds(buffers, addr, len)?;
    b.remote.check(opcode, addr, len)?;
    Ok(b)
}

/// Checks only that `[addr, addr + len)` lies inside one of `buffers` (sorted by address,
/// disjoint) and returns that buffer, whatever its rights.
pub fn check_bounds(buffers: &[Region], addr: u64, len: u64) -> Result<Region, Error> {
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
    use crate::memory::RemoteAccess;
    use proptest::prelude::*;

    fn buf(addr: u64, len: u64) -> Region {
        with_rights(addr, len, RemoteAccess::READ_WRITE)
    }

    fn with_rights(addr: u64, len: u64, remote: RemoteAccess) -> Region {
        Region {
            addr,
            len,
            location: Location::default(),
            remote,
            serial: 0,
        }
    }

    fn check(buffers: &[Region], addr: u64, len: u64) -> Result<Region, Error> {
        let read = check_access(buffers, addr, len, Opcode::Read);
        assert_eq!(read, check_access(buffers, addr, len, Opcode::Write));
        read
    }

    #[test]
    fn the_cases_the_issue_lists() {
        let bufs = [buf(1000, 100), buf(1100, 100)];
        assert!(check(&bufs, 1000, 100).is_ok(), "exact");
        assert!(check(&bufs, 1010, 20).is_ok(), "sub-range");
        assert!(check(&bufs, 1100, 100).is_ok(), "second buffer, exact");
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
                check(&bufs, addr, len).unwrap_err().code(),
                code,
                "{addr}+{len}"
            );
        }
        assert!(check(&[], 0, 1).is_err());
    }

    #[test]
    fn rights_are_checked_per_direction_after_the_bounds() {
        let bufs = [
            with_rights(1000, 100, RemoteAccess::READ),
            with_rights(1100, 100, RemoteAccess::WRITE),
            with_rights(1200, 100, RemoteAccess::LOCAL_ONLY),
        ];
        let code = |addr, len, opcode| {
            check_access(&bufs, addr, len, opcode)
                .err()
                .map_or(0, |e| e.code())
        };
        assert_eq!(code(1000, 10, Opcode::Read), 0);
        assert_eq!(code(1000, 10, Opcode::Write), -3511);
        assert_eq!(code(1100, 10, Opcode::Read), -3511);
        assert_eq!(code(1100, 10, Opcode::Write), 0);
        assert_eq!(code(1200, 10, Opcode::Read), -3504, "local-only: unseen");
        assert_eq!(code(1090, 20, Opcode::Write), -3504, "bounds first");
        assert!(check_bounds(&bufs, 1200, 10).is_ok());
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
            prop_assert_eq!(check(&bufs, addr, len).is_ok(), inside);
        }
    }
}
