//! Revocable leases on registered regions: how releasing memory stops every access to it.
//!
//! Every access to a registered region — serving a peer's request, sending or receiving an
//! initiator's payload, a local or shm copy — holds a [`Lease`] on the region for as long as it
//! may move bytes, and touches the memory only inside a short [`Access`] taken from that lease:
//! one copy (at most [`CHUNK`] bytes) or one non-blocking syscall, never across an `.await`.
//!
//! Unregistering revokes the region: its [`Gate`] closes, so no new access starts; the leases'
//! holders are woken ([`Lease::revoked`]) and give up (a tcp target shuts the connection down, an
//! initiator fails its task); and `unregister` waits only for the accesses already under way to
//! end. It never waits for a peer, and after it returns no byte of the region is read or written.
//!
//! The same [`Gate`] serves per-task claims: a waiter that stops waiting (completion, deadline,
//! cancel) closes its claim's gate, and from then on the engine's tasks leave its memory alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::buffer::EngineBuffer;
use super::raw::Span;
use super::table::Region;
use crate::error::Error;

/// Largest copy made under one access: the longest `unregister` (or a claim's give-up) waits
/// for an access under way. About half a millisecond at memcpy speed.
pub(crate) const CHUNK: usize = 4 << 20;

/// A switch that lets accesses in until it is closed, then waits for those inside to leave.
///
/// Entering and closing order through one sequentially consistent pair (an access counts
/// itself in, then looks at the flag; closing sets the flag, then looks at the count), so either
/// the access sees the gate closed and backs out, or closing sees it inside and waits for it.
/// Accesses may nest (a copy within one region enters its gate twice).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    inside: AtomicUsize,
    closed: AtomicBool,
    wait: Mutex<()>,
    left: Condvar,
}

/// One access through a [`Gate`]; leaving on drop.
#[derive(Debug)]
pub(crate) struct Pass<'a>(&'a Gate);

impl Gate {
    /// Lets one access in, unless the gate is closed.
    pub(crate) fn enter(&self) -> Option<Pass<'_>> {
        self.inside.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.leave();
            return None;
        }
        Some(Pass(self))
    }

    fn leave(&self) {
        let before = self.inside.fetch_sub(1, Ordering::SeqCst);
        if before == 1 && self.closed.load(Ordering::SeqCst) {
            let _lock = self.wait.lock().unwrap_or_else(|p| p.into_inner());
            self.left.notify_all();
        }
    }

    /// Whether the gate was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Closes the gate (no new access gets in) without waiting.
    pub(crate) fn shut(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Closes the gate and waits until every access inside has left. Blocks for at most one
    /// access (a copy of at most [`CHUNK`] bytes or one syscall), which never waits on a peer.
    pub(crate) fn close(&self) {
        self.shut();
        let mut lock = self.wait.lock().unwrap_or_else(|p| p.into_inner());
        while self.inside.load(Ordering::SeqCst) > 0 {
            // The timeout is a backstop only: leaving notifies under the same lock.
            lock = self
                .left
                .wait_timeout(lock, Duration::from_millis(1))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// A registered region's liveness, shared by its leases.
#[derive(Debug)]
pub(crate) struct RegionState {
    region: Region,
    gate: Gate,
    revoked: CancellationToken,
    /// An engine buffer stays mapped while any lease holds this state, so that dropping the
    /// buffer never blocks and never unmaps memory under a copy.
    keep: Option<Arc<EngineBuffer>>,
}

impl RegionState {
    pub(crate) fn new(region: Region, keep: Option<Arc<EngineBuffer>>) -> Arc<RegionState> {
        Arc::new(RegionState {
            region,
            gate: Gate::default(),
            revoked: CancellationToken::new(),
            keep,
        })
    }

    /// The region.
    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    /// The engine buffer behind the region, if the engine allocated it.
    pub(crate) fn buffer(&self) -> Option<&Arc<EngineBuffer>> {
        self.keep.as_ref()
    }

    /// Stops every access: no new one starts, the leases' holders are woken, and this returns
    /// once the accesses under way have ended.
    pub(crate) fn revoke(&self) {
        self.gate.shut();
        self.revoked.cancel();
        self.gate.close();
    }

    /// A lease on `[addr, addr + len)`, which must lie inside the region.
    pub(crate) fn lease(self: &Arc<Self>, addr: u64, len: u64) -> Result<Lease, Error> {
        let r = &self.region;
        let inside = addr >= r.addr && addr.checked_add(len).is_some_and(|end| end <= r.end());
        if !inside || len == 0 || usize::try_from(len).is_err() {
            return Err(Error::OutOfBounds { addr, len });
        }
        Ok(Lease {
            state: self.clone(),
            addr,
            len,
        })
    }
}

/// A revocable right to move bytes of `[addr, addr + len)` inside one registered region.
#[derive(Debug, Clone)]
pub struct Lease {
    state: Arc<RegionState>,
    addr: u64,
    len: u64,
}

/// One access to a leased range: while it lives, the range is registered and valid.
#[derive(Debug)]
pub(crate) struct Access<'a> {
    _pass: Pass<'a>,
    span: Span<'a>,
}

impl Access<'_> {
    /// The leased range.
    pub(crate) fn span(&self) -> Span<'_> {
        self.span
    }
}

