//! A counting global allocator, and [`measure`]: the most bytes a closure had allocated at once.
//!
//! [`measure`] counts only allocations made on its own thread, so tests running in parallel do
//! not disturb each other. A request counts even when the allocation fails: trying to allocate
//! 2^40 bytes for a damaged length is the bug, whether or not the system says yes.
//!
//! The allocator works only where it is the test binary's global allocator, which this crate
//! never makes it (see the crate documentation): a test binary that measures invokes
//! [`install_counting_allocator!`](crate::install_counting_allocator), and [`measure`] panics
//! in one that did not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting what each thread allocates while [`measure`] runs there.
/// Install it with [`install_counting_allocator!`](crate::install_counting_allocator).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

/// Makes [`Counting`] this binary's global allocator. Invoke it once per test binary, at the
/// root of the crate (`#[cfg(test)]` in a library's `lib.rs`, for its unit tests).
#[macro_export]
macro_rules! install_counting_allocator {
    () => {
        #[global_allocator]
        static COUNTING_ALLOCATOR: $crate::alloc::Counting = $crate::alloc::Counting;
    };
}

thread_local! {
    /// Whether this thread is measured, bytes allocated minus freed since it started, and the
    /// peak of that. A const-initialised `Cell` of plain data: reading it never allocates.
    static STATE: Cell<(bool, isize, isize)> = const { Cell::new((false, 0, 0)) };
}

fn note(delta: isize) {
    let _ = STATE.try_with(|s| {
        let (on, live, peak) = s.get();
        if on {
            let live = live.saturating_add(delta);
            s.set((on, live, peak.max(live)));
        }
    });
}

fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the bookkeeping only touches a thread-local `Cell` of plain data,
// which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(signed(layout.size()));
        // SAFETY: the caller's guarantees about `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(signed(layout.size()));
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-signed(layout.size()));
        // SAFETY: `ptr` came from `System` with `layout` (every allocation here goes there).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(signed(new_size) - signed(layout.size()));
        // SAFETY: `ptr` came from `System` with `layout`; the caller vouches for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the most bytes it had allocated at once (on this
/// thread, not counting what was allocated before).
///
/// # Panics
/// If [`Counting`] is not this binary's global allocator (nothing would be counted).
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, usize) {
    STATE.with(|s| s.set((true, 0, 0)));
    drop(std::hint::black_box(Box::new(0u8)));
    let (_, _, probe) = STATE.with(|s| s.replace((true, 0, 0)));
    if probe == 0 {
        STATE.with(|s| s.set((false, 0, 0)));
        panic!(
            "measure counts nothing: this test binary lacks \
             `yuebing_testkit::install_counting_allocator!()`"
        );
    }
    /// Turns counting off when `measure` ends, by return or by a panic of `f`.
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            let _ = STATE.try_with(|s| s.set((false, 0, 0)));
        }
    }
    let off = Off;
    let r = f();
    let (_, _, peak) = STATE.with(|s| s.get());
    drop(off);
    (r, usize::try_from(peak).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_sees_the_peak_on_its_own_thread_only() {
        let (len, peak) = measure(|| {
            let big = vec![1u8; 1 << 20];
            drop(big);
            let other = std::thread::spawn(|| vec![0u8; 8 << 20].len());
            other.join().unwrap() + vec![2u8; 1000].len()
        });
        assert_eq!(len, (8 << 20) + 1000);
        assert!((1 << 20..2 << 20).contains(&peak), "{peak}");
        let (_, none) = measure(|| 1 + 1);
        assert_eq!(none, 0);
    }
}
