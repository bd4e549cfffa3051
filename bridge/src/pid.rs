//! The process's id, read once and kept until a `fork()`: every bridged call checks that it is
//! not made in a forked child, and `getpid` is a system call (about a microsecond each on a
//! small VM, several per call).
//!
//! A child handler registered with `pthread_atfork` forgets the kept id in every child that
//! `fork()` makes (Python's `os.fork`, a C program's `fork`), before the child's code runs. The
//! id is kept only once that handler is registered; a process made without `fork()`'s handlers
//! (a raw `clone` system call) would keep its parent's id, and no runtime does that.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// The id kept; 0 when none is.
static KEPT: AtomicU32 = AtomicU32::new(0);

/// Forks counted by the child handler (each child counts the fork that made it, on top of
/// its parent's count): a read of the id that a fork interrupted keeps nothing.
static FORKS: AtomicU32 = AtomicU32::new(0);

/// Whether the child handler is registered: [`UNREGISTERED`], [`REGISTERING`] or
/// [`REGISTERED`] (or [`REFUSED`], where `pthread_atfork` failed: then nothing is kept).
static HANDLER: AtomicU8 = AtomicU8::new(UNREGISTERED);
const UNREGISTERED: u8 = 0;
const REGISTERING: u8 = 1;
const REGISTERED: u8 = 2;
const REFUSED: u8 = 3;

/// This process's id, as `std::process::id()`, without a system call once kept.
pub fn current() -> u32 {
    match KEPT.load(Ordering::Relaxed) {
        0 => read(),
        pid => pid,
    }
}

/// Reads the id, and keeps it once the child handler is registered.
fn read() -> u32 {
    if HANDLER
        .compare_exchange(
            UNREGISTERED,
            REGISTERING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    {
        // SAFETY: `forget_in_child` takes nothing and returns nothing, as a handler must; it
        // only changes atomics (lock-free), which is async-signal-safe, as a handler run in the child
        // of a multi-threaded process must be. `pthread_atfork` only records the pointers.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        let state = if rc == 0 { REGISTERED } else { REFUSED };
        HANDLER.store(state, Ordering::Release);
    }
    loop {
        let forks = FORKS.load(Ordering::SeqCst);
        let pid = std::process::id();
        // Kept only while the handler would forget it in a child made from now on. A fork
        // during the registration leaves the child's state at REGISTERING: it reads the id
        // every time.
        if HANDLER.load(Ordering::Acquire) == REGISTERED {
            KEPT.store(pid, Ordering::SeqCst);
        }
        if FORKS.load(Ordering::SeqCst) == forks {
            return pid;
        }
        // A fork between the read and here (from a signal handler of this thread) made this a
        // child holding its parent's id: forget it and read again.
        KEPT.store(0, Ordering::SeqCst);
    }
}

/// The `pthread_atfork` child handler: the child reads its own id at its next call.
extern "C" fn forget_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
    KEPT.store(0, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_kept_id_is_the_process_id_and_a_forked_child_reads_its_own() {
        assert_eq!(super::current(), std::process::id());
        assert_eq!(super::current(), std::process::id());
        // SAFETY: the child only reads ids, compares them and exits with `_exit`: it takes no
        // lock and allocates nothing that a thread of the parent could have held at the fork.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let ok = super::current() == std::process::id();
            // SAFETY: `_exit` ends the child at once without running the parent's handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: `child` is this process's child; `status` is a valid place to write.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child);
        assert!(libc::WIFEXITED(status));
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child kept its parent's id"
        );
        assert_eq!(super::current(), std::process::id());
    }
}
