//! Same process: the target segment is this engine's own memory; a transfer is a memcpy. It is
//! no remote access, so it reaches local-only memory too (see `memory::rights`).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::copy::{copy_between, Target};
use super::{Job, Transport};
use crate::error::Error;
use crate::memory::{Lease, MemoryRegistry};
use crate::request::{Opcode, TransportKind};
use crate::segment::SegmentDescriptor;

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

    /// Checks the target range against the registry right now (it is the serving side too)
    /// and leases it. The engine reaching its own memory is no remote access: a local-only
    /// region is a fine target.
    fn check(&self, job: &Job) -> Result<Lease, Error> {
        job.segment.check_instance(self.instance_id)?;
        self.memory.check_own_access(job.remote, job.len)
    }
}

impl Transport for LocalTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Local
    }

    fn can_reach(&self, segment: &SegmentDescriptor, _forced: bool) -> bool {
        segment.instance_id == self.instance_id
    }

    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>> {
        let checked = self.check(&job);
        async move {
            let remote = Target(checked?);
            match job.opcode {
                Opcode::Write => copy_between(job.local, remote, job.len).await,
                Opcode::Read => copy_between(remote, job.local, job.len).await,
            }
        }
        .boxed()
    }
}
