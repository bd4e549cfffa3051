//! Transports: how bytes move between a local range and a range of a (possibly remote) segment.
//!
//! Each transport promises: [`Transport::transfer`] resolves `Ok` only when the bytes landed — a
//! write has been acknowledged by the target, a read has all bytes here — and the serving side
//! (or, where no code of the target runs, the initiator) checked the remote range and the
//! instance id before copying a byte. The engine applies deadlines and cancellation by dropping
//! the future, so a transport must leave nothing half-owned when dropped.

mod copy;
mod local;
mod shm;
mod tcp;

use std::sync::Arc;
use std::time::Instant;

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

/// A way to move bytes (see the module docs for what every implementation promises).
pub trait Transport: Send + Sync {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;

    /// Whether this transport can reach the segment, from what it published.
    fn can_reach(&self, segment: &SegmentDescriptor) -> bool;

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
}
