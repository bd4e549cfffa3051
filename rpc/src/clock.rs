//! The time, as deadlines, back-offs and admission read it: tokio's clock, so that a test can
//! pause and advance it (`tokio::time::pause`). Outside a paused test runtime it is the system's
//! monotonic clock. Deadlines stay `std::time::Instant`s, as tarpc's `Context` carries them.
//! Latency metrics keep reading the system clock: they measure real time.

use std::time::{Duration, Instant};

/// The time now, on tokio's clock.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The farthest deadline a call is given, sent or received: a year. tarpc keeps deadlines in a
/// tokio-util timer wheel that panics past about 2.2 years, so a caller's `Duration::MAX` (or a
/// peer's) means "a year", never a panic.
pub const FARTHEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// `now + timeout`, with the timeout at most [`FARTHEST`]: the deadline of a call that is
/// given `timeout`, for any timeout a caller may pass.
pub fn after(now: Instant, timeout: Duration) -> Instant {
    let timeout = timeout.min(FARTHEST);
    now.checked_add(timeout).unwrap_or(now)
}
