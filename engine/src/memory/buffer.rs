//! Engine-allocated memory: memfd-backed, shared-mapped, sealed against resizing, so that a
//! same-host peer can map it (the `shm` transport) and its size can be trusted. A buffer meant
//! for read-only export is also sealed against peers' writes (see
//! [`EngineBuffer::allocate_sealed`]).
//!
//! A buffer may also map part of a caller's file ([`EngineBuffer::map_file`]: store space
//! mounted from `/dev/shm` or a filesystem, Mooncake's `mount_segment`). Its owner may truncate
//! that file at any time, so such a buffer is never handed to same-host peers (they reach it
//! over tcp), and the engine moves its bytes only by kernel copies (see `raw`): a truncation
//! fails transfers with an error instead of killing the process with SIGBUS.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use memfd::{FileSeal, MemfdOptions};
use memmap2::{MmapOptions, MmapRaw};

use super::raw::{self, Span};
use crate::error::Error;

/// A buffer of host memory the engine allocated. Its bytes are shared with the transports and
/// with peers that mapped it, so it hands out no `&[u8]`: use [`EngineBuffer::read_at`] and
/// [`EngineBuffer::write_at`] (unsafe: only the caller can know that no transfer or peer writes
/// those bytes meanwhile), or register it and transfer.
///
/// Once unregistered, or once its engine stops, a buffer is retired: same-host peers may still
/// map its memfd, and a copy of theirs already in flight may still land in it, so it is never
/// registered again and its contents are no longer meaningful.
#[derive(Debug)]
pub struct EngineBuffer {
    map: MmapRaw,
    backing: Backing,
    len: usize,
    /// Sealed against writes through any mapping made after allocation (`F_SEAL_FUTURE_WRITE`).
    sealed: bool,
    retired: AtomicBool,
}

/// What a buffer's mapping is of.
#[derive(Debug)]
enum Backing {
    /// The engine's own memfd, sealed against resizing: same-host peers may map it.
    Memfd(memfd::Memfd),
    /// A caller's file, which others may truncate.
    File,
}

impl EngineBuffer {
    /// Allocates `len` bytes (zero-filled). With `prefault`, every page is mapped now rather than
    /// on first touch, so that the first transfer does not pay for page faults.
    pub fn allocate(len: usize, prefault: bool) -> Result<EngineBuffer, Error> {
        Self::allocate_with(len, prefault, false)
    }

    /// As [`EngineBuffer::allocate`], and sealed against peers' writes: the memfd gets
    /// `F_SEAL_FUTURE_WRITE` once this buffer's own mapping exists, so that mapping (through
    /// which the engine and its transports copy) stays writable, but no process can map the
    /// memfd writable or `write(2)` to it any more. A same-host peer that imports the buffer
    /// can then only map it read-only: the kernel, not only the peer's code, keeps the peer
    /// from writing it. What a buffer exported read-only must be (see
    /// [`MemoryRegistry::register_buffer`](super::MemoryRegistry::register_buffer)).
    pub fn allocate_sealed(len: usize, prefault: bool) -> Result<EngineBuffer, Error> {
        Self::allocate_with(len, prefault, true)
    }

    fn allocate_with(len: usize, prefault: bool, sealed: bool) -> Result<EngineBuffer, Error> {
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
        let mut opts = MmapOptions::new();
        opts.len(len);
        if prefault {
            opts.populate();
        }
        // Mapped before the seals: a future-write seal leaves only mappings made before it
        // writable. Sealing the seals last keeps anyone (an importer too) from adding more.
        let map = opts.map_raw(memfd.as_file()).map_err(|e| oom(&e))?;
        let mut seals = vec![FileSeal::SealShrink, FileSeal::SealGrow];
        if sealed {
            seals.push(FileSeal::SealFutureWrite);
        }
        seals.push(FileSeal::SealSeal);
        memfd.add_seals(&seals).map_err(|e| Error::Io {
            reason: format!(
                "sealing an engine buffer{}: {e}",
                match sealed {
                    true => " against peers' writes (F_SEAL_FUTURE_WRITE needs Linux 5.1)",
                    false => "",
                }
            ),
        })?;
        Ok(EngineBuffer {
            map,
            backing: Backing::Memfd(memfd),
            len,
            sealed,
            retired: AtomicBool::new(false),
        })
    }

