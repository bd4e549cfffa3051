//! [`retried`]: an idempotent call tried again while etcd is briefly unavailable.
//!
//! etcd-client spreads calls over every endpoint; while one member is down, a call can land
//! on it and fail at once ("tcp connect error") although the others answer. The election's
//! idempotent calls (leader, confirm, resign, revoke) are therefore tried again until the
//! request timeout has passed in all.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};

/// The pause between tries.
const PAUSE: Duration = Duration::from_millis(50);

/// Calls `call` until it succeeds, fails other than [`Error::Unavailable`], or `timeout` has
/// passed in all ([`Error::Timeout`] for `op` then, unless the last try said more).
pub(crate) async fn retried<T, F, Fut>(timeout: Duration, op: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, call()).await {
            Ok(Err(Error::Unavailable { reason })) => {
                if left <= PAUSE {
                    return Err(Error::Unavailable { reason });
                }
                tracing::debug!(op, %reason, "etcd unavailable; trying again");
                tokio::time::sleep(PAUSE).await;
            }
            Ok(result) => return result,
            Err(_) => {
                return Err(Error::Timeout {
                    op: op.to_string(),
                    after: timeout,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn unavailable_is_tried_again_until_the_timeout() {
        let tries = AtomicU32::new(0);
        let got = retried(Duration::from_secs(1), "x", || async {
            if tries.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(Error::Unavailable {
                    reason: "down".into(),
                })
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(got, Ok(7));
        let never = retried(Duration::from_secs(1), "x", || async {
            Err::<(), _>(Error::Unavailable {
                reason: "down".into(),
            })
        })
        .await;
        assert_eq!(never.unwrap_err().code(), -5002);
        let other = retried(Duration::from_secs(1), "x", || async {
            Err::<(), _>(Error::Rejected {
                reason: "no".into(),
            })
        })
        .await;
        assert_eq!(other.unwrap_err().code(), -5005);
        let slow = retried(Duration::from_secs(1), "x", || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        })
        .await;
        assert_eq!(slow.unwrap_err().code(), -5003);
    }
}
