//! GPU memory (cargo feature `cuda`): the CUDA driver through cudarc, loaded at run time, so a
//! build needs no CUDA toolkit and a machine without a driver gets [`Error::NoCudaDriver`],
//! never a panic (cudarc panics on any call without the library: its presence is checked
//! before the first one).
//!
//! Registered GPU memory (`cuda:N`) is addressed like host memory (unified virtual
//! addressing): its bytes move by `cuMemcpy` followed by a wait for the default stream (a copy
//! from pageable memory to the device may otherwise still be under way when `cuMemcpy`
//! returns), so no GPU copy outlives the call that made it and a task is final as soon as its
//! last copy returned. The tcp transport
//! stages GPU memory through private host buffers (`memory::raw`); the rdma transport registers
//! it with the NICs through a dma-buf where the driver gives one, and otherwise the engine
//! stages it through registered host memory (`transfer_engine::staging`).
//!
//! Not run on a GPU in this repository's CI (none there): `scripts/hw-check.sh`.

use std::io;
#[cfg(feature = "rdma")]
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

use cudarc::driver::{result, sys};

use crate::error::Error;

/// A retained primary context.
struct Context(sys::CUcontext);

// SAFETY: a context handle may be made current on any thread (`cuCtxSetCurrent`); the primary
// contexts here are retained once and never released, so the handle stays valid.
unsafe impl Send for Context {}
// SAFETY: as above; the handle is only read.
unsafe impl Sync for Context {}

/// The loaded driver: one primary context per GPU.
struct Driver {
    contexts: Vec<Context>,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

fn driver() -> Result<&'static Driver, Error> {
    DRIVER
        .get_or_init(load)
        .as_ref()
        .map_err(|reason| Error::NoCudaDriver {
            reason: reason.clone(),
        })
}

fn load() -> Result<Driver, String> {
    // SAFETY: only looks for the library (opens and closes it); calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) is not installed".into());
    }
    result::init().map_err(|e| format!("cuInit: {e}"))?;
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    let mut contexts = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal).map_err(|e| format!("cuDeviceGet: {e}"))?;
        // SAFETY: `dev` is a device the driver just listed. The context is retained for the
        // rest of the process (never released), which is what `Context` relies on.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| format!("cuDevicePrimaryCtxRetain: {e}"))?;
        contexts.push(Context(ctx));
    }
    Ok(Driver { contexts })
}

/// Whether GPU `ordinal` can hold registered memory: [`Error::NoCudaDriver`] without a
/// driver, [`Error::InvalidArgument`] past the last GPU.
pub fn check(ordinal: u32) -> Result<(), Error> {
    let d = driver()?;
    match d.contexts.get(ordinal as usize) {
        Some(_) => Ok(()),
        None => Err(Error::invalid(format!(
            "no GPU cuda:{ordinal} ({} present)",
            d.contexts.len()
        ))),
    }
}

/// How many GPUs the driver sees ([`Error::NoCudaDriver`] without one).
pub fn count() -> Result<usize, Error> {
    Ok(driver()?.contexts.len())
}

/// Makes GPU `ordinal`'s primary context current on this thread.
fn enter(ordinal: u32) -> io::Result<()> {
    let d = driver().map_err(io::Error::other)?;
    let ctx = d
        .contexts
        .get(ordinal as usize)
        .ok_or_else(|| io::Error::other(format!("no GPU cuda:{ordinal}")))?;
    // SAFETY: `ctx.0` is a retained primary context (valid for the process's life).
    unsafe { result::ctx::set_current(ctx.0) }.map_err(|e| io::Error::other(e.to_string()))
}

/// Copies `n` bytes from `src` to `dst`, at least one of them memory of GPU `ordinal` (the
/// driver tells each pointer's side by unified addressing). Returns once the copy completed,
/// the bytes in place on both sides.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes for the call, and no Rust
/// reference may exist over host bytes of `dst`.
pub(crate) unsafe fn copy(ordinal: u32, dst: *mut u8, src: *const u8, n: usize) -> io::Result<()> {
    if n == 0 {
        return Ok(());
    }
    enter(ordinal)?;
    // SAFETY: both ranges are valid for `n` bytes (the caller's promise).
    unsafe { sys::cuMemcpy(dst as sys::CUdeviceptr, src as sys::CUdeviceptr, n) }
        .result()
        .map_err(|e| io::Error::other(format!("cuMemcpy: {e}")))?;
    // From pageable host memory to the device, `cuMemcpy` returns once the source was
    // consumed, with the DMA to the device possibly still under way (CUDA's API sync rules):
    // waiting for the legacy default stream, which carries it, makes the copy complete here.
    // SAFETY: the null stream is always valid in the current context.
    unsafe { result::stream::synchronize(result::stream::null()) }
        .map_err(|e| io::Error::other(format!("cuStreamSynchronize: {e}")))
}

/// A dma-buf for `[addr, addr + len)` of GPU `ordinal`'s memory, for an RDMA NIC to register
/// (`cuMemGetHandleForAddressRange`); an error where the driver or the allocation gives none.
#[cfg(feature = "rdma")]
pub(crate) fn dmabuf(ordinal: u32, addr: u64, len: u64) -> io::Result<OwnedFd> {
    enter(ordinal)?;
    let len = usize::try_from(len).map_err(io::Error::other)?;
    let mut fd: i32 = -1;
    // SAFETY: the out-pointer is a local `i32`, which is what the driver writes for a dma-buf
    // handle; the range is only named, not accessed.
    unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast::<std::ffi::c_void>(),
            addr as sys::CUdeviceptr,
            len,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    }
    .result()
    .map_err(|e| io::Error::other(format!("cuMemGetHandleForAddressRange: {e}")))?;
    if fd < 0 {
        return Err(io::Error::other("the driver gave no dma-buf"));
    }
    // SAFETY: the driver just opened `fd` for this process and hands it over.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Device memory this engine allocated on a GPU (for tests and benchmarks: an application
