//! [`Waiter`]: how a thread that waits for a call's outcome spends the moment before it sleeps.
//!
//! A call that ends within a few microseconds of its waiter starting to wait is cheapest watched
//! (no futex wake-up, no reschedule: tens of microseconds on a small VM); a longer one is
//! cheapest slept through, on the call's condvar, so that the completing thread *wakes* the
//! waiter. A woken thread preempts background work of lower priority at once. A thread that
//! yields in a loop does not: it stays runnable, and the scheduler hands its core to a
//! background task until the next tick, milliseconds later (issue 25 measured a 1 MiB
//! `get_into` median of 3.98 ms under two `nice -n 19` busy loops against 0.30 ms without).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a waiting thread watches for a call's outcome before it sleeps on the call's condvar
/// (see [`crate::Bridge::set_waiter`]). Only a lone waiter (the only thread of the process
/// waiting for a call) watches; with others waiting too it sleeps at once, as watchers would
/// take the cores the runtime needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// Watches with a spin-loop hint (the core stays this thread's) for up to the given time,
    /// then sleeps until the completing thread wakes it. The default, with
    /// [`Waiter::DEFAULT_SPIN`]; `Spin(Duration::ZERO)` sleeps at once.
    Spin(Duration),
    /// Yields its core in a loop for up to the given time, then sleeps: the waiter before
    /// issue 25, kept only to be measured against (`yuebing bench bridge --loops`). Under
    /// background load it hands the core away until the scheduler's tick.
    Yield(Duration),
}

impl Waiter {
    /// The spin of the default waiter, chosen from `yuebing bench bridge --loops 0,1,2
    /// --waiters legacy,spin:0,spin:50,spin:100,spin:200` (2 vCPUs, 5 repetitions): 50 µs kept
    /// the unloaded medians of the blocking 4 KiB get and 1 MiB get_into within 1.07x and
    /// 1.01x of the old waiter's and their p99 under two busy loops at 170 and 552 µs (old:
    /// 4.0 and 4.3 ms); 100 and 200 µs held a core the 1 MiB copy needed (p99 1.7-2.8 ms
    /// under load), 0 paid a wake-up on calls that end within microseconds. The numbers are
    /// in the README's bridge section.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

    /// The waiter before issue 25, for comparisons.
    pub const LEGACY: Waiter = Waiter::Yield(Duration::from_micros(300));

    /// How long it watches.
    fn watch_for(self) -> Duration {
        match self {
            Waiter::Spin(d) | Waiter::Yield(d) => d,
        }
    }

    /// Watches `ended` until it is set, `until` passes, or this waiter's time is up; at once
    /// returns where watching cannot pay: another thread waits too (`waiting` counts this one
    /// and every other waiting now, watching or asleep), or the process has one CPU, where a
    /// spinning waiter could only hold off the thread that would end its call.
    pub(crate) fn watch(self, waiting: &Waiting, ended: &AtomicBool, until: Option<Instant>) {
        if waiting.others > 0 || self.watch_for().is_zero() || one_cpu() {
            return;
        }
        let start = Instant::now();
        let limit = start
            .checked_add(self.watch_for())
            .map_or(until, |l| Some(until.map_or(l, |u| u.min(l))));
        let yields = matches!(self, Waiter::Yield(_));
        // Time is read every few rounds only: a clock read costs more than the hint.
        let mut rounds = 0u32;
        while !ended.load(Ordering::Acquire) {
            rounds = rounds.wrapping_add(1);
            if rounds.is_multiple_of(16) && limit.is_some_and(|l| Instant::now() >= l) {
                return;
            }
            match yields {
                true => std::thread::yield_now(),
                false => std::hint::spin_loop(),
            }
        }
    }
}

impl Default for Waiter {
    fn default() -> Waiter {
        Waiter::Spin(Waiter::DEFAULT_SPIN)
    }
}

/// A [`Waiter`] that can be changed while calls wait (one atomic word: kind and nanoseconds).
pub(crate) struct WaiterCell(AtomicU64);

/// The kind bit of [`WaiterCell`]'s word.
const YIELD: u64 = 1 << 63;

impl WaiterCell {
    pub(crate) fn new(w: Waiter) -> WaiterCell {
        let cell = WaiterCell(AtomicU64::new(0));
        cell.set(w);
        cell
    }

    pub(crate) fn set(&self, w: Waiter) {
        let nanos = |d: Duration| {
            u64::try_from(d.as_nanos())
                .unwrap_or(u64::MAX)
                .min(YIELD - 1)
        };
        let word = match w {
            Waiter::Spin(d) => nanos(d),
            Waiter::Yield(d) => YIELD | nanos(d),
        };
        self.0.store(word, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Waiter {
        let word = self.0.load(Ordering::Relaxed);
        let d = Duration::from_nanos(word & !YIELD);
        match word & YIELD {
            0 => Waiter::Spin(d),
            _ => Waiter::Yield(d),
        }
    }
}

/// Whether this process may run on one CPU only (read once).
fn one_cpu() -> bool {
    static ONE: OnceLock<bool> = OnceLock::new();
    *ONE.get_or_init(|| std::thread::available_parallelism().map_or(true, |n| n.get() == 1))
}

/// Threads waiting for a call's outcome now (watching or asleep), in the whole process.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Counts this thread among [`WAITERS`] for the whole of its wait, sleep included.
pub(crate) struct Waiting {
    /// How many other threads waited when this one came in.
    others: usize,
}

impl Waiting {
    /// Counts the thread in.
    pub(crate) fn enter() -> Waiting {
        Waiting {
            others: WAITERS.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITERS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_keeps_the_kind_and_the_time() {
        let cell = WaiterCell::new(Waiter::default());
        assert_eq!(cell.get(), Waiter::Spin(Waiter::DEFAULT_SPIN));
        for w in [
            Waiter::LEGACY,
            Waiter::Spin(Duration::ZERO),
            Waiter::Spin(Duration::from_nanos(7)),
        ] {
            cell.set(w);
            assert_eq!(cell.get(), w);
        }
    }

    #[test]
    fn watching_ends_at_its_limit_or_at_once_when_ended() {
        let ended = AtomicBool::new(false);
        let lone = Waiting { others: 0 };
        let start = Instant::now();
        Waiter::Spin(Duration::from_millis(5)).watch(&lone, &ended, None);
        assert!(one_cpu() || start.elapsed() >= Duration::from_millis(5));
        // With another thread waiting (even asleep) it does not watch.
        let start = Instant::now();
        Waiter::Spin(Duration::from_secs(600)).watch(&Waiting { others: 1 }, &ended, None);
        ended.store(true, Ordering::Release);
        Waiter::Spin(Duration::from_secs(600)).watch(&lone, &ended, None);
        Waiter::Yield(Duration::from_secs(600)).watch(&lone, &ended, None);
        assert!(start.elapsed() < Duration::from_secs(60));
    }
}
