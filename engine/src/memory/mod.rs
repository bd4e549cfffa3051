//! Memory the engine may transfer: registration of caller memory, engine-allocated buffers,
//! their rights for peers, revocable leases on registered regions, and per-transport
//! registration hooks.
//!
//! Every region is registered with its [`RemoteAccess`]: local-only (the default of
//! `TransferEngine::register` and `allocate`) or exported for peers' reads, writes or both.
//! Local-only memory is the local side of this engine's own requests (and the target of its
//! `local` transport, which is no remote access); only exported memory is published and
//! served to peers (see `rights`).
//!
//! # Layout
//! - `rights`: [`RemoteAccess`], what peers may do with a region.
//! - `table`: the pure [`RegionTable`] of registered ranges.
//! - `buffer`: [`EngineBuffer`], memfd-backed memory the engine allocates.
//! - `lease`: [`Lease`]s on regions, revoked by `unregister` (see its docs for the rule).
//! - `raw`: the one audited module that moves bytes of transferable memory (raw pointers only).

mod buffer;
mod lease;
pub(crate) mod raw;
mod rights;
mod table;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

pub(crate) use buffer::vanished;
pub use buffer::EngineBuffer;
pub use lease::Lease;
use lease::RegionState;
pub(crate) use lease::{Access, Gate, Pass, CHUNK};
pub use rights::RemoteAccess;
pub use table::{Region, RegionTable};

use crate::error::Error;
use crate::location::Location;
use crate::request::Opcode;

/// Work a transport does when memory is registered (e.g. RDMA memory registration) and undoes
/// when it is unregistered. `register` failing makes the whole registration fail and be rolled
/// back; `unregister` must not fail.
pub trait RegistrationHook: Send + Sync {
    /// The transport's name, for messages.
    fn name(&self) -> &str;
    /// Prepares `region` for this transport.
    fn register(&self, region: &Region) -> Result<(), Error>;
    /// Releases what `register` prepared.
    fn unregister(&self, region: &Region);
}

/// A caller's range to register in a batch.
#[derive(Debug, Clone, Copy)]
pub struct RangeSpec {
    /// First byte.
    pub addr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// Where the memory lives.
    pub location: Location,
    /// What peers may do with it.
    pub remote: RemoteAccess,
}

/// The registered memory of one engine.
///
/// `unregister` is synchronous, and so usable from `Drop`: it revokes the region's leases and
/// waits only for the copies or syscalls already under way (each bounded: one non-blocking
/// syscall, or a copy of at most 4 MiB), never for a peer. After it returns, no byte of the
/// region is read or written by this engine.
#[derive(Default)]
pub struct MemoryRegistry {
    registered: Mutex<Registered>,
    hooks: RwLock<Vec<Arc<dyn RegistrationHook>>>,
}

/// The ranges and, for each registered one, its liveness (and its buffer, if engine-owned),
/// by start address.
#[derive(Default)]
struct Registered {
    table: RegionTable,
    states: BTreeMap<u64, Arc<RegionState>>,
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegistry")
            .field("regions", &self.regions().len())
            .finish_non_exhaustive()
    }
}

impl MemoryRegistry {
    fn lock(&self) -> MutexGuard<'_, Registered> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hooks(&self) -> Vec<Arc<dyn RegistrationHook>> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds a transport's registration hook; it applies to registrations made from now on.
    pub fn add_hook(&self, hook: Arc<dyn RegistrationHook>) {
        self.hooks
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// Registers caller memory, with `remote` rights for peers ([`RemoteAccess::LOCAL_ONLY`]:
    /// only this engine transfers from and into it). Address 0 (NULL), length 0 and a range
    /// past the end of the address space are [`Error::InvalidArgument`].
    ///
    /// # Safety
    /// `[addr, addr + len)` must be valid for reads and writes until it is unregistered, and
    /// must not be accessed through Rust references (`&`/`&mut`) while registered: the engine
    /// (and, if it is exported, remote peers) read and write it concurrently through raw
    /// pointers. Unregister before freeing it.
    pub unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        location: Location,
        remote: RemoteAccess,
    ) -> Result<Region, Error> {
        // SAFETY: the caller upholds this function's contract for the one range.
        let mut regions = unsafe {
            self.register_batch(&[RangeSpec {
                addr,
                len,
                location,
                remote,
            }])
        }?;
        regions
            .pop()
            .ok_or_else(|| Error::invalid("empty registration"))
    }

