//! The time, as deadlines, back-offs and admission read it: tokio's clock, so that a test can
//! pause and advance it (`tokio::time::pause`). Outside a paused test runtime it is the system's
//! monotonic clock. Deadlines stay `std::time::Instant`s, as tarpc's `Context` carries them.
//! Latency metrics keep reading the system clock: they measure real time.

use std::time::Instant;

/// The time now, on tokio's clock.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
