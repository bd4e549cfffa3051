//! The one audited module that touches transferable memory.
//!
//! Registered memory, engine buffers and peers' mapped buffers may be written at any moment by a
//! remote peer, another process (shm) or another thread of the engine, so no Rust reference
//! (`&[u8]`, `&mut [u8]`) is ever formed over them. Everything that moves their bytes goes
//! through this module: a [`Span`] names such a range by raw pointer for as long as some guard
//! keeps it valid (a region's [`Access`](super::Access), a mapping held by its owner), and the
//! functions here copy between spans and private Rust buffers, or hand spans to the kernel as raw
//! iovecs (`recv`, `sendmsg`). `scripts/check_raw_memory.sh` (run by the test script) checks that
//! `from_raw_parts` appears nowhere else in the engine.
//!
//! A `Span` is neither `Send` nor `Sync`: it cannot be held across an `.await` in a task, so an
//! access can never last longer than one copy or one non-blocking syscall.
//!
//! # Memory that may vanish
//! A span over a shared mapping of a file that another process may truncate
//! ([`Span::may_vanish`]: store space mounted from a file) would raise SIGBUS on a plain load
//! or store past the file's new end, killing the process. Its bytes are moved by the kernel
//! instead: `process_vm_writev` on this process copies with the kernel's fault handling, so a
//! page that vanished fails the copy with `EFAULT` (an `io::Error` the caller reports) and
//! nothing is raised. `recv` and `send` are kernel copies already.
//!
//! # GPU memory
//! A span over registered GPU memory ([`Span::on_gpu`], feature `cuda`) is never read or
//! written by the CPU: its bytes move by the driver's synchronous copies (`gpu::copy`), to and
//! from private host buffers where a socket is involved (`recv`, `send` stage through at most
//! [`BOUNCE`] bytes per call).

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// A range of transferable memory, valid for raw reads (and, unless it is only ever read, for
/// raw writes) during `'a`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// Backed by a file others may truncate: its bytes move only by kernel copies.
    may_vanish: bool,
    /// Memory of this GPU: its bytes move only by the driver's copies.
    gpu: Option<u32>,
    _valid: PhantomData<&'a ()>,
}

impl<'a> Span<'a> {
    /// A span over `[ptr, ptr + len)`.
    ///
    /// # Safety
    /// For all of `'a`, the range must be valid for reads (mapped, not freed), and for writes
    /// unless the span is only ever read (the source of a copy or a send: a peer's buffer that
    /// this process mapped read-only), and no Rust reference to any byte of it may exist: others
    /// may write it concurrently, through raw pointers only.
    pub(crate) unsafe fn new(ptr: NonNull<u8>, len: usize) -> Span<'a> {
        Span {
            ptr,
            len,
            may_vanish: false,
            gpu: None,
            _valid: PhantomData,
        }
    }

    /// The same span, marked as memory of GPU `gpu` (when `Some`): its bytes then move only
    /// by the driver's copies (see the module's docs). The mark is never taken off.
    pub(crate) fn on_gpu(self, gpu: Option<u32>) -> Span<'a> {
        Span {
            gpu: self.gpu.or(gpu),
            ..self
        }
    }

    /// The same span, marked as backed by a file that another process may truncate when
    /// `may_vanish`: its pages may vanish under it, so copies go through the kernel (see the
    /// module's docs). The mark is never taken off.
    pub(crate) fn vanishing(self, may_vanish: bool) -> Span<'a> {
        Span {
            may_vanish: self.may_vanish || may_vanish,
            ..self
        }
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The part `[offset, offset + len)` of this span, if it lies inside.
    pub(crate) fn sub(&self, offset: usize, len: usize) -> Option<Span<'a>> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| Span {
            // SAFETY: `offset <= end <= self.len`, so the pointer stays inside (or one past) the
            // span's own range, which is valid for `'a`.
            ptr: unsafe { self.ptr.add(offset) },
            len,
            may_vanish: self.may_vanish,
            gpu: self.gpu,
            _valid: PhantomData,
        })
    }

    /// The part from `offset` to the end (empty when `offset` is past it).
    pub(crate) fn tail(&self, offset: usize) -> Span<'a> {
        let offset = offset.min(self.len);
        self.sub(offset, self.len - offset).unwrap_or(*self)
    }
}

