//! Memory regions: every registered range registered with every NIC, with the access flags of
//! its remote rights, and deregistered from every NIC before `unregister` returns.
//!
//! A one-sided operation runs no code on the target, so the flags are the only check there: a
//! local-only region gets no remote flag at all (its rkey is never published either), a
//! region exported read-only gets `REMOTE_READ` and no `REMOTE_WRITE`.

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
        (end <= r.region.end()).then(|| (r.region, r.mrs.iter().map(|m| m.lkey()).collect()))
    }

    /// The rkeys of every exported range, for the descriptor.
    pub(crate) fn published(&self) -> Vec<PublishedKeys> {
        self.lock()
            .values()
            .filter(|r| r.region.remote.is_exported())
            .map(|r| PublishedKeys {
                addr: r.region.addr,
                len: r.region.len,
                rkeys: r.mrs.iter().map(|m| m.rkey()).collect(),
            })
            .collect()
    }
}

impl RegistrationHook for Regions {
    fn name(&self) -> &str {
        "rdma"
    }

    fn register(&self, region: &Region) -> Result<(), Error> {
        let access = access_of(region.remote);
        let mut mrs = Vec::with_capacity(self.nics.len());
        for nic in &self.nics {
            // SAFETY: `region` was registered with the engine, whose `register` contract makes
            // the range valid for reads and writes, with no Rust reference over it, until it is
            // unregistered; `unregister` below drops (deregisters) these regions before the
            // engine's `unregister` returns, so they never outlive the range's validity.
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
