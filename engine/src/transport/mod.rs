//! Transports: how bytes move between a local range and a range of a (possibly remote) segment.
//!
//! Each transport promises: [`Transport::transfer`] resolves `Ok` only when the bytes landed — a
//! write has been acknowledged by the target, a read has all bytes here — and the serving side
//! (or, where no code of the target runs, the initiator) checked the remote range and the
//! instance id before copying a byte. The engine applies deadlines and cancellation by dropping
//! the future, so a transport must leave nothing half-owned when dropped.

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
use crate::memory::RegistrationHook;
use crate::request::{Opcode, TransportKind};
use crate::segment::SegmentDescriptor;

/// One task, resolved: both ranges and the target's descriptor.
#[derive(Debug, Clone)]
pub struct Job {
    /// Read or write.
    pub opcode: Opcode,
    /// Local address (registered).
    pub local: u64,
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

/// Runs a large copy between raw memory ranges on the blocking pool. If the waiting future is
/// dropped (the task's deadline passed or it was canceled), the drop waits for the copy to end:
/// a copy cannot be stopped halfway, and the task must not be reported final (letting its caller
/// free the memory) while bytes of it are still being moved.
pub(crate) async fn copy_off_runtime(copy: impl FnOnce() + Send + 'static) -> Result<(), Error> {
    let done = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let flag = done.clone();
    let task = tokio::task::spawn_blocking(move || {
        copy();
        *flag.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        flag.1.notify_all();
    });
    let _wait = WaitOnDrop(done);
    task.await.map_err(|e| Error::Io {
        reason: format!("copy task failed: {e}"),
    })
}

/// Blocks in `drop` until the flag is set (bounded by one memcpy).
struct WaitOnDrop(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Drop for WaitOnDrop {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0;
        let mut finished = lock.lock().unwrap_or_else(|p| p.into_inner());
        while !*finished {
            finished = cv.wait(finished).unwrap_or_else(|p| p.into_inner());
        }
    }
}
