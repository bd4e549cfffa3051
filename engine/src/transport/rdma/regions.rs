//! Memory regions: every registered range registered with every NIC, with the access flags of
//! its remote rights, and deregistered from every NIC before `unregister` returns.
//!
//! A one-sided operation runs no code on the target, so the flags are the only check there: a
//! local-only region gets no remote flag at all (its rkey is never published either), a
//! region exported read-only gets `REMOTE_READ` and no `REMOTE_WRITE`.
//!
//! A range the NICs refuse (the memlock limit reached; GPU memory without a dma-buf or
//! nvidia-peermem) stays registered with the engine without memory regions. As a local range,
//! the engine stages it through a registered bounce buffer (`transfer_engine::staging`); as a
//! peer's, it is published as refused and peers reach it over tcp.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::verbs::{MemoryRegion, MrAccess, Nic};
use crate::error::Error;
use crate::memory::{Region, RegistrationHook, RemoteAccess};

/// The flags a region with these rights gets.
pub(crate) fn access_of(remote: RemoteAccess) -> MrAccess {
    MrAccess {
        remote_read: remote.read,
        remote_write: remote.write,
    }
}

/// A registered range and its memory region on each NIC (in the transport's NIC order).
struct Registered {
    region: Region,
    mrs: Vec<Box<dyn MemoryRegion>>,
}

/// What a peer needs to reach one exported range: its rkey on each of the owner's NICs (in the
/// order of the descriptor's NIC list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedKeys {
    /// First byte.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// One rkey per NIC.
    pub rkeys: Vec<u32>,
}

/// The registration hook: memory regions of every registered range, by start address.
pub(crate) struct Regions {
    nics: Vec<Arc<dyn Nic>>,
    by_addr: Mutex<BTreeMap<u64, Registered>>,
}