impl Lease {
    /// First byte of the leased range.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length of the leased range.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a lease covers at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What peers may do with the leased region.
    pub(crate) fn remote(&self) -> super::RemoteAccess {
        self.state.region().remote
    }

    /// The serial of the registration the lease is on.
    #[cfg(feature = "rdma")]
    pub(crate) fn serial(&self) -> u64 {
        self.state.region().serial
    }

    /// Whether the region was unregistered (every access is refused from then on).
    pub fn is_revoked(&self) -> bool {
        self.state.gate.is_closed()
    }

    /// Resolves once the region is unregistered.
    pub(crate) fn revoked(&self) -> WaitForCancellationFuture<'_> {
        self.state.revoked.cancelled()
    }

    /// A lease on `[addr + offset, addr + offset + len)`, inside this one.
    pub(crate) fn sub(&self, offset: u64, len: u64) -> Result<Lease, Error> {
        let addr = self.addr.checked_add(offset);
        match addr {
            Some(a) if offset.checked_add(len).is_some_and(|end| end <= self.len) && len > 0 => {
                Ok(Lease {
                    state: self.state.clone(),
                    addr: a,
                    len,
                })
            }
            _ => Err(Error::OutOfBounds {
                addr: addr.unwrap_or(u64::MAX),
                len,
            }),
        }
    }

    /// Starts one access, unless the region was unregistered. Keep it for one copy or one
    /// syscall: it is not `Send`, so it cannot be held across an `.await` in a task.
    pub(crate) fn access(&self) -> Option<Access<'_>> {
        let pass = self.state.gate.enter()?;
        let ptr = std::ptr::NonNull::new(self.addr as *mut u8)?;
        // SAFETY: the range lies inside a region registered under `MemoryRegistry::register`'s
        // contract (valid for reads and writes, never behind a Rust reference, until
        // unregistered) or an engine buffer's mapping, which this lease keeps alive. The pass
        // holds the region's gate open: `unregister` revokes the region and waits for every
        // pass to leave before it returns, so the range stays registered while the span lives.
        let span = unsafe { Span::new(ptr, self.len as usize) };
        // A buffer mapping a caller's file may lose pages to a truncation: kernel copies only.
        let span = span.vanishing(self.state.buffer().is_some_and(|b| b.is_file()));
        // GPU memory: its bytes move by the driver's copies only.
        let span = span.on_gpu(self.state.region().location.gpu());
        Some(Access { _pass: pass, span })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::location::Location;

    #[test]
    fn a_closed_gate_lets_nothing_in_and_waits_for_those_inside() {
        let gate = Arc::new(Gate::default());
        let pass = gate.enter().unwrap();
        let nested = gate.enter().unwrap();
        let closer = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.close())
        };
        while !gate.is_closed() {
            std::thread::yield_now();
        }
        assert!(gate.enter().is_none(), "closed to newcomers");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!closer.is_finished(), "waits while accesses are inside");
        drop(nested);
        drop(pass);
        closer.join().unwrap();
        gate.close();
    }

    #[test]
    fn a_revoked_lease_gives_no_access_and_subranges_are_checked() {
        let mut mem = vec![0u8; 64];
        let region = Region {
            addr: mem.as_mut_ptr() as u64,
            len: 64,
            location: Location::default(),
            remote: crate::memory::RemoteAccess::LOCAL_ONLY,
            serial: 0,
        };
        let state = RegionState::new(region, None);
        assert!(state.lease(region.addr + 60, 8).is_err());
        let lease = state.lease(region.addr, 64).unwrap();
        assert!(lease.sub(60, 8).is_err());
        assert_eq!(lease.sub(8, 8).unwrap().addr(), region.addr + 8);
        assert_eq!(lease.access().unwrap().span().len(), 64);
        state.revoke();
        assert!(lease.is_revoked());
        assert!(lease.access().is_none());
        drop(mem);
    }
}