    /// Registers several ranges: all or none (a failure rolls back the ones before it).
    ///
    /// # Safety
    /// Every range must satisfy the contract of [`MemoryRegistry::register`].
    pub unsafe fn register_batch(&self, ranges: &[RangeSpec]) -> Result<Vec<Region>, Error> {
        // SAFETY: forwarded contract.
        unsafe { self.register_owned(ranges, None) }
    }

    /// Registers `ranges`, the first kept alive by `keep` (an engine buffer) while leased.
    ///
    /// # Safety
    /// As [`MemoryRegistry::register_batch`].
    unsafe fn register_owned(
        &self,
        ranges: &[RangeSpec],
        keep: Option<Arc<EngineBuffer>>,
    ) -> Result<Vec<Region>, Error> {
        for r in ranges {
            // (The table refuses length 0 and ranges that wrap; it is bookkeeping over
            // numbers, where 0 is an address like another. No caller's memory is at NULL.)
            if r.addr.is_null() {
                return Err(Error::invalid(format!(
                    "cannot register address 0 (NULL), length {}",
                    r.len
                )));
            }
            r.location.check_supported()?;
        }
        let mut reserved = Vec::with_capacity(ranges.len());
        {
            let table = &mut self.lock().table;
            for r in ranges {
                match table.reserve(r.addr as u64, r.len as u64, r.location, r.remote) {
                    Ok(region) => reserved.push(region),
                    Err(e) => {
                        for region in &reserved {
                            table.abort(region.addr);
                        }
                        return Err(e);
                    }
                }
            }
        }
        let hooks = self.hooks();
        let mut done: Vec<(usize, usize)> = Vec::new();
        for (ri, region) in reserved.iter().enumerate() {
            for (hi, hook) in hooks.iter().enumerate() {
                if let Err(e) = hook.register(region) {
                    tracing::warn!(transport = hook.name(), addr = region.addr, error = %e, "registration hook failed; rolling back");
                    for &(r, h) in done.iter().rev() {
                        hooks[h].unregister(&reserved[r]);
                    }
                    let table = &mut self.lock().table;
                    for region in &reserved {
                        table.abort(region.addr);
                    }
                    return Err(e);
                }
                done.push((ri, hi));
            }
        }
        let mut registered = self.lock();
        let mut keep = keep;
        for region in &reserved {
            registered.table.commit(region.addr);
            let state = RegionState::new(*region, keep.take());
            registered.states.insert(region.addr, state);
        }
        Ok(reserved)
    }

    /// Registers an engine-allocated buffer, with `remote` rights for peers; the registry
    /// keeps it alive until unregistered, and each lease on it until the lease is dropped. A
    /// buffer once unregistered is retired: a same-host peer may still map its memfd, so it is
    /// never registered again ([`Error::BufferRetired`]).
    ///
    /// Same-host peers map an exported buffer's memfd, so its rights must hold in the kernel
    /// too where they can: a buffer exported read-only must be one allocated sealed against
    /// peers' writes ([`EngineBuffer::allocate_sealed`]), and a sealed one cannot be exported
    /// for writes; either mismatch is [`Error::InvalidArgument`].
    pub fn register_buffer(
        &self,
        buffer: Arc<EngineBuffer>,
        remote: RemoteAccess,
    ) -> Result<Region, Error> {
        if buffer.is_retired() {
            return Err(Error::BufferRetired {
                addr: buffer.addr(),
            });
        }
        let read_only = remote == RemoteAccess::READ;
        if remote.write && buffer.is_sealed() {
            return Err(Error::invalid(
                "an engine buffer sealed against peers' writes cannot be exported for writes",
            ));
        }
        if read_only && !buffer.is_sealed() {
            return Err(Error::invalid(
                "an engine buffer exported read-only must be allocated sealed against peers' \
                 writes (EngineBuffer::allocate_sealed, or TransferEngine::allocate_exported)",
            ));
        }
        let spec = RangeSpec {
            addr: buffer.addr() as *mut u8,
            len: buffer.len(),
            location: Location::default(),
            remote,
        };
        // SAFETY: the mapping is `len` bytes and stays mapped while the registry or a lease
        // holds the Arc; EngineBuffer hands out no references to its bytes.
        let mut regions = unsafe { self.register_owned(&[spec], Some(buffer)) }?;
        regions
            .pop()
            .ok_or_else(|| Error::invalid("empty registration"))
    }

    /// Unregisters the range that starts at `addr`: revokes every lease on it, waits for the
    /// accesses under way (bounded; see the type's docs), then undoes the transports' work. An
    /// engine buffer is retired.
    pub fn unregister(&self, addr: u64) -> Result<Region, Error> {
        self.unregister_serial(addr, None)
    }

