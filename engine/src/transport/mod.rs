//! Transports: how bytes move between a local range and a range of a (possibly remote) segment.
//!
//! Each transport promises: [`Transport::transfer`] resolves `Ok` only when the bytes landed — a
//! write has been acknowledged by the target, a read has all bytes here — and the serving side
//! (or, where no code of the target runs, the initiator) checked the remote range and the
//! instance id before copying a byte. The engine applies deadlines and cancellation by dropping
//! the future, so a transport must leave nothing half-owned when dropped.

pub(crate) mod copy;
mod local;
#[cfg(feature = "rdma")]
pub mod rdma;
mod shm;
mod tcp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

pub use local::LocalTransport;
pub use shm::ShmTransport;
pub use tcp::{TcpConfig, TcpTransport};

use crate::error::Error;
use crate::memory::{Lease, RegistrationHook};
use crate::request::{Opcode, TransportKind};
use crate::segment::SegmentDescriptor;

/// One task, resolved: both ranges and the target's descriptor.
#[derive(Debug, Clone)]
pub struct Job {
    /// Read or write.
    pub opcode: Opcode,
    /// The local range, leased: unregistering it revokes the lease, and the transport then
    /// stops touching it.
    pub local: Lease,
    /// Address in the target segment.
    pub remote: u64,
    /// Bytes to move.
    pub len: u64,
    /// The target as this engine last saw it (name, instance id, buffers, transport sections).
    pub segment: Arc<SegmentDescriptor>,
    /// When the engine gives up on the task.
    pub deadline: Instant,
    /// Whether the thread that polls the job's future also polls the engine's I/O driver when
    /// the future yields (a worker of the engine's runtime), so that a transport may poll for a
    /// quick answer instead of parking. False for a caller on another runtime or a plain thread.
    pub can_spin: bool,
}

/// Waits between failed accepts: 10 ms, doubling up to 1 s.
#[derive(Debug, Default)]
pub(crate) struct Backoff(u32);

impl Backoff {
    /// The next wait.
    pub(crate) fn next(&mut self) -> Duration {
        let wait = Duration::from_millis(10u64 << self.0.min(7)).min(Duration::from_secs(1));
        self.0 = self.0.saturating_add(1);
        wait
    }
}

/// A way to move bytes (see the module docs for what every implementation promises).
pub trait Transport: Send + Sync {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;

    /// Whether this transport can reach the segment, from what it published. It answers at
    /// once, without blocking: work it needs first (a connection, a mapping) runs in the
    /// background, and until it is done the answer may be no, unless the caller `forced` this
    /// transport, in which case a yes only means it may reach the segment, and
    /// [`Transport::transfer`] does that work (and reports its failure).
    fn can_reach(&self, segment: &SegmentDescriptor, forced: bool) -> bool;

    /// Whether this transport reaches `[addr, addr + len)` of `segment` (one it can reach): a
    /// transport may reach only part of a peer's exported memory, as shm maps only the peer's
    /// engine-allocated buffers; the engine then sends that range another way. Yes by default.
    fn covers(&self, segment: &SegmentDescriptor, addr: u64, len: u64) -> bool {
        let _ = (segment, addr, len);
        true
    }

    /// Whether this transport can move the local range `[addr, addr + len)` (registered): a
    /// transport may not reach all of this engine's memory, as rdma reaches GPU memory only
    /// where the NICs could register it; the engine then stages the request through a bounce
    /// buffer the transport reaches (`transfer_engine::staging`). Yes by default.
    fn covers_local(&self, addr: u64, len: u64) -> bool {
        let _ = (addr, len);
        true
    }

    /// Does, off the async threads, the work that lets [`Transport::can_reach`] say yes to
    /// `segment` (a connection, a mapping); the engine awaits it when it opens a segment or
    /// learns of a restart. A failure is the transport's to remember (it then says no).
    fn prepare(&self, segment: &SegmentDescriptor) -> BoxFuture<'static, ()> {
        let _ = segment;
        Box::pin(std::future::ready(()))
    }

    /// Moves one task's bytes; resolves when they landed.
    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>>;

    /// Work to do when memory is registered (e.g. RDMA memory registration).
    fn registration_hook(&self) -> Option<Arc<dyn RegistrationHook>> {
        None
    }

    /// Drops what the transport keeps for `segment` (connections, mappings): the segment was
    /// closed or restarted.
    fn forget(&self, segment: &SegmentDescriptor) {
        let _ = segment;
    }

    /// What this transport publishes in the engine's descriptor.
    fn publish(&self) -> Option<serde_json::Value> {
        None
    }

    /// Serves a peer's connection handshake (sent over the engine's control service) and
    /// returns the answer. Transports that need none refuse.
    fn accept(&self, request: &[u8]) -> Result<Vec<u8>, Error> {
        let _ = request;
        Err(Error::invalid(format!(
            "the {} transport takes no handshake",
            self.kind().name()
        )))
    }
}