impl Regions {
    pub(crate) fn new(nics: Vec<Arc<dyn Nic>>) -> Regions {
        Regions {
            nics,
            by_addr: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Registered>> {
        self.by_addr.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lkeys (one per NIC) of the registered range holding `[addr, addr + len)`, and that
    /// range's region.
    pub(crate) fn local_keys(&self, addr: u64, len: u64) -> Option<(Region, Vec<u32>)> {
        let map = self.lock();
        let (_, r) = map.range(..=addr).next_back()?;
        let end = addr.checked_add(len)?;
        let held = end <= r.region.end() && !r.mrs.is_empty();
        held.then(|| (r.region, r.mrs.iter().map(|m| m.lkey()).collect()))
    }

    /// The rkeys of every exported range, for the descriptor.
    pub(crate) fn published(&self) -> Vec<PublishedKeys> {
        self.lock()
            .values()
            .filter(|r| r.region.remote.is_exported() && !r.mrs.is_empty())
            .map(|r| PublishedKeys {
                addr: r.region.addr,
                len: r.region.len,
                rkeys: r.mrs.iter().map(|m| m.rkey()).collect(),
            })
            .collect()
    }

    /// Whether `[addr, addr + len)` lies in a range the NICs refused to register (memory
    /// that is not registered at all is not refused: a transfer of it fails as unregistered).
    pub(crate) fn is_refused(&self, addr: u64, len: u64) -> bool {
        let map = self.lock();
        let Some((_, r)) = map.range(..=addr).next_back() else {
            return false;
        };
        r.mrs.is_empty()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= r.region.end())
    }

    /// The exported ranges the NICs refused, `(addr, len)`: peers reach them another way.
    pub(crate) fn refused(&self) -> Vec<(u64, u64)> {
        self.lock()
            .values()
            .filter(|r| r.region.remote.is_exported() && r.mrs.is_empty())
            .map(|r| (r.region.addr, r.region.len))
            .collect()
    }
}

impl RegistrationHook for Regions {
    fn name(&self) -> &str {
        "rdma"
    }

    fn register(&self, region: &Region) -> Result<(), Error> {
        let mrs = match region.location.gpu() {
            None => self.register_host(region).unwrap_or_else(|e| {
                // Not fatal: the range stays registered with the engine and moves over tcp
                // (or shm), as it would without rdma.
                tracing::warn!(addr = region.addr, len = region.len, error = %e, "rdma: range not registered with the NICs (memlock limit?); it is staged through registered memory, and peers reach it over tcp");
                Vec::new()
            }),
            Some(gpu) => self.register_gpu(region, gpu),
        };
        self.lock().insert(
            region.addr,
            Registered {
                region: *region,
                mrs,
            },
        );
        Ok(())
    }

    fn unregister(&self, region: &Region) {
        self.forget(region);
    }
}

impl Regions {
    /// Host memory: a region on every NIC, or the registration fails.
    fn register_host(&self, region: &Region) -> Result<Vec<Box<dyn MemoryRegion>>, Error> {
        let access = access_of(region.remote);
        let mut mrs = Vec::with_capacity(self.nics.len());
        for nic in &self.nics {
            // SAFETY: `region` was registered with the engine, whose `register` contract makes
            // the range valid for reads and writes, with no Rust reference over it, until it is
            // unregistered; `unregister` drops (deregisters) these regions before the engine's
            // `unregister` returns, so they never outlive the range's validity.
            let mr = unsafe { nic.register(region.addr, region.len, access) }.map_err(|e| {
                Error::invalid(format!(
                    "rdma: registering {:#x}+{} with {}: {e}",
                    region.addr,
                    region.len,
                    nic.info().name
                ))
            })?;
            // A failure after this point drops the ones made so far: deregistered.
            mrs.push(mr);
        }
        Ok(mrs)
    }

    /// GPU memory: through its dma-buf, else as host memory (nvidia-peermem); where neither
    /// works, no region at all, and the engine stages it through registered host memory
    /// rather than refuse the registration.
    fn register_gpu(&self, region: &Region, gpu: u32) -> Vec<Box<dyn MemoryRegion>> {
        let access = access_of(region.remote);
        let mut mrs = Vec::with_capacity(self.nics.len());
        for nic in &self.nics {
            #[cfg(feature = "cuda")]
            let through_dmabuf = crate::gpu::dmabuf(gpu, region.addr, region.len)
                .map_err(|e| Error::invalid(e.to_string()))
                .and_then(|fd| {
                    use std::os::fd::AsFd;
                    // SAFETY: as for host memory (`register_host`); `fd` is the dma-buf of
                    // exactly this range, which the driver just gave.
                    unsafe { nic.register_dmabuf(fd.as_fd(), region.addr, region.len, access) }
                });
            #[cfg(not(feature = "cuda"))]
            let through_dmabuf: Result<Box<dyn MemoryRegion>, Error> =
                Err(Error::invalid("built without cuda"));
            let mr = through_dmabuf.or_else(|e| match nic.registers_gpu_addresses() {
                // SAFETY: as for host memory; nvidia-peermem pins the GPU range for the NIC.
                true => unsafe { nic.register(region.addr, region.len, access) },
                false => Err(e),
            });
            match mr {
                Ok(mr) => mrs.push(mr),
                Err(e) => {
                    tracing::warn!(gpu, addr = region.addr, nic = %nic.info().name, error = %e, "rdma: GPU memory not registered with the NIC (no dma-buf, no nvidia-peermem); it is staged through registered host memory, and peers reach it over tcp");
                    return Vec::new();
                }
            }
        }
        mrs
    }

    fn forget(&self, region: &Region) {
        let removed = {
            let mut map = self.lock();
            match map.get(&region.addr) {
                Some(r) if r.region.serial == region.serial => map.remove(&region.addr),
                _ => None,
            }
        };
        // Deregistered on every NIC here, before the engine's `unregister` returns.
        drop(removed);
    }
}