/// registers its own, its KV cache). Freed when dropped; unregister it first.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    ordinal: u32,
}

impl DeviceBuffer {
    /// `len` bytes on GPU `ordinal` (`cuMemAlloc`).
    pub fn allocate(ordinal: u32, len: usize) -> Result<DeviceBuffer, Error> {
        check(ordinal)?;
        enter(ordinal).map_err(|e| Error::OutOfMemory {
            reason: e.to_string(),
        })?;
        // SAFETY: a plain allocation in the current (primary) context.
        let ptr = unsafe { result::malloc_sync(len.max(1)) }.map_err(|e| Error::OutOfMemory {
            reason: format!("cuMemAlloc of {len} bytes on cuda:{ordinal}: {e}"),
        })?;
        Ok(DeviceBuffer { ptr, len, ordinal })
    }

    /// The address (unified with host addresses), to register as `cuda:N`.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` in at `offset`.
    pub fn put(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.len);
        end.ok_or_else(|| Error::invalid("put past the end of the device buffer"))?;
        // SAFETY: the range lies inside this allocation; `data` is a private slice.
        unsafe {
            copy(
                self.ordinal,
                (self.ptr as usize + offset) as *mut u8,
                data.as_ptr(),
                data.len(),
            )
        }
        .map_err(|e| Error::Io {
            reason: e.to_string(),
        })
    }

    /// Copies `len` bytes out from `offset`.
    pub fn get(&self, offset: usize, len: usize) -> Result<Vec<u8>, Error> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len);
        end.ok_or_else(|| Error::invalid("get past the end of the device buffer"))?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside this allocation; `out` is a private buffer.
        unsafe {
            copy(
                self.ordinal,
                out.as_mut_ptr(),
                (self.ptr as usize + offset) as *const u8,
                len,
            )
        }
        .map_err(|e| Error::Io {
            reason: e.to_string(),
        })?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if enter(self.ordinal).is_ok() {
            // SAFETY: allocated by `cuMemAlloc` in this context and freed once, here.
            if let Err(e) = unsafe { result::free_sync(self.ptr) } {
                tracing::warn!(error = %e, "cuMemFree failed");
            }
        }
    }
}

/// Copies `len` bytes between pinned host memory and GPU `ordinal` (to the device when
/// `to_device`) again and again for `duration`: the bytes moved and the time taken. The
/// ceiling a staged transfer of GPU memory is measured against.
pub fn pinned_copies(
    ordinal: u32,
    len: usize,
    to_device: bool,
    duration: std::time::Duration,
) -> Result<(u64, std::time::Duration), Error> {
    let device = DeviceBuffer::allocate(ordinal, len)?;
    let io = |e: String| Error::Io { reason: e };
    // SAFETY: a plain pinned allocation in the current context (made current by `allocate`).
    let host = unsafe { result::malloc_host(len.max(1), 0) }
        .map_err(|e| io(format!("cuMemAllocHost: {e}")))?;
    let (dst, src) = match to_device {
        true => (device.ptr as *mut u8, host as *const u8),
        false => (host as *mut u8, device.ptr as *const u8),
    };
    let start = std::time::Instant::now();
    let mut bytes = 0u64;
    let mut copied = Ok(());
    while start.elapsed() < duration {
        // SAFETY: both are allocations of at least `len` bytes owned here, alive for the loop.
        copied = unsafe { copy(ordinal, dst, src, len) };
        if copied.is_err() {
            break;
        }
        bytes += len as u64;
    }
    let took = start.elapsed();
    // SAFETY: allocated above by `cuMemAllocHost` and freed once.
    let freed = unsafe { result::free_host(host) };
    copied.map_err(|e| io(e.to_string()))?;
    freed.map_err(|e| io(format!("cuMemFreeHost: {e}")))?;
    Ok((bytes, took))
}

/// GPU `ordinal`'s PCI bus id (`0000:17:00.0`), for choosing the NIC nearest it.
pub fn pci_bus_id(ordinal: u32) -> Option<String> {
    driver().ok()?;
    let dev = result::device::get(i32::try_from(ordinal).ok()?).ok()?;
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the driver writes a NUL-terminated id of at most `buf.len()` bytes.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }
        .result()
        .ok()?;
    // SAFETY: NUL-terminated within `buf` (the driver's promise, and the buffer is zeroed).
    let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(id.to_string_lossy().to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without the driver (CI), every entry point says so, typed, and nothing
    /// panics; where a driver exists, an ordinal past the last GPU is refused.
    #[test]
    fn without_a_driver_every_entry_is_a_typed_error() {
        match count() {
            Err(e) => {
                assert!(matches!(e, Error::NoCudaDriver { .. }), "{e:?}");
                assert!(matches!(check(0), Err(Error::NoCudaDriver { .. })));
                assert!(pci_bus_id(0).is_none());
                #[cfg(feature = "rdma")]
                assert!(dmabuf(0, 0x1000, 4096).is_err());
                let mut out = [0u8; 4];
                let src = [1u8; 4];
                // SAFETY: private buffers of 4 bytes.
                let copied = unsafe { copy(0, out.as_mut_ptr(), src.as_ptr(), 4) };
                assert!(copied.is_err());
                assert_eq!(out, [0; 4], "nothing copied");
            }
            Ok(n) => {
                let past = u32::try_from(n).unwrap();
                assert!(matches!(check(past), Err(Error::InvalidArgument { .. })));
            }
        }
    }
}