    /// [`MemoryRegistry::unregister`] of `region` only if that registration is still in place:
    /// a range unregistered since (by anyone) and registered again, at the same address, is
    /// left alone ([`Error::AddressNotRegistered`]). For owners that record their
    /// registrations and may outlive one of them.
    pub fn unregister_region(&self, region: &Region) -> Result<Region, Error> {
        self.unregister_serial(region.addr, Some(region.serial))
    }

    fn unregister_serial(&self, addr: u64, serial: Option<u64>) -> Result<Region, Error> {
        let (region, state) = {
            let mut registered = self.lock();
            let region = registered.table.remove(addr, serial)?;
            (region, registered.states.remove(&addr))
        };
        if let Some(state) = &state {
            if let Some(buffer) = state.buffer() {
                buffer.retire();
            }
            state.revoke();
        }
        for hook in self.hooks().iter().rev() {
            hook.unregister(&region);
        }
        Ok(region)
    }

    /// The registered range that holds all of `[addr, addr + len)`.
    pub fn find(&self, addr: u64, len: u64) -> Option<Region> {
        self.lock().table.find(addr, len)
    }

    /// A lease on `[addr, addr + len)`, which must lie inside one registered range.
    pub fn lease(&self, addr: u64, len: u64) -> Result<Lease, Error> {
        // Only committed regions have a state, so the last one starting at or before `addr`
        // is the only candidate (regions never overlap); `RegionState::lease` checks the rest.
        let registered = self.lock();
        let (_, state) = registered
            .states
            .range(..=addr)
            .next_back()
            .ok_or(Error::AddressNotRegistered { addr })?;
        state
            .lease(addr, len)
            .map_err(|_| Error::AddressNotRegistered { addr })
    }

    /// The serving side's check of a peer's access in direction `opcode` (see
    /// [`crate::bounds`]): a lease on `[addr, addr + len)` inside one region exported with the
    /// right for `opcode`, or the typed refusal, before any byte moves: [`Error::OutOfBounds`]
    /// outside every exported region (a local-only region is invisible to peers),
    /// [`Error::AccessDenied`] in one exported without that right.
    pub fn check_peer_access(&self, addr: u64, len: u64, opcode: Opcode) -> Result<Lease, Error> {
        let lease = self.check_own_access(addr, len)?;
        lease.remote().check(opcode, addr, len)?;
        Ok(lease)
    }

    /// The check of this engine's own access to its memory as a target (the `local`
    /// transport, which is no remote access: local-only regions are fine): a lease on
    /// `[addr, addr + len)` inside one registered range, or [`Error::OutOfBounds`].
    pub fn check_own_access(&self, addr: u64, len: u64) -> Result<Lease, Error> {
        if len == 0 {
            return Err(Error::invalid("a transfer of 0 bytes"));
        }
        self.lease(addr, len)
            .map_err(|_| Error::OutOfBounds { addr, len })
    }

    /// The engine-allocated buffers (memfd-backed, so a same-host peer can map them) registered
    /// for remote access, each with its rights, in address order (the states are kept by
    /// address). Local-only buffers are never handed to a peer, nor buffers that map a
    /// caller's file ([`EngineBuffer::map_file`]): peers reach those over the network.
    pub fn exported(&self) -> Vec<(Arc<EngineBuffer>, RemoteAccess)> {
        self.lock()
            .states
            .values()
            .filter(|s| s.region().remote.is_exported())
            .filter_map(|s| Some((s.buffer()?.clone(), s.region().remote)))
            .filter(|(b, _)| b.fd().is_some())
            .collect()
    }

    /// Every registered range, local-only and exported, in address order.
    pub fn regions(&self) -> Vec<Region> {
        self.lock().table.registered()
    }

    /// The ranges registered for remote access (what the descriptor publishes), in address
    /// order.
    pub fn exported_regions(&self) -> Vec<Region> {
        let mut regions = self.regions();
        regions.retain(|r| r.remote.is_exported());
        regions
    }
}

