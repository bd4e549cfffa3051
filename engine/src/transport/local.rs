//! Same process: the target segment is this engine's own memory; a transfer is a memcpy.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Job, Transport};
use crate::bounds::check_access;
use crate::error::Error;
use crate::memory::MemoryRegistry;
use crate::request::{Opcode, TransportKind};
use crate::segment::SegmentDescriptor;

/// Copies larger than this run on the blocking pool instead of a runtime worker.
const BLOCKING_COPY: u64 = 256 << 10;

/// Moves bytes within this process.
#[derive(Debug)]
pub struct LocalTransport {
    memory: Arc<MemoryRegistry>,
    instance_id: u64,
}

impl LocalTransport {
    /// A transport over `memory`, the registry of the engine whose instance is `instance_id`.
    pub fn new(memory: Arc<MemoryRegistry>, instance_id: u64) -> Self {
        LocalTransport {
            memory,
            instance_id,
        }
    }

    /// Checks both ranges against the registry right now (it is the serving side too).
    fn check(&self, job: &Job) -> Result<(u64, u64), Error> {
        job.segment.check_instance(self.instance_id)?;
        let regions = self.memory.regions();
        check_access(&regions, job.remote, job.len)?;
        if self.memory.find(job.local, job.len).is_none() {
            return Err(Error::AddressNotRegistered { addr: job.local });
        }
        Ok(match job.opcode {
            Opcode::Write => (job.local, job.remote),
            Opcode::Read => (job.remote, job.local),
        })
    }
}

fn copy(src: u64, dst: u64, len: u64) {
    // SAFETY: both ranges were found inside registered regions; registration's contract keeps
    // them valid for reads and writes and free of Rust references while registered. They may
    // overlap (a segment copying within itself), hence `copy` (memmove), not
    // `copy_nonoverlapping`.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) }
}

impl Transport for LocalTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Local
    }

    fn can_reach(&self, segment: &SegmentDescriptor) -> bool {
        segment.instance_id == self.instance_id
    }

    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>> {
        let checked = self.check(&job);
        async move {
            let (src, dst) = checked?;
            if job.len >= BLOCKING_COPY {
                super::copy_off_runtime(move || copy(src, dst, job.len)).await?;
            } else {
                copy(src, dst, job.len);
            }
            Ok(())
        }
        .boxed()
    }
}
