//! The table of registered ranges: pure bookkeeping, no memory is touched.
//!
//! Registration is two-phase so that slow per-transport work (e.g. RDMA memory registration) can
//! run outside the lock: [`RegionTable::reserve`] claims a range (state `Registering`), then
//! [`RegionTable::commit`] or [`RegionTable::abort`]. A range overlapping one that is registered
//! *or being registered* is refused, so of two racing overlapping registrations exactly one wins.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RemoteAccess;
use crate::error::Error;
use crate::location::Location;

/// One registered range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub addr: u64,
    /// Length in bytes (never 0).
    pub len: u64,
    /// Where the memory lives.
    pub location: Location,
    /// What peers may do with it ([`RemoteAccess::LOCAL_ONLY`]: nothing).
    pub remote: RemoteAccess,
    /// Which registration this is: unique to each registration in this process, so that one
    /// of a range that was unregistered and registered again is told from the new one
    /// ([`crate::MemoryRegistry::unregister_region`]). 0 for a range a peer described.
    pub serial: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.addr + self.len
    }
}

/// The serial of the next registration in this process (0 is never one).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Registering,
    Registered,
}

/// Registered (and being registered) ranges, keyed by start address.
#[derive(Debug, Default)]
pub struct RegionTable {
    regions: BTreeMap<u64, (Region, State)>,
}

impl RegionTable {
    /// Claims `[addr, addr + len)`, with `remote` rights for peers. Refuses length 0, ranges that
    /// wrap around, and overlaps.
    pub fn reserve(
        &mut self,
        addr: u64,
        len: u64,
        location: Location,
        remote: RemoteAccess,
    ) -> Result<Region, Error> {
        if len == 0 {
            return Err(Error::invalid("cannot register a range of length 0"));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| Error::invalid(format!("range {addr:#x}+{len} wraps around")))?;
        let before = self.regions.range(..end).next_back();
        if before.is_some_and(|(_, (r, _))| r.end() > addr) {
            return Err(Error::AddressOverlapped { addr, len });
        }
        let region = Region {
            addr,
            len,
            location,
            remote,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        };
        self.regions.insert(addr, (region, State::Registering));
        Ok(region)
    }

    /// Completes a reservation.
    pub fn commit(&mut self, addr: u64) {
        if let Some((_, state)) = self.regions.get_mut(&addr) {
            *state = State::Registered;
        }
    }

    /// Drops a reservation that did not complete.
    pub fn abort(&mut self, addr: u64) {
        if self
            .regions
            .get(&addr)
            .is_some_and(|(_, s)| *s == State::Registering)
        {
            self.regions.remove(&addr);
        }
    }

    /// Removes the registered range starting at `addr` (only if it is registration `serial`,
    /// when one is given).
    pub fn remove(&mut self, addr: u64, serial: Option<u64>) -> Result<Region, Error> {
        match self.regions.get(&addr) {
            Some((r, State::Registered)) if serial.is_none_or(|s| s == r.serial) => {}
            _ => return Err(Error::AddressNotRegistered { addr }),
        }
        self.regions
            .remove(&addr)
            .map(|(r, _)| r)
            .ok_or(Error::AddressNotRegistered { addr })
    }

    /// The registered range that holds all of `[addr, addr + len)`, if one does.
    pub fn find(&self, addr: u64, len: u64) -> Option<Region> {
        let end = addr.checked_add(len)?;
        let (_, (r, state)) = self.regions.range(..=addr).next_back()?;
        (*state == State::Registered && len > 0 && end <= r.end()).then_some(*r)
    }

    /// Every registered range (local-only and exported), in address order.
    pub fn registered(&self) -> Vec<Region> {
        self.regions
            .values()
            .filter(|(_, s)| *s == State::Registered)
            .map(|(r, _)| *r)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: Location = Location::Cpu { numa: 0 };
    const LOCAL: RemoteAccess = RemoteAccess::LOCAL_ONLY;

    fn reg(t: &mut RegionTable, addr: u64, len: u64) -> Result<Region, Error> {
        let r = t.reserve(addr, len, CPU, LOCAL)?;
        t.commit(addr);
        Ok(r)
    }

    #[test]
    fn overlaps_are_refused_adjacent_ranges_are_fine() {
        let mut t = RegionTable::default();
        reg(&mut t, 100, 100).unwrap();
        for (a, l) in [(100, 100), (150, 10), (50, 51), (199, 5), (0, 1000)] {
            assert_eq!(reg(&mut t, a, l).unwrap_err().code(), -3007, "{a}+{l}");
        }
        reg(&mut t, 200, 10).unwrap();
        reg(&mut t, 90, 10).unwrap();
        assert_eq!(t.registered().len(), 3);
    }

    #[test]
    fn a_range_being_registered_blocks_an_overlapping_one() {
        let mut t = RegionTable::default();
        t.reserve(0, 10, CPU, LOCAL).unwrap();
        assert!(t.reserve(5, 10, CPU, RemoteAccess::READ).is_err());
        assert!(t.find(0, 10).is_none(), "not usable before commit");
        t.abort(0);
        reg(&mut t, 5, 10).unwrap();
    }

    #[test]
    fn bad_input_is_typed() {
        let mut t = RegionTable::default();
        assert_eq!(reg(&mut t, 1, 0).unwrap_err().code(), -3001);
        assert_eq!(reg(&mut t, u64::MAX, 2).unwrap_err().code(), -3001);
        assert_eq!(t.remove(42, None).unwrap_err().code(), -3003);
        t.reserve(42, 1, CPU, LOCAL).unwrap();
        assert_eq!(
            t.remove(42, None).unwrap_err().code(),
            -3003,
            "not yet registered"
        );
    }

    #[test]
    fn a_registration_is_removed_by_its_serial_only_while_it_is_in_place() {
        let mut t = RegionTable::default();
        let first = reg(&mut t, 0, 10).unwrap();
        t.remove(0, None).unwrap();
        let second = reg(&mut t, 0, 10).unwrap();
        assert_ne!(first.serial, second.serial);
        assert_eq!(t.remove(0, Some(first.serial)).unwrap_err().code(), -3003);
        assert!(t.find(0, 10).is_some(), "the new registration stays");
        assert_eq!(t.remove(0, Some(second.serial)).unwrap(), second);
    }

    #[test]
    fn find_needs_one_region_holding_the_whole_range() {
        let mut t = RegionTable::default();
        reg(&mut t, 0, 10).unwrap();
        reg(&mut t, 10, 10).unwrap();
        assert_eq!(t.find(0, 10).unwrap().addr, 0);
        assert_eq!(t.find(12, 8).unwrap().addr, 10);
        assert!(t.find(5, 10).is_none(), "spans two adjacent regions");
        assert!(t.find(15, 6).is_none());
        assert!(t.find(3, 0).is_none());
        assert!(t.find(u64::MAX, 2).is_none());
    }
}