/// Copies `min(src.len, dst.len)` bytes from `src` to `dst` (which may overlap). Fails only
/// where a span may vanish and its pages did (`EFAULT`).
pub(crate) fn copy(src: Span<'_>, dst: Span<'_>) -> io::Result<()> {
    let n = src.len.min(dst.len);
    if let Some(gpu) = src.gpu.or(dst.gpu) {
        if src.may_vanish || dst.may_vanish {
            return Err(io::Error::other(
                "a copy between GPU memory and a mapped file is not supported",
            ));
        }
        // SAFETY: both spans are valid for `n` bytes (reads of `src`, writes of `dst`) for
        // their lifetimes, and no reference is formed over either.
        return unsafe { gpu_copy(gpu, dst.ptr.as_ptr(), src.ptr.as_ptr(), n) };
    }
    if src.may_vanish || dst.may_vanish {
        let (s, d) = (src.ptr.as_ptr() as usize, dst.ptr.as_ptr() as usize);
        if s < d.saturating_add(n) && d < s.saturating_add(n) {
            return copy_overlapping(src, dst, n, d > s);
        }
        // SAFETY: both ranges are mapped for the spans' lifetimes and `n` is within both; the
        // kernel reads `src` and writes `dst` with its own fault handling; they do not overlap.
        return unsafe { kernel_copy(src.ptr.as_ptr(), dst.ptr.as_ptr(), n) };
    }
    // SAFETY: `src` is valid for reads and `dst` for writes of their whole length (their
    // constructors' contract: a span that is written is valid for writes) and `n` is within
    // both; `copy` (memmove) allows overlap, as when a segment copies within itself. No
    // reference is formed over either range, and neither is backed by a file that can shrink.
    unsafe { std::ptr::copy(src.ptr.as_ptr(), dst.ptr.as_ptr(), n) };
    Ok(())
}

/// Copies `n` bytes between overlapping spans, one of which may vanish: through a private
/// buffer of at most [`BOUNCE`] bytes, chunk by chunk in memmove's order (from the end when
/// the destination lies above the source), so no chunk is overwritten before it was read.
/// Both sides by kernel copies: a span over the same file may have come in unmarked
/// (`EngineBuffer::write_from`).
fn copy_overlapping(src: Span<'_>, dst: Span<'_>, n: usize, upward: bool) -> io::Result<()> {
    let mut bounce = vec![0u8; n.min(BOUNCE)];
    let starts = (0..n).step_by(BOUNCE);
    let order: Box<dyn Iterator<Item = usize>> = match upward {
        true => Box::new(starts.rev()),
        false => Box::new(starts),
    };
    for at in order {
        let k = BOUNCE.min(n - at);
        let (Some(from), Some(to)) = (src.sub(at, k), dst.sub(at, k)) else {
            return Err(io::Error::other("a chunk outside its spans"));
        };
        copy_out(from.vanishing(true), &mut bounce[..k])?;
        copy_in(&bounce[..k], to.vanishing(true))?;
    }
    Ok(())
}

/// The most an overlapping copy of memory that may vanish holds in private memory at once.
const BOUNCE: usize = 1 << 20;

/// Copies private bytes into `dst` (at most `dst.len()` of them); returns how many.
pub(crate) fn copy_in(data: &[u8], dst: Span<'_>) -> io::Result<usize> {
    let n = data.len().min(dst.len);
    if let Some(gpu) = dst.gpu {
        // SAFETY: `dst` is valid for writes of `n` bytes; `data` is a private slice.
        unsafe { gpu_copy(gpu, dst.ptr.as_ptr(), data.as_ptr(), n) }?;
        return Ok(n);
    }
    if dst.may_vanish {
        // SAFETY: `data` is a private slice of at least `n` bytes; `dst` is mapped for its
        // lifetime; the kernel writes it with its own fault handling.
        unsafe { kernel_copy(data.as_ptr(), dst.ptr.as_ptr(), n) }?;
        return Ok(n);
    }
    // SAFETY: `dst` is valid for writes of `n <= dst.len` bytes; `data` is a private Rust slice,
    // which cannot overlap transferable memory (no reference is ever formed over that).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.ptr.as_ptr(), n) }
    Ok(n)
}