impl Drop for MemoryRegistry {
    /// The engine stops: its engine buffers are retired as at `unregister` (same-host peers
    /// may still map them), so the application cannot register them with another engine.
    fn drop(&mut self) {
        let registered = self.registered.get_mut().unwrap_or_else(|p| p.into_inner());
        for state in registered.states.values() {
            if let Some(buffer) = state.buffer() {
                buffer.retire();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LOCAL_ONLY: RemoteAccess = RemoteAccess::LOCAL_ONLY;
    const READ_WRITE: RemoteAccess = RemoteAccess::READ_WRITE;

    struct CountingHook {
        live: AtomicUsize,
        fail_at: Option<u64>,
    }

    impl RegistrationHook for CountingHook {
        fn name(&self) -> &str {
            "test"
        }
        fn register(&self, region: &Region) -> Result<(), Error> {
            if Some(region.addr) == self.fail_at {
                return Err(Error::Io {
                    reason: "refused by test hook".into(),
                });
            }
            self.live.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn unregister(&self, _: &Region) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn spec(buf: &[u8], off: usize, len: usize) -> RangeSpec {
        RangeSpec {
            addr: buf[off..].as_ptr() as *mut u8,
            len,
            location: Location::default(),
            remote: RemoteAccess::LOCAL_ONLY,
        }
    }

    #[test]
    fn batch_rolls_back_completely_on_overlap_or_hook_failure() {
        let mem = vec![0u8; 1000];
        let reg = MemoryRegistry::default();
        let hook = Arc::new(CountingHook {
            live: AtomicUsize::new(0),
            fail_at: Some(mem[600..].as_ptr() as u64),
        });
        reg.add_hook(hook.clone());
        // SAFETY (test): `mem` outlives the registry use below and is not touched meanwhile.
        let overlap = unsafe { reg.register_batch(&[spec(&mem, 0, 100), spec(&mem, 50, 100)]) };
        assert_eq!(overlap.unwrap_err().code(), -3007);
        assert!(reg.regions().is_empty());
        // SAFETY (test): as above.
        let hook_fails = unsafe { reg.register_batch(&[spec(&mem, 0, 100), spec(&mem, 600, 100)]) };
        assert!(hook_fails.is_err());
        assert!(reg.regions().is_empty());
        assert_eq!(hook.live.load(Ordering::SeqCst), 0, "hook work undone");
        // SAFETY (test): as above.
        let ok =
            unsafe { reg.register_batch(&[spec(&mem, 0, 100), spec(&mem, 100, 100)]) }.unwrap();
        assert_eq!(ok.len(), 2, "adjacent ranges are fine");
        assert_eq!(hook.live.load(Ordering::SeqCst), 2);
        reg.unregister(ok[0].addr).unwrap();
        assert_eq!(reg.unregister(ok[0].addr).unwrap_err().code(), -3003);
        assert_eq!(hook.live.load(Ordering::SeqCst), 1);
    }

    /// Address 0 (NULL), length 0 and a range past the address space are each refused as
    /// `InvalidArgument` naming what is wrong, in a batch too (which then registers nothing).
    #[test]
    fn null_empty_and_wrapping_ranges_are_invalid_arguments() {
        let mem = vec![0u8; 100];
        let reg = MemoryRegistry::default();
        let cpu = Location::default();
        let refused = |r: Result<Region, Error>, what: &str| {
            let e = r.unwrap_err();
            assert!(
                e.code() == -3001 && e.to_string().contains(what),
                "{what}: {e}"
            );
        };
        // SAFETY (test): each is refused before anything is recorded or touched.
        unsafe {
            refused(
                reg.register(std::ptr::null_mut(), 4096, cpu, LOCAL_ONLY),
                "NULL",
            );
            refused(
                reg.register(mem.as_ptr() as *mut u8, 0, cpu, LOCAL_ONLY),
                "length 0",
            );
            let end = usize::MAX as *mut u8;
            refused(reg.register(end, 2, cpu, LOCAL_ONLY), "wraps");
            let null = RangeSpec {
                addr: std::ptr::null_mut(),
                ..spec(&mem, 0, 10)
            };
            let batch = reg.register_batch(&[spec(&mem, 0, 10), null]);
            assert_eq!(batch.unwrap_err().code(), -3001);
        }
        assert!(reg.regions().is_empty());
    }

    #[test]
    fn racing_overlapping_registrations_exactly_one_wins() {
        let mem = vec![0u8; 4096];
        let base = mem.as_ptr() as usize;
        for _ in 0..50 {
            let reg = Arc::new(MemoryRegistry::default());
            let wins: usize = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let reg = reg.clone();
                        s.spawn(move || {
                            let addr = (base + i * 8) as *mut u8;
                            // SAFETY (test): inside `mem`, which outlives the scope.
                            unsafe { reg.register(addr, 1024, Location::default(), READ_WRITE) }
                                .is_ok() as usize
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(wins, 1);
        }
    }

    #[test]
    fn owned_buffers_and_gpu_locations() {
        let reg = MemoryRegistry::default();
        let buf = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
        let region = reg.register_buffer(buf.clone(), LOCAL_ONLY).unwrap();
        assert_eq!(reg.find(region.addr + 10, 100), Some(region));
        assert_eq!(
            reg.register_buffer(buf, LOCAL_ONLY).unwrap_err().code(),
            -3007
        );
        let mem = [0u8; 16];
        let cuda = Location::Cuda { device: 1 };
        // SAFETY (test): refused before anything is recorded.
        let gpu = unsafe { reg.register(mem.as_ptr() as *mut u8, 16, cuda, LOCAL_ONLY) };
        // Without the cuda feature: not built; with it, no driver here (or no cuda:1). The
        // host range is never recorded as GPU memory either way.
        let code = gpu.unwrap_err().code();
        assert!([-3507, -3513, -3001].contains(&code), "{code}");
        #[cfg(not(feature = "cuda"))]
        assert_eq!(code, -3507);
    }

    #[test]
    fn unregister_revokes_leases_and_retires_engine_buffers() {
        let reg = MemoryRegistry::default();
        let buf = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
        let region = reg.register_buffer(buf.clone(), READ_WRITE).unwrap();
        let lease = reg.lease(region.addr + 100, 200).unwrap();
        assert_eq!(
            reg.lease(region.addr + 4000, 200).unwrap_err().code(),
            -3003
        );
        assert_eq!(
            reg.check_peer_access(region.addr + 4000, 200, Opcode::Read)
                .unwrap_err()
                .code(),
            -3504
        );
        assert!(lease.access().is_some());
        reg.unregister(region.addr).unwrap();
        assert!(lease.is_revoked() && lease.access().is_none());
        assert_eq!(
            reg.register_buffer(buf, READ_WRITE).unwrap_err().code(),
            -3510
        );
        assert!(reg.exported().is_empty());
    }

    #[test]
    fn peers_reach_only_exported_regions_and_only_with_their_rights() {
        let reg = MemoryRegistry::default();
        let local = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
        let read = Arc::new(EngineBuffer::allocate_sealed(4096, false).unwrap());
        let write = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
        let local = reg.register_buffer(local, LOCAL_ONLY).unwrap();
        let read = reg.register_buffer(read, RemoteAccess::READ).unwrap();
        let write = reg.register_buffer(write, RemoteAccess::WRITE).unwrap();
        let peer = |addr: u64, opcode| {
            reg.check_peer_access(addr + 8, 64, opcode)
                .err()
                .map_or(0, |e| e.code())
        };
        assert_eq!(peer(local.addr, Opcode::Read), -3504, "local-only: unseen");
        assert_eq!(peer(local.addr, Opcode::Write), -3504, "local-only: unseen");
        assert_eq!(peer(read.addr, Opcode::Read), 0);
        assert_eq!(peer(read.addr, Opcode::Write), -3511);
        assert_eq!(peer(write.addr, Opcode::Read), -3511);
        assert_eq!(peer(write.addr, Opcode::Write), 0);
        // The engine itself (the `local` transport) reaches all of them.
        assert!(reg.check_own_access(local.addr, 4096).is_ok());
        let exported: Vec<u64> = reg.exported().iter().map(|(b, _)| b.addr()).collect();
        let mut expected = vec![read.addr, write.addr];
        expected.sort_unstable();
        assert_eq!(exported, expected, "local-only buffers are never exported");
        assert_eq!(reg.exported_regions().len(), 2);
        assert_eq!(reg.regions().len(), 3);
    }

    #[test]
    fn read_only_exports_need_a_buffer_sealed_against_peers_writes() {
        let reg = MemoryRegistry::default();
        let plain = Arc::new(EngineBuffer::allocate(4096, false).unwrap());
        let sealed = Arc::new(EngineBuffer::allocate_sealed(4096, false).unwrap());
        let refused = reg.register_buffer(plain.clone(), RemoteAccess::READ);
        assert_eq!(refused.unwrap_err().code(), -3001);
        for rights in [RemoteAccess::WRITE, READ_WRITE] {
            let refused = reg.register_buffer(sealed.clone(), rights);
            assert_eq!(refused.unwrap_err().code(), -3001, "{rights}");
        }
        assert!(reg.regions().is_empty(), "nothing registered");
        reg.register_buffer(sealed, RemoteAccess::READ).unwrap();
        reg.register_buffer(plain, READ_WRITE).unwrap();
    }
}
