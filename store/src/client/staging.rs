//! Registered scratch memory for values passed as plain byte slices: a slice of one staging
//! buffer when it has room, else a temporary engine buffer. Both are local-only: this client's
//! engine copies from and into them, peers cannot reach them (they are not in its descriptor,
//! and its serving side refuses them).

use std::sync::{Arc, Mutex};

use yuebing_engine::{EngineBuffer, TransferEngine};

use crate::error::Result;
use crate::master::alloc::RangeAllocator;

/// The staging buffer and its free space (shared with the scratch slices handed out).
pub(crate) struct Staging(Arc<Shared>);

struct Shared {
    buf: Option<Arc<EngineBuffer>>,
    free: Mutex<RangeAllocator>,
}

/// Registered memory of at least `len` bytes, returned on drop. It owns what it needs, so a
/// transfer abandoned by a dropped future can keep it alive until the transfer is final.
pub(crate) struct Scratch {
    staging: Arc<Shared>,
    engine: TransferEngine,
    kind: Kind,
    len: u64,
}

enum Kind {
    Slice { buf: Arc<EngineBuffer>, offset: u64 },
    Owned(Arc<EngineBuffer>),
}

impl Staging {
    pub(crate) fn new(engine: &TransferEngine, size: u64) -> Result<Staging> {
        let buf = match size {
            0 => None,
            n => Some(engine.allocate(n as usize, true)?),
        };
        Ok(Staging(Arc::new(Shared {
            buf,
            free: Mutex::new(RangeAllocator::new(size, 64)),
        })))
    }

    /// The staging buffer's address, if there is one.
    pub(crate) fn addr(&self) -> Option<u64> {
        self.0.buf.as_ref().map(|b| b.addr())
    }

    /// Registered (local-only) memory for `len` bytes.
    pub(crate) fn get(&self, engine: &TransferEngine, len: u64) -> Result<Arc<Scratch>> {
        let slot = self
            .0
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allocate(len);
        let kind = match (slot, &self.0.buf) {
            (Some(offset), Some(buf)) => Kind::Slice {
                buf: buf.clone(),
                offset,
            },
            _ => Kind::Owned(engine.allocate(len as usize, false)?),
        };
        Ok(Arc::new(Scratch {
            staging: self.0.clone(),
            engine: engine.clone(),
            kind,
            len,
        }))
    }
}

impl Scratch {
    /// Address of the memory.
    pub(crate) fn addr(&self) -> u64 {
        let (b, off) = self.buffer();
        b.addr() + off as u64
    }

    /// Length of the memory: what it was asked for.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    fn buffer(&self) -> (&EngineBuffer, usize) {
        match &self.kind {
            Kind::Slice { buf, offset } => (buf, *offset as usize),
            Kind::Owned(b) => (b, 0),
        }
    }

    /// Copies `parts` in, one after the other, before the transfer that sends them starts.
    pub(crate) fn fill(&self, parts: &[&[u8]]) -> Result<()> {
        let (b, mut off) = self.buffer();
        for part in parts {
            // SAFETY: this scratch range belongs to one operation (the staging allocator hands
            // it out once), which fills it before submitting the transfer that reads it, so no
            // transfer of this engine touches it meanwhile; and it is registered local-only
            // (`TransferEngine::allocate`), so no peer can read or write it: it is not in the
            // published descriptor, and the serving side refuses peers' requests for it.
            // `write_at` checks the range against the buffer.
            unsafe { b.write_at(off, part) }?;
            off += part.len();
        }
        Ok(())
    }

    /// Copies the first `out.len()` bytes out, once the transfer that filled it is final.
    pub(crate) fn read(&self, out: &mut [u8]) -> Result<()> {
        let (b, off) = self.buffer();
        // SAFETY: as for `fill`: the operation owning this range reads it only after the
        // transfer into it is final, so nothing of this engine writes it meanwhile, and no
        // peer can (the range is local-only).
        Ok(unsafe { b.read_at(off, out) }?)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        match &self.kind {
            Kind::Slice { offset, .. } => self
                .staging
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .free(*offset, self.len),
            Kind::Owned(b) => {
                let _ = self.engine.unregister(b.addr());
            }
        }
    }
}