/// Copies the first bytes of `src` into private `out` (at most `out.len()`); returns how many.
pub(crate) fn copy_out(src: Span<'_>, out: &mut [u8]) -> io::Result<usize> {
    let n = out.len().min(src.len);
    if let Some(gpu) = src.gpu {
        // SAFETY: `src` is valid for reads of `n` bytes; `out` is an exclusive private slice.
        unsafe { gpu_copy(gpu, out.as_mut_ptr(), src.ptr.as_ptr(), n) }?;
        return Ok(n);
    }
    if src.may_vanish {
        // SAFETY: `out` is an exclusive private slice of at least `n` bytes; `src` is mapped
        // for its lifetime; the kernel reads it with its own fault handling.
        unsafe { kernel_copy(src.ptr.as_ptr(), out.as_mut_ptr(), n) }?;
        return Ok(n);
    }
    // SAFETY: `src` is valid for reads of `n <= src.len` bytes; `out` is an exclusive private
    // Rust slice, disjoint from transferable memory.
    unsafe { std::ptr::copy_nonoverlapping(src.ptr.as_ptr(), out.as_mut_ptr(), n) }
    Ok(n)
}

/// Copies `n` bytes from `src` to `dst` (which do not overlap) by `process_vm_writev` on this
/// process: the kernel copies with its own fault handling, so a page that is gone (a file
/// truncated under a shared mapping) fails the copy with `EFAULT` instead of raising SIGBUS.
/// A process may always do this to itself (no ptrace check applies within one process).
///
/// # Safety
/// Both ranges lie in this process's address space, and nothing holds a Rust reference to
/// `dst`'s bytes during the call (the kernel writes them).
unsafe fn kernel_copy(src: *const u8, dst: *mut u8, n: usize) -> io::Result<()> {
    let mut done = 0;
    while done < n {
        let local = libc::iovec {
            iov_base: src.wrapping_add(done) as *mut libc::c_void,
            iov_len: n - done,
        };
        let remote = libc::iovec {
            iov_base: dst.wrapping_add(done).cast(),
            iov_len: n - done,
        };
        // SAFETY: one iovec each, naming ranges of this process (the caller's promise); the
        // kernel validates them itself and fails with EFAULT rather than faulting the process.
        // The calling thread's id, which names this process too (the thread-group leader's
        // pid fails once that thread exited, as a C host's `main` may).
        let got = unsafe { libc::process_vm_writev(libc::gettid(), &local, 1, &remote, 1, 0) };
        match usize::try_from(got) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
            Ok(k) => done += k,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Copies `n` bytes with the GPU driver (`gpu` owns one of the ranges).
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `n` bytes; no reference over `dst`.
unsafe fn gpu_copy(gpu: u32, dst: *mut u8, src: *const u8, n: usize) -> io::Result<()> {
    #[cfg(feature = "cuda")]
    {
        // SAFETY: forwarded from the caller.
        unsafe { crate::gpu::copy(gpu, dst, src, n) }
    }
    #[cfg(not(feature = "cuda"))]
    {
        // No span is marked GPU memory in a build without `cuda`: `Location::check_supported`
        // refuses `cuda:N` before anything is registered.
        let _ = (dst, src, n);
        Err(io::Error::other(format!(
            "memory of cuda:{gpu} in a build without the cuda feature"
        )))
    }
}

/// One non-blocking `recv` of at most `dst.len()` bytes from `fd` into `dst` (GPU memory
/// through a private buffer of at most [`BOUNCE`] bytes). `WouldBlock` when nothing is there
/// (use it inside tokio's `try_io`).
pub(crate) fn recv(fd: BorrowedFd<'_>, dst: Span<'_>) -> io::Result<usize> {
    if dst.gpu.is_some() {
        let mut bounce = vec![0u8; dst.len.min(BOUNCE)];
        // SAFETY: the kernel writes at most `bounce.len()` bytes into the private buffer.
        let got = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                bounce.as_mut_ptr().cast(),
                bounce.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let got = usize::try_from(got).map_err(|_| io::Error::last_os_error())?;
        return copy_in(&bounce[..got], dst);
    }
    // SAFETY: the kernel writes at most `dst.len` bytes at `dst.ptr`, a range valid for writes;
    // `fd` is an open socket borrowed for the call.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            dst.ptr.as_ptr().cast(),
            dst.len,
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A part of a frame to send: private bytes, or transferable memory.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part<'a> {
    /// Bytes of a private Rust buffer (headers).
    Bytes(&'a [u8]),
    /// Transferable memory (payloads).
    Raw(Span<'a>),
}

impl Part<'_> {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Raw(s) => s.len(),
        }
    }
}

/// Most parts handed to one `sendmsg` (below the kernel's IOV_MAX of 1024).
const MAX_PARTS: usize = 256;

/// One non-blocking `sendmsg` of `parts` (the first [`MAX_PARTS`] of them); returns the bytes
/// the kernel took. `MSG_NOSIGNAL`: a peer that went away is an error, never a SIGPIPE that
/// would kill an embedding process that does not ignore it.
pub(crate) fn send(fd: BorrowedFd<'_>, parts: &[Part<'_>]) -> io::Result<usize> {
    if parts
        .iter()
        .any(|p| matches!(p, Part::Raw(s) if s.gpu.is_some()))
    {
        return send_staged(fd, parts);
    }
    let iovecs = parts
        .iter()
        .take(MAX_PARTS)
        .filter(|p| p.len() > 0)
        .map(|p| match p {
            Part::Bytes(b) => libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            },
            Part::Raw(s) => libc::iovec {
                iov_base: s.ptr.as_ptr().cast(),
                iov_len: s.len,
            },
        });
    // A gathered batch (up to 32 frames of two parts) without an allocation per syscall.
    const ON_STACK: usize = 64;
    if parts.len() <= ON_STACK {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; ON_STACK];
        let mut n = 0;
        for v in iovecs {
            iov[n] = v;
            n += 1;
        }
        return send_iov(fd, &iov[..n]);
    }
    send_iov(fd, &iovecs.collect::<Vec<_>>())
}

