//! The task that keeps one descriptor's lease alive, and replaces the lease if it is lost.
//!
//! etcd-client does not refresh leases by itself: its `LeaseKeeper` must be driven. The task
//! sends a keep-alive about every TTL/3 on one keep-alive stream and reads the answer; a broken
//! stream is opened again (the lease survives a short outage: it lasts its TTL), and a lease
//! that etcd reports gone (expired during a longer outage) is replaced by a new one with the
//! last descriptor put again. The task holds only a weak reference to its store, and its
//! [`Task`] handle aborts it when the store drops the publication (remove, replacement, or the
//! store dropped).

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;

use crate::error::Error;
use crate::metadata::Inner;
use crate::task::Task;

/// A lease etcd granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    /// Its id.
    pub(crate) id: i64,
    /// The TTL etcd granted, in seconds (at least the one asked for).
    pub(crate) ttl: i64,
}

/// Starts keeping `granted` (the lease of the descriptor of `name`) alive, on the store's
/// runtime.
pub(crate) fn spawn(inner: &Arc<Inner>, name: String, granted: Granted) -> Task {
    let task = run(
        inner.client.clone(),
        Arc::downgrade(inner),
        name,
        granted,
        inner.timeout,
    );
    Task::new(inner.handle.spawn(task))
}

/// How often a lease of `ttl` seconds is refreshed: a third of its TTL.
fn period(ttl: i64) -> Duration {
    let ttl_ms = u64::try_from(ttl.max(1)).unwrap_or(1).saturating_mul(1000);
    Duration::from_millis(ttl_ms / 3).max(Duration::from_millis(200))
}

/// Why keeping a lease alive stopped.
enum End {
    /// etcd says the lease is gone.
    Lost,
    /// The keep-alive stream failed; the lease may still live.
    Broken(Error),
}

async fn run(
    client: Client,
    store: Weak<Inner>,
    name: String,
    mut lease: Granted,
    timeout: Duration,
) {
    loop {
        match keep(&client, lease, timeout).await {
            End::Lost => {
                tracing::warn!(segment = %name, lease = lease.id, "lease lost; publishing the descriptor again");
                match republish(&store, &name, lease.id).await {
                    Some(granted) => lease = granted,
                    None => return,
                }
            }
            End::Broken(e) => {
                tracing::debug!(segment = %name, lease = lease.id, error = %e, "keep-alive stream broken; opening another");
                tokio::time::sleep(period(lease.ttl)).await;
            }
        }
    }
}

/// Keeps `lease` alive on one keep-alive stream until it breaks or the lease is gone.
async fn keep(client: &Client, lease: Granted, timeout: Duration) -> End {
    let timed_out = || {
        End::Broken(Error::Timeout {
            op: "lease keep-alive".into(),
            after: timeout,
        })
    };
    let mut leases = client.lease_client();
    let (mut keeper, mut answers) =
        match tokio::time::timeout(timeout, leases.keep_alive(lease.id)).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) if Error::is_lease_not_found(&e) => return End::Lost,
            Ok(Err(e)) => return End::Broken(e.into()),
            Err(_) => return timed_out(),
        };
    loop {
        tokio::time::sleep(period(lease.ttl)).await;
        if let Err(e) = keeper.keep_alive().await {
            return End::Broken(e.into());
        }
        match tokio::time::timeout(timeout, answers.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
            Ok(Ok(Some(_))) => return End::Lost,
            Ok(Ok(None)) => {
                return End::Broken(Error::Unavailable {
                    reason: "the keep-alive stream ended".into(),
                })
            }
            Ok(Err(e)) => return End::Broken(e.into()),
            Err(_) => return timed_out(),
        }
    }
}

/// Puts the descriptor of `name` again under a new lease, if the store still lives and still
/// publishes it on the `lost` lease; retries until it succeeds or that stops being so.
async fn republish(store: &Weak<Inner>, name: &str, lost: i64) -> Option<Granted> {
    loop {
        let inner = store.upgrade()?;
        {
            let mut published = inner.published.lock().await;
            let p = published.get_mut(name)?;
            if p.lease != lost {
                return None;
            }
            let key = inner.keys.segment(name);
            match inner.grant_and_put(&key, &p.value, p.ttl).await {
                Ok(granted) => {
                    p.lease = granted.id;
                    return Some(granted);
                }
                Err(e) => {
                    tracing::warn!(segment = %name, error = %e, "descriptor not published again yet; retrying")
                }
            }
        }
        drop(inner);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_refreshed_three_times_per_ttl() {
        assert_eq!(period(2), Duration::from_millis(666));
        assert_eq!(period(30), Duration::from_secs(10));
        assert_eq!(period(0), Duration::from_millis(333));
        assert_eq!(period(i64::MAX), Duration::from_millis(u64::MAX / 3));
    }
}
