//! Same-machine copies (the `local` and `shm` transports) between two leased sides, in chunks,
//! each under an access to both sides and the task's claim.
//!
//! A copy of [`BLOCKING_COPY`] bytes or more runs on the blocking pool, so that it holds up no
//! runtime worker or other executor. If the waiting future is dropped (deadline, cancel), its
//! claim closes: the drop waits for the chunk under way (at most [`CHUNK`] bytes) and the copy
//! stops there, so the task is final only when its copying has stopped.
//!
//! Inside [`copy_in_place`] (a blocking caller running its call on its own thread: the
//! bridge's `here`) a copy of up to [`IN_PLACE_MAX`] bytes runs where it is: that thread waits
//! for it anyway, and the blocking pool would add two hand-offs between threads (tens of
//! microseconds each on a small VM). The bound keeps what a deadline or a cancel waits for in
//! one poll to a few milliseconds. A blocking task that never runs (the runtime shut down) or panics holds no access,
//! so the drop never waits for it.

use std::cell::Cell;
use std::sync::Arc;

use crate::error::Error;
use crate::memory::raw::{self, Span};
use crate::memory::{vanished, Gate, Lease, CHUNK};

/// Copies of this size and more run on the blocking pool instead of where they are polled.
pub(crate) const BLOCKING_COPY: u64 = 256 << 10;

/// The largest copy made in place inside [`copy_in_place`] (about 3 ms at 6 GB/s).
pub const IN_PLACE_MAX: u64 = 16 << 20;