/// `send` of parts some of which are GPU memory: the parts up to the first GPU one, then at
/// most [`BOUNCE`] bytes of it copied into a private buffer; the kernel may take fewer, and
/// the caller sends the rest again, as for any partial send.
fn send_staged(fd: BorrowedFd<'_>, parts: &[Part<'_>]) -> io::Result<usize> {
    let first = parts
        .iter()
        .position(|p| matches!(p, Part::Raw(s) if s.gpu.is_some()))
        .unwrap_or(parts.len());
    let mut bounce = Vec::new();
    if let Some(Part::Raw(s)) = parts.get(first) {
        bounce = vec![0u8; s.len.min(BOUNCE)];
        copy_out(*s, &mut bounce)?;
    }
    let mut staged: Vec<Part<'_>> = parts[..first].to_vec();
    if !bounce.is_empty() {
        staged.push(Part::Bytes(&bounce));
    }
    send(fd, &staged)
}

/// One non-blocking `sendmsg` of `iov`, whose entries name ranges valid for reads.
fn send_iov(fd: BorrowedFd<'_>, iov: &[libc::iovec]) -> io::Result<usize> {
    if iov.is_empty() {
        return Ok(0);
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at `iov`, which outlives the call. The kernel only reads the ranges
    // the iovecs name (an invalid one fails with EFAULT, it is never dereferenced by Rust);
    // `send`, the only caller, builds them from private slices and spans valid for the call.
    let n = unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// The `index`-th aligned 64-bit word of `span`, read atomically (another process may be
/// storing it). `None` when it lies outside the span.
pub(crate) fn load_word(span: Span<'_>, index: usize) -> Option<u64> {
    if span.gpu.is_some() {
        return None;
    }
    let word = word_at(span, index)?;
    // SAFETY: `word` is an 8-byte-aligned address inside `span`, valid for reads and writes
    // for `'_` (the span's contract: these functions are given only status pages, which are
    // mapped writable for this reason even where only read); the
    // word is only ever accessed atomically, and an atomic over memory shared with another
    // process is what `AtomicU64::from_ptr` is for.
    Some(
        unsafe { std::sync::atomic::AtomicU64::from_ptr(word) }
            .load(std::sync::atomic::Ordering::SeqCst),
    )
}

/// Stores `value` atomically into the `index`-th aligned 64-bit word of `span`; false when it
/// lies outside.
pub(crate) fn store_word(span: Span<'_>, index: usize, value: u64) -> bool {
    if span.gpu.is_some() {
        return false;
    }
    let Some(word) = word_at(span, index) else {
        return false;
    };
    // SAFETY: as in `load_word`; the span is writable.
    unsafe { std::sync::atomic::AtomicU64::from_ptr(word) }
        .store(value, std::sync::atomic::Ordering::SeqCst);
    true
}

fn word_at(span: Span<'_>, index: usize) -> Option<*mut u64> {
    let part = span.sub(index.checked_mul(8)?, 8)?;
    let ptr = part.ptr.as_ptr();
    (ptr as usize).is_multiple_of(8).then_some(ptr.cast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn span_of(v: &mut [u8]) -> Span<'_> {
        // SAFETY (test): the vector outlives the span and is only touched through it meanwhile.
        unsafe { Span::new(NonNull::new(v.as_mut_ptr()).unwrap(), v.len()) }
    }

    #[test]
    fn spans_are_bounded_and_copies_clamp() {
        let mut a = vec![1u8; 8];
        let mut b = vec![0u8; 4];
        let (sa, sb) = (span_of(&mut a), span_of(&mut b));
        assert!(sa.sub(4, 4).is_some());
        assert!(sa.sub(5, 4).is_none());
        assert!(sa.sub(usize::MAX, 2).is_none());
        assert_eq!(sa.tail(10).len(), 0);
        copy(sa, sb).unwrap();
        let mut out = [0u8; 16];
        assert_eq!(copy_out(sb, &mut out).unwrap(), 4);
        assert_eq!(&out[..4], &[1, 1, 1, 1]);
        assert_eq!(copy_in(&[9; 100], sb).unwrap(), 4);
        assert_eq!(b, vec![9; 4]);
    }

    #[test]
    fn copies_of_a_truncated_file_fail_instead_of_raising_sigbus() {
        let page = 4096;
        let file = tempfile_in_shm();
        file.set_len(3 * page as u64).unwrap();
        let map = memmap2::MmapOptions::new()
            .len(3 * page)
            .map_raw(&file)
            .unwrap();
        // SAFETY (test): the mapping outlives the span and is only touched through it.
        let span = unsafe { Span::new(NonNull::new(map.as_mut_ptr()).unwrap(), 3 * page) };
        let span = span.vanishing(true);
        assert_eq!(copy_in(&[3; 100], span.tail(2 * page)).unwrap(), 100);
        let mut out = vec![0u8; 100];
        copy_out(span.tail(2 * page), &mut out).unwrap();
        assert_eq!(out, vec![3; 100]);
        // Another process shrinks the file: the last two pages are gone.
        file.set_len(page as u64).unwrap();
        let gone = span.tail(2 * page);
        assert_eq!(
            copy_in(&[4; 100], gone).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
        assert!(copy_out(gone, &mut out).is_err());
        assert!(copy(span, gone).is_err(), "a copy into vanished pages");
        assert!(copy(gone, span).is_err(), "a copy from vanished pages");
        // What is still there still copies, overlapping too (a range within itself).
        copy_in(&[5; 64], span).unwrap();
        copy(span.sub(0, 64).unwrap(), span.sub(32, 64).unwrap()).unwrap();
        copy_out(span.sub(0, 96).unwrap(), &mut out).unwrap();
        assert_eq!(&out[..96], &[5; 96][..]);
    }

    #[test]
    fn overlapping_copies_of_vanishing_memory_move_as_memmove_does() {
        let len = 4 << 20;
        let file = tempfile_in_shm();
        file.set_len(len as u64).unwrap();
        let map = memmap2::MmapOptions::new().len(len).map_raw(&file).unwrap();
        // SAFETY (test): the mapping outlives the span and is only touched through it.
        let span = unsafe { Span::new(NonNull::new(map.as_mut_ptr()).unwrap(), len) };
        let span = span.vanishing(true);
        let start: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut expected = start.clone();
        // Several bounce chunks, shifted up, then down, by less than a chunk.
        let n = (2 << 20) + 12345;
        for (from, to) in [(100, 1000), (3000, 7)] {
            copy_in(&expected, span).unwrap();
            expected.copy_within(from..from + n, to);
            copy(span.sub(from, n).unwrap(), span.sub(to, n).unwrap()).unwrap();
            let mut got = vec![0u8; len];
            copy_out(span, &mut got).unwrap();
            assert!(got == expected, "{from} -> {to}");
        }
    }

    /// An unlinked file on tmpfs (the kind of memory `mount_segment` maps).
    fn tempfile_in_shm() -> std::fs::File {
        let path = format!(
            "/dev/shm/yuebing-raw-test-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        );
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }

    #[test]
    fn recv_and_send_move_bytes_through_raw_iovecs() {
        let (mut x, y) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut payload = vec![7u8; 1000];
        let header = [1u8, 2, 3];
        let parts = [Part::Bytes(&header), Part::Raw(span_of(&mut payload))];
        use std::os::fd::AsFd;
        assert_eq!(send(y.as_fd(), &parts).unwrap(), 1003);
        let mut got = vec![0u8; 1003];
        x.read_exact(&mut got).unwrap();
        assert_eq!(&got[..3], &header);
        assert!(got[3..].iter().all(|&b| b == 7));
        x.write_all(&[5; 10]).unwrap();
        let mut into = vec![0u8; 64];
        assert_eq!(recv(y.as_fd(), span_of(&mut into)).unwrap(), 10);
        let err = recv(y.as_fd(), span_of(&mut into)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}
