//! The baseline of a blocking call's extra latency: a condvar ping-pong between two plain
//! threads, the same mutex-and-condvar hand-over a blocking call's caller sleeps on. One round
//! trip is one wake-up each way.

use std::sync::{Condvar, Mutex};

use super::load::{self, Window};
use crate::bench::harness::Sample;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The echo thread's turn.
    Ping,
    /// The measuring thread's turn.
    Pong,
    /// The echo thread stops.
    Stop,
}

struct Court {
    turn: Mutex<Turn>,
    to_echo: Condvar,
    to_caller: Condvar,
}

impl Court {
    fn lock(&self) -> std::sync::MutexGuard<'_, Turn> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The echo side: waits for each ping and answers it, until told to stop.
    fn echo(&self) {
        let mut turn = self.lock();
        loop {
            match *turn {
                Turn::Stop => return,
                Turn::Ping => {
                    *turn = Turn::Pong;
                    self.to_caller.notify_one();
                }
                Turn::Pong => {}
            }
            turn = self.to_echo.wait(turn).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// One round trip from the measuring side: ping, then sleep until the pong.
    fn round_trip(&self) {
        let mut turn = self.lock();
        *turn = Turn::Ping;
        self.to_echo.notify_one();
        while *turn != Turn::Pong {
            turn = self.to_caller.wait(turn).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Round trips of `pairs` ping-pongs at once (each a measuring thread and its own echo
/// thread) until `window` closes: the sample's latencies are per round trip, two wake-ups. One
/// pair measures a wake-up; many measure how many wake-ups per second the machine can make.
pub(super) fn condvar(window: &Window, pairs: usize) -> Result<Sample, String> {
    let courts: Vec<Court> = (0..pairs.max(1))
        .map(|_| Court {
            turn: Mutex::new(Turn::Pong),
            to_echo: Condvar::new(),
            to_caller: Condvar::new(),
        })
        .collect();
    std::thread::scope(|s| {
        let started = courts.iter().enumerate().try_for_each(|(i, court)| {
            std::thread::Builder::new()
                .name(format!("bench-echo-{i}"))
                .spawn_scoped(s, || court.echo())
                .map(drop)
                .map_err(|e| format!("cannot start an echo thread: {e}"))
        });
        let sample = started.and_then(|()| {
            load::threads(courts.len(), window, |w, _| {
                courts[w].round_trip();
                Ok(())
            })
        });
        // Every echo thread started stops, so that the scope can end.
        for court in &courts {
            *court.lock() = Turn::Stop;
            court.to_echo.notify_one();
        }
        sample
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn round_trips_are_counted_and_the_echo_thread_stops() {
        let w = Window::new(Duration::ZERO, Duration::from_secs(30), Some(100));
        let s = condvar(&w, 1).unwrap();
        assert_eq!(s.ops, 100, "{s:?}");
        let w = Window::new(Duration::ZERO, Duration::from_secs(30), Some(100));
        let s = condvar(&w, 4).unwrap();
        assert!((100..104).contains(&s.ops), "{s:?}");
    }
}