thread_local! {
    /// Whether this thread is inside [`copy_in_place`].
    static IN_PLACE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the same-host copies that futures polled on this thread make (up to
/// [`IN_PLACE_MAX`] bytes each) done in place instead of on the blocking pool: for a thread
/// that blocks until its call ends, so that a copy there holds up nothing else.
pub fn copy_in_place<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back as it was, also when `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_PLACE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(IN_PLACE.with(|c| c.replace(true)));
    f()
}

/// One side of a copy: memory that grants short accesses, or says why it no longer does.
pub(crate) trait Side: Send + Sync + 'static {
    /// Runs `f` on the side's span while an access holds it valid.
    fn with_span<R>(&self, f: impl FnOnce(Span<'_>) -> R) -> Result<R, Error>;

    /// Why the side may not be written (it is mapped read-only), if so. [`copy_between`]
    /// refuses such a destination before any byte moves.
    fn unwritable(&self) -> Option<Error> {
        None
    }
}

impl Side for Lease {
    fn with_span<R>(&self, f: impl FnOnce(Span<'_>) -> R) -> Result<R, Error> {
        let access = self
            .access()
            .ok_or_else(|| Error::AddressNotRegistered { addr: self.addr() })?;
        Ok(f(access.span()))
    }
}

/// A lease on the target's memory (the `local` transport serving itself): a released range is
/// the target's refusal, `OutOfBounds`, as on every transport.
pub(crate) struct Target(pub(crate) Lease);

impl Side for Target {
    fn with_span<R>(&self, f: impl FnOnce(Span<'_>) -> R) -> Result<R, Error> {
        let access = self.0.access().ok_or_else(|| Error::OutOfBounds {
            addr: self.0.addr(),
            len: self.0.len(),
        })?;
        Ok(f(access.span()))
    }
}

/// Copies `len` bytes from `src` to `dst`.
pub(crate) async fn copy_between(src: impl Side, dst: impl Side, len: u64) -> Result<(), Error> {
    // A write through a read-only mapping would fault: refused here whatever the caller did.
    if let Some(e) = dst.unwritable() {
        return Err(e);
    }
    let len = usize::try_from(len).map_err(|_| Error::invalid("copy too large"))?;
    let in_place = (len as u64) <= IN_PLACE_MAX && IN_PLACE.with(Cell::get);
    if (len as u64) < BLOCKING_COPY || in_place {
        return copy_chunks(&src, &dst, len, None);
    }
    let claim = Arc::new(Gate::default());
    let _give_up = CloseOnDrop(claim.clone());
    let task = tokio::task::spawn_blocking(move || copy_chunks(&src, &dst, len, Some(&claim)));
    task.await.map_err(|e| Error::Io {
        reason: format!("copy task failed: {e}"),
    })?
}

/// Closes the claim when the waiter stops waiting, for whatever reason.
struct CloseOnDrop(Arc<Gate>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn copy_chunks(
    src: &impl Side,
    dst: &impl Side,
    len: usize,
    claim: Option<&Gate>,
) -> Result<(), Error> {
    let mut off = 0;
    while off < len {
        let n = CHUNK.min(len - off);
        let _pass = match claim {
            Some(c) => Some(c.enter().ok_or(Error::Canceled)?),
            None => None,
        };
        let copied = src.with_span(|s| {
            dst.with_span(|d| match (s.sub(off, n), d.sub(off, n)) {
                (Some(s), Some(d)) => Some(raw::copy(s, d)),
                _ => None,
            })
        })??;
        match copied {
            Some(done) => done.map_err(vanished)?,
            None => return Err(Error::invalid("copy outside its leased ranges")),
        }
        off += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{EngineBuffer, MemoryRegistry, RemoteAccess};
    use std::future::Future;
    use std::time::Duration;

    /// Two registered 1 MiB buffers and a lease on each, `src` filled with `fill`.
    fn two_leases(memory: &MemoryRegistry, fill: u8) -> (Lease, Lease, Arc<EngineBuffer>) {
        let buffer = || Arc::new(EngineBuffer::allocate(1 << 20, false).unwrap());
        let (src, dst) = (buffer(), buffer());
        // SAFETY: the buffer is new and local-only: nothing else reaches it.
        unsafe { src.write_at(0, &vec![fill; 1 << 20]) }.unwrap();
        let a = memory
            .register_buffer(src, RemoteAccess::LOCAL_ONLY)
            .unwrap();
        let b = memory
            .register_buffer(dst.clone(), RemoteAccess::LOCAL_ONLY)
            .unwrap();
        let src = memory.lease(a.addr, 1 << 20).unwrap();
        let dst_lease = memory.lease(b.addr, 1 << 20).unwrap();
        (src, dst_lease, dst)
    }

    /// A runtime whose one blocking thread is busy until the sender returned is dropped.
    fn busy_pool() -> (tokio::runtime::Runtime, std::sync::mpsc::Sender<()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let (release, busy) = std::sync::mpsc::channel::<()>();
        rt.spawn_blocking(move || {
            let _ = busy.recv_timeout(Duration::from_secs(30));
        });
        (rt, release)
    }

    #[test]
    fn a_dropped_copy_whose_blocking_task_never_ran_does_not_hang() {
        let memory = MemoryRegistry::default();
        let (src, dst, _) = two_leases(&memory, 1);
        // The one blocking thread is busy, so the copy's task is queued, not run.
        let (rt, release) = busy_pool();
        let mut copy = Box::pin(copy_between(src, dst, 1 << 20));
        let waker = futures::task::noop_waker();
        let _enter = rt.enter();
        assert!(copy
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
            .is_pending());
        let dropped = std::thread::spawn(move || drop(copy));
        let start = std::time::Instant::now();
        while !dropped.is_finished() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            dropped.is_finished(),
            "the drop waited for a copy that never ran"
        );
        drop(release);
        drop(_enter);
        rt.shutdown_background();
    }

    #[test]
    fn a_large_copy_polled_in_copy_in_place_is_done_where_it_is() {
        let memory = MemoryRegistry::default();
        let (src, dst, copied) = two_leases(&memory, 7);
        // The one blocking thread is busy: a copy sent there would not run now.
        let (rt, release) = busy_pool();
        let _enter = rt.enter();
        let mut copy = Box::pin(copy_between(src, dst, 1 << 20));
        let waker = futures::task::noop_waker();
        let polled = copy_in_place(|| {
            copy.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
        });
        assert!(matches!(polled, std::task::Poll::Ready(Ok(()))));
        let mut out = vec![0; 1 << 20];
        // SAFETY: the copy ended (polled to its end above); nothing else reaches the buffer.
        unsafe { copied.read_at(0, &mut out) }.unwrap();
        assert!(out.iter().all(|&b| b == 7));
        drop(release);
        drop(_enter);
        rt.shutdown_background();
    }
}