    /// Maps `len` bytes of the regular `file` from `offset` (a multiple of the page size),
    /// shared and writable: writes through the engine land in the file, as they do for the
    /// file's other users. The range must lie inside the file as it is now. A device (such as
    /// device DAX) is refused: it has no size to check the range against. The file's owner may
    /// truncate it later; the engine then fails transfers that touch the lost pages (see the
    /// module's docs), so such a buffer is safe to export, but never to same-host peers'
    /// mappings. (A file shrunk and grown back reads as zeros where it was cut: that is no
    /// error to the engine.)
    pub fn map_file(file: &File, offset: u64, len: usize) -> Result<EngineBuffer, Error> {
        if len == 0 {
            return Err(Error::invalid("cannot map 0 bytes of a file"));
        }
        let page = rustix::param::page_size() as u64;
        if !offset.is_multiple_of(page) {
            return Err(Error::invalid(format!(
                "file offset {offset} is not a multiple of the page size {page}"
            )));
        }
        let size = file.metadata().map_err(|e| Error::Io {
            reason: format!("reading the file's size: {e}"),
        })?;
        if !size.is_file() {
            // A device (DAX, /dev/null) has no size to check a range against.
            return Err(Error::invalid(
                "only a regular file (on tmpfs, hugetlbfs or a filesystem) can be mapped",
            ));
        }
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > size.len()) {
            return Err(Error::invalid(format!(
                "{len} bytes from offset {offset} lie past the end of the file ({} bytes)",
                size.len()
            )));
        }
        let map = MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(file)
            .map_err(|e| Error::Io {
                reason: format!("mapping {len} bytes of the file: {e}"),
            })?;
        let buffer = EngineBuffer {
            map,
            backing: Backing::File,
            len,
            sealed: false,
            retired: AtomicBool::new(false),
        };
        // Its bytes move only by kernel copies (`process_vm_writev`), which a seccomp filter
        // may forbid: found out now rather than at every transfer.
        let mut probe = [0u8; 1];
        raw::copy_out(buffer.span(), &mut probe).map_err(|e| Error::Io {
            reason: format!(
                "cannot copy a file's bytes through the kernel (is process_vm_writev \
                 forbidden by a seccomp filter?): {e}"
            ),
        })?;
        Ok(buffer)
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

    /// The memfd, to export to a same-host peer; `None` for a buffer that maps a caller's
    /// file ([`EngineBuffer::map_file`]), which is never handed to peers.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backing {
            Backing::Memfd(m) => Some(m.as_file().as_fd()),
            Backing::File => None,
        }
    }

    /// Whether the buffer maps a caller's file, whose pages may vanish if it is truncated
    /// ([`EngineBuffer::map_file`]).
    pub fn is_file(&self) -> bool {
        matches!(self.backing, Backing::File)
    }

    /// Whether the buffer is sealed against peers' writes ([`EngineBuffer::allocate_sealed`]).
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Whether the buffer was unregistered (see the type's docs).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    /// The whole mapping as a span, valid while `self` lives.
    fn span(&self) -> Span<'_> {
        let ptr = NonNull::new(self.map.as_mut_ptr()).unwrap_or(NonNull::dangling());
        // SAFETY: the mapping is `self.len` bytes, readable and writable, and stays mapped while
        // `self` lives; the buffer never hands out a reference to its bytes. A file's pages may
        // vanish: the span says so, and its bytes then move by kernel copies only.
        unsafe { Span::new(ptr, self.len) }.vanishing(self.is_file())
    }

    fn part(&self, offset: usize, n: usize) -> Result<Span<'_>, Error> {
        self.span()
            .sub(offset, n)
            .ok_or_else(|| Error::OutOfBounds {
                addr: self.addr().wrapping_add(offset as u64),
                len: n as u64,
            })
    }

    /// Copies `data` into the buffer at `offset`.
    ///
    /// # Safety
    /// Nothing else may write or read `[offset, offset + data.len())` meanwhile: no transfer in
    /// flight on it, and no peer that could reach it (a buffer registered for remote access is
    /// reachable by peers; a local-only one is not). Racing with them is a data race on memory
    /// that only raw pointers reach (see the `raw` module: no Rust reference to it exists), as
    /// when a transport copies exported memory that a peer writes: the bytes copied, and those
    /// a racing copy leaves, are unspecified. A caller that exported the buffer accepted that
    /// from peers (Mooncake's `write_bytes_to_buffer` and `read_bytes_from_buffer` likewise).
    pub unsafe fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        raw::copy_in(data, self.part(offset, data.len())?).map_err(vanished)?;
        Ok(())
    }

    /// Copies `len` bytes from `src` into the buffer at `offset`, through raw pointers only:
    /// `src` may be any memory, transferable memory and this buffer's own bytes included (the
    /// copy allows overlap, as `memmove`).
    ///
    /// # Safety
    /// `src` is valid for reads of `len` bytes for the whole call (mapped, not freed), and no
    /// Rust reference covers it while others may write it. A transfer or a peer touching
    /// either range meanwhile races with the copy, as described at
    /// [`EngineBuffer::write_at`]: the bytes are then unspecified.
    pub unsafe fn write_from(
        &self,
        offset: usize,
        src: *const u8,
        len: usize,
    ) -> Result<(), Error> {
        let dst = self.part(offset, len)?;
        let Some(src) = NonNull::new(src.cast_mut()) else {
            return match len {
                0 => Ok(()),
                _ => Err(Error::invalid("the source of a copy into a buffer is NULL")),
            };
        };
        // SAFETY: valid for reads of `len` bytes during this call and reached by raw pointer
        // only (the caller's promise); the span is only read, and does not outlive the call.
        let src = unsafe { Span::new(src, len) };
        // The source may be this buffer's own (file) bytes: kernel copies then.
        raw::copy(src.vanishing(self.is_file()), dst).map_err(vanished)
    }

    /// Copies `out.len()` bytes at `offset` into `out`.
    ///
    /// # Safety
    /// Nothing else may write `[offset, offset + out.len())` meanwhile (see
    /// [`EngineBuffer::write_at`]).
    pub unsafe fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        raw::copy_out(self.part(offset, out.len())?, out).map_err(vanished)?;
        Ok(())
    }
}

