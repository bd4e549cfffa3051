//! Engine-allocated memory: memfd-backed, shared-mapped, sealed against resizing, so that a
//! same-host peer can map it (the `shm` transport) and its size can be trusted.

use std::os::fd::{AsFd, BorrowedFd};

use memfd::{FileSeal, MemfdOptions};
use memmap2::{MmapOptions, MmapRaw};

use crate::error::Error;

/// A buffer of host memory the engine allocated. Its bytes are shared with the transports and
/// with peers that mapped it, so it hands out no `&[u8]`: use [`EngineBuffer::read_at`] and
/// [`EngineBuffer::write_at`], or register it and transfer.
#[derive(Debug)]
pub struct EngineBuffer {
    map: MmapRaw,
    memfd: memfd::Memfd,
    len: usize,
}

impl EngineBuffer {
    /// Allocates `len` bytes (zero-filled). With `prefault`, every page is mapped now rather than
    /// on first touch, so that the first transfer does not pay for page faults.
    pub fn allocate(len: usize, prefault: bool) -> Result<EngineBuffer, Error> {
        if len == 0 {
            return Err(Error::invalid("cannot allocate a buffer of length 0"));
        }
        let oom = |e: &dyn std::fmt::Display| Error::OutOfMemory {
            reason: format!("{len} bytes: {e}"),
        };
        let memfd = MemfdOptions::default()
            .allow_sealing(true)
            .close_on_exec(true)
            .create("yuebing-buffer")
            .map_err(|e| oom(&e))?;
        memfd.as_file().set_len(len as u64).map_err(|e| oom(&e))?;
        memfd
            .add_seals(&[FileSeal::SealShrink, FileSeal::SealGrow, FileSeal::SealSeal])
            .map_err(|e| oom(&e))?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        if prefault {
            opts.populate();
        }
        let map = opts.map_raw(memfd.as_file()).map_err(|e| oom(&e))?;
        Ok(EngineBuffer { map, memfd, len })
    }

    /// Address of the first byte (what registration and remote requests use).
    pub fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, to export to a same-host peer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.memfd.as_file().as_fd()
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), Error> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                addr: self.addr().wrapping_add(offset as u64),
                len: n as u64,
            }),
        }
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.check(offset, data.len())?;
        // SAFETY: `offset + data.len() <= self.len` was checked, the mapping is `self.len` bytes
        // long and lives as long as `self`; `data` is a separate Rust slice, so the ranges do not
        // overlap. Concurrent transfers touch the same bytes only through raw pointers.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                data.len(),
            );
        }
        Ok(())
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.check(offset, out.len())?;
        // SAFETY: the range was checked against the mapping's length as in `write_at`; `out` is
        // a distinct, exclusively borrowed Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_and_bounds() {
        let b = EngineBuffer::allocate(4096, true).unwrap();
        assert_eq!(b.len(), 4096);
        b.write_at(4090, b"abcdef").unwrap();
        let mut out = [0u8; 6];
        b.read_at(4090, &mut out).unwrap();
        assert_eq!(&out, b"abcdef");
        assert_eq!(b.write_at(4091, b"abcdef").unwrap_err().code(), -3504);
        assert!(b.read_at(usize::MAX, &mut out).is_err());
        assert_eq!(EngineBuffer::allocate(0, false).unwrap_err().code(), -3001);
    }

    #[test]
    fn memfd_is_sealed_against_resizing() {
        let b = EngineBuffer::allocate(8192, false).unwrap();
        let seals = b.memfd.seals().unwrap();
        assert!(seals.contains(&FileSeal::SealShrink) && seals.contains(&FileSeal::SealGrow));
        assert!(b.memfd.as_file().set_len(4096).is_err(), "cannot shrink");
        assert!(b.memfd.as_file().set_len(1 << 20).is_err(), "cannot grow");
    }
}
