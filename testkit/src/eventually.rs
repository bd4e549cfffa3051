//! [`eventually()`]: polls a check until it holds, and fails the test after a ceiling;
//! [`blocking`], the same for a plain thread (a test of the C ABI, say).
//!
//! Tests with real processes and sockets wait for an outcome (a master leads, a budget is
//! held, an object reads back) by polling it with a generous ceiling, never by sleeping and
//! hoping. The ceiling is real time (`std::time::Instant`): with tokio's time paused, the sleeps
//! between checks pass at once, but the ceiling still leaves other threads and processes time
//! to act.

use std::time::{Duration, Instant};

/// The first pause between two checks; it doubles after each check up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between two checks.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// What a check returns: `true`, `Some(value)` or `Ok(value)` once the condition holds. A
/// check that returns a `Result` says why it has not passed yet: the last error is in the panic
/// message when the limit passes.
pub trait Outcome {
    /// What [`eventually()`] returns once the check passed.
    type Output;

    /// `Ok` if the condition holds, else what to say should it never hold (`None`: nothing).
    fn passed(self) -> Result<Self::Output, Option<String>>;
}

impl Outcome for bool {
    type Output = ();

    fn passed(self) -> Result<(), Option<String>> {
        self.then_some(()).ok_or(None)
    }
}

impl<T> Outcome for Option<T> {
    type Output = T;

    fn passed(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Outcome for Result<T, E> {
    type Output = T;

    fn passed(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Runs `check` until it passes (`true`, or `Some(value)` or `Ok(value)`: the value is
/// returned), first at once, then after pauses that grow from 5 ms to 50 ms.
///
/// # Panics
/// With `"{what}: not within {limit:?}"` (and the last error, for a check that returns a
/// `Result`) if `limit` has passed at a check that did not pass.
///
/// In a future that must be `Send` (spawned, boxed), a check that borrows from the caller can
/// make the compiler answer "implementation of `Send` is not general enough": move what the
/// check needs into it (`move || start(config.clone())`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut tries = 0;
/// let n = yuebing_testkit::eventually("three tries", Duration::from_secs(5), async || {
///     tries += 1;
///     (tries == 3).then_some(tries)
/// })
/// .await;
/// assert_eq!(n, 3);
/// # }
/// ```
pub async fn eventually<R: Outcome>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> R,
) -> R::Output {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let why = match check().await.passed() {
            Ok(v) => return v,
            Err(why) => why,
        };
        if start.elapsed() >= limit {
            match why {
                Some(why) => panic!("{what}: not within {limit:?} (last: {why})"),
                None => panic!("{what}: not within {limit:?}"),
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// [`eventually()`] for a plain thread (a test of the C ABI, say): it waits on a small runtime
/// of its own, blocking the thread.
///
/// # Panics
/// As [`eventually()`]; and on a thread that runs a tokio runtime (call [`eventually()`]
/// there).
pub fn blocking<R: Outcome>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> R,
) -> R::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|e| panic!("{what}: no runtime to wait on: {e}"));
    runtime.block_on(eventually(what, limit, async || check()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_flag_set_by_another_task_is_seen() {
        let flag = Arc::new(AtomicU32::new(0));
        let setter = flag.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            setter.store(7, Ordering::SeqCst);
        });
        let seen = eventually("the flag", Duration::from_secs(5), async || {
            let v = flag.load(Ordering::SeqCst);
            (v != 0).then_some(v)
        })
        .await;
        assert_eq!(seen, 7);
        eventually("a bool", Duration::from_secs(5), async || true).await;
    }

    #[tokio::test]
    #[should_panic(expected = "never: not within 100ms")]
    async fn a_check_that_never_passes_fails_after_its_limit() {
        eventually("never", Duration::from_millis(100), async || false).await;
    }

    #[tokio::test]
    #[should_panic(expected = "an error: not within 50ms (last: 3 still open)")]
    async fn a_check_that_says_why_it_failed_has_it_in_the_message() {
        let mut open = 5;
        eventually("an error", Duration::from_millis(50), async || {
            open = (open - 1).max(3);
            match open {
                0 => Ok(()),
                n => Err(format!("{n} still open")),
            }
        })
        .await;
    }

    #[test]
    fn a_plain_thread_waits_the_same_way() {
        let start = Instant::now();
        let waited = blocking("20 ms", Duration::from_secs(5), || {
            let elapsed = start.elapsed();
            (elapsed >= Duration::from_millis(20)).then_some(elapsed)
        });
        assert!(waited >= Duration::from_millis(20));
        let never = std::panic::catch_unwind(|| {
            blocking("never", Duration::from_millis(30), || Err::<(), _>("no"))
        });
        let message = never.unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert_eq!(message, "never: not within 30ms (last: no)");
    }

    #[tokio::test]
    async fn the_ceiling_is_real_time_even_when_tokio_time_is_paused() {
        tokio::time::pause();
        let start = Instant::now();
        let mut checks = 0;
        eventually("30 ms of real time", Duration::from_secs(5), async || {
            checks += 1;
            start.elapsed() >= Duration::from_millis(30)
        })
        .await;
        assert!(checks > 1);
    }
}