/// The error of a kernel copy that failed: `EFAULT` where the file behind a buffer was
/// truncated, anything else where the kernel refused the copy itself.
pub(crate) fn vanished(e: std::io::Error) -> Error {
    let reason = match e.raw_os_error() {
        Some(libc::EFAULT) => format!("the memory is gone (its file was truncated): {e}"),
        _ => format!("the kernel refused to copy file-backed memory: {e}"),
    };
    Error::Io { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_and_bounds() {
        let b = EngineBuffer::allocate(4096, true).unwrap();
        assert_eq!(b.len(), 4096);
        let mut out = [0u8; 6];
        // SAFETY (test): the buffer is not registered; nothing else touches it.
        unsafe {
            b.write_at(4090, b"abcdef").unwrap();
            b.read_at(4090, &mut out).unwrap();
            assert_eq!(b.write_at(4091, b"abcdef").unwrap_err().code(), -3504);
            assert!(b.read_at(usize::MAX, &mut out).is_err());
        }
        assert_eq!(&out, b"abcdef");
        assert_eq!(EngineBuffer::allocate(0, false).unwrap_err().code(), -3001);
    }

    #[test]
    fn memfd_is_sealed_against_resizing() {
        let b = EngineBuffer::allocate(8192, false).unwrap();
        let Backing::Memfd(memfd) = &b.backing else {
            panic!("an allocated buffer is a memfd")
        };
        let seals = memfd.seals().unwrap();
        assert!(seals.contains(&FileSeal::SealShrink) && seals.contains(&FileSeal::SealGrow));
        assert!(memfd.as_file().set_len(4096).is_err(), "cannot shrink");
        assert!(memfd.as_file().set_len(1 << 20).is_err(), "cannot grow");
        assert!(!b.is_sealed() && !seals.contains(&FileSeal::SealFutureWrite));
    }

    #[test]
    fn a_sealed_buffer_is_written_by_its_owner_and_mapped_only_read_only_by_others() {
        use std::os::unix::fs::FileExt;
        let b = EngineBuffer::allocate_sealed(8192, false).unwrap();
        assert!(b.is_sealed());
        // SAFETY (test): the buffer is not registered; nothing else touches it.
        unsafe { b.write_at(100, b"owner").unwrap() };
        let Backing::Memfd(memfd) = &b.backing else {
            panic!("an allocated buffer is a memfd")
        };
        let file = memfd.as_file();
        assert!(file.write_at(b"peer", 0).is_err(), "write(2) refused");
        let writable = MmapOptions::new().len(8192).map_raw(file);
        assert!(writable.is_err(), "a writable shared mapping is refused");
        let read_only = MmapOptions::new().len(8192).map_raw_read_only(file);
        assert!(read_only.is_ok(), "a read-only one is fine");
        let mut out = [0u8; 5];
        file.read_at(&mut out, 100).unwrap();
        assert_eq!(&out, b"owner", "peers read what the owner wrote");
        // SAFETY (test): a read-only view of the memfd; nothing writes through it.
        let view = unsafe { MmapOptions::new().len(8192).map(file) }.unwrap();
        assert!(
            view.make_mut().is_err(),
            "nor made writable later (mprotect)"
        );
        let seals = memfd.seals().unwrap();
        assert!(
            seals.contains(&FileSeal::SealSeal),
            "no seal can be added or lifted"
        );
    }
}
