//! Staging: a local range the chosen transport cannot reach directly goes through a bounce
//! buffer it can. The case this exists for: GPU memory the RDMA NICs could not register (no
//! dma-buf, no nvidia-peermem) still moves over rdma, through registered host memory, as
//! Mooncake stages it; not over tcp.
//!
//! A write copies the local bytes into the bounce, then the transport sends the bounce; a read
//! has the transport fill the bounce, then copies it out. Both copies are the engine's own
//! (`copy_between`, the driver's copies for GPU memory), final when they return or are
//! dropped; the transport's part is final by the transport's promise. A bounce goes back to
//! the pool only after both, so no transfer's memory is another's while in use.

use std::sync::{Arc, Mutex};

use super::TransferEngine;
use crate::error::Error;
use crate::memory::EngineBuffer;
use crate::request::Opcode;
use crate::transport::copy::copy_between;
use crate::transport::{Job, Transport};

/// The smallest bounce made (larger ones are the request's size, rounded up to a power of 2).
const MIN_BOUNCE: usize = 1 << 20;
/// Bounce bytes kept for reuse; more are unregistered when given back.
const POOL_BYTES: usize = 256 << 20;

/// Bounce buffers, registered with the engine (so every transport's registration hook, the
/// NICs' memory regions included, has run on them).
#[derive(Default)]
pub(crate) struct Staging {
    free: Mutex<Vec<Arc<EngineBuffer>>>,
}

impl Staging {
    /// The smallest free bounce of at least `len` bytes.
    fn take(&self, len: usize) -> Option<Arc<EngineBuffer>> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let (i, _) = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= len)
            .min_by_key(|(_, b)| b.len())?;
        Some(free.swap_remove(i))
    }

    /// Gives `b` back; false when the pool is full (the caller unregisters it).
    fn give(&self, b: Arc<EngineBuffer>) -> bool {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = free.iter().map(|b| b.len()).sum();
        if kept + b.len() > POOL_BYTES {
            return false;
        }
        free.push(b);
        true
    }
}

/// A bounce on loan; given back when dropped (the transfer and its copies are over then:
/// their futures are dropped before this guard, see `staged`).
struct Loan {
    engine: TransferEngine,
    buffer: Option<Arc<EngineBuffer>>,
}

impl Loan {
    /// Unregisters the bounce rather than keep it (a transport that does not reach it).
    fn discard(mut self) {
        if let Some(b) = self.buffer.take() {
            let _ = self.engine.unregister(b.addr());
        }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            if !self.engine.inner.staging.give(b.clone()) {
                let _ = self.engine.unregister(b.addr());
            }
        }
    }
}

impl TransferEngine {
    fn bounce(&self, len: u64) -> Result<Loan, Error> {
        let len = usize::try_from(len).map_err(|_| Error::invalid("request too large"))?;
        let buffer = match self.inner.staging.take(len) {
            Some(b) => b,
            None => self.allocate(len.next_power_of_two().max(MIN_BOUNCE), true)?,
        };
        Ok(Loan {
            engine: self.clone(),
            buffer: Some(buffer),
        })
    }
}

/// Moves `job` through a bounce that `transport` reaches.
pub(super) async fn staged(
    engine: &TransferEngine,
    job: Job,
    transport: &dyn Transport,
) -> Result<(), Error> {
    let loan = engine.bounce(job.len)?;
    let addr = loan.buffer.as_ref().map_or(0, |b| b.addr());
    if !transport.covers_local(addr, job.len) {
        loan.discard();
        return Err(Error::invalid(format!(
            "the {} transport reaches neither the local range {:#x}+{} nor a bounce buffer",
            transport.kind().name(),
            job.local.addr(),
            job.len
        )));
    }
    let bounce = engine.inner.memory.lease(addr, job.len)?;
    let local = job.local.clone();
    let len = job.len;
    let through = Job {
        local: bounce.clone(),
        ..job
    };
    let work = async move {
        match through.opcode {
            Opcode::Write => {
                copy_between(local, bounce, len).await?;
                transport.transfer(through).await
            }
            Opcode::Read => {
                let bounce_again = through.local.clone();
                transport.transfer(through).await?;
                copy_between(bounce_again, local, len).await
            }
        }
    };
    // Struct fields drop in declaration order: the work (a copy or the transfer, final once
    // dropped) before the loan goes back to the pool, also when this future is dropped.
    let mut ordered = Ordered {
        work: Box::pin(work),
        _loan: loan,
    };
    ordered.work.as_mut().await
}

/// The work on a bounce, then the bounce's loan (in this order: see `staged`).
struct Ordered<F> {
    work: std::pin::Pin<Box<F>>,
    _loan: Loan,
}
