//! [`ElectionLease`]: the etcd lease a candidate campaigns on and a leader leads on, kept
//! alive by a task from the moment it is granted until it is revoked, dropped or lost.
//!
//! The task sends a keep-alive about every TTL/3 on one keep-alive stream and feeds each answer,
//! with the time its keep-alive was *sent*, to the lease's [`LeaseState`]. A broken stream is
//! opened again soon (the lease lasts its TTL meanwhile); etcd saying the lease is gone (a TTL
//! of 0, "lease not found"), or the deadline passing without a renewal, makes the lease lost
//! for good and ends the task. Dropping the [`ElectionLease`] stops the task and revokes the
//! lease on its runtime, so that etcd deletes the candidate's key at once.

use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::retry::retried;
use super::state::LeaseState;
use crate::error::{Error, Result};
use crate::task::Task;

/// The pause before a broken keep-alive stream is opened again.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

/// An election lease and the task keeping it alive (see the module documentation).
pub(crate) struct ElectionLease {
    id: i64,
    ttl: Duration,
    client: Client,
    handle: Handle,
    timeout: Duration,
    state: watch::Receiver<LeaseState>,
    /// Stops the keep-alive task when dropped.
    keeper: Option<Task>,
    /// Whether the lease still has to be revoked.
    revoke_on_drop: bool,
}

impl std::fmt::Debug for ElectionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionLease")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl ElectionLease {
    /// Grants a lease of `ttl` seconds and starts keeping it alive on `handle`'s runtime.
    pub(crate) async fn grant(
        client: &Client,
        handle: &Handle,
        ttl: i64,
        timeout: Duration,
    ) -> Result<ElectionLease> {
        // Tried again while etcd is unavailable: a grant whose answer was lost leaves a lease
        // with nothing on it, which expires after its TTL.
        let mut sent = Instant::now();
        let resp = retried(timeout, "lease grant", || {
            let mut leases = client.lease_client();
            sent = Instant::now();
            async move { leases.grant(ttl, None).await.map_err(Error::from) }
        })
        .await?;
        let id = resp.id();
        let Some(granted) = u64::try_from(resp.ttl()).ok().filter(|&t| t > 0) else {
            let _ = revoke(client, id, timeout).await;
            return Err(Error::Rejected {
                reason: format!("etcd granted lease {id:#x} a TTL of {}", resp.ttl()),
            });
        };
        let ttl = Duration::from_secs(granted);
        let (tx, state) = watch::channel(LeaseState::granted(ttl, sent));
        let task = keep_alive(client.clone(), id, period(ttl), timeout, tx);
        let lease = ElectionLease {
            id,
            ttl,
            client: client.clone(),
            handle: handle.clone(),
            timeout,
            state,
            keeper: Some(Task::new(handle.spawn(task))),
            revoke_on_drop: true,
        };
        Ok(lease)
    }

    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The current state.
    pub(crate) fn state(&self) -> watch::Ref<'_, LeaseState> {
        self.state.borrow()
    }

    /// The error that says the lease is lost, if it is.
    pub(crate) fn check(&self) -> Result<()> {
        match self.state.borrow().lost() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Resolves once the lease is lost, with the error that says why. Owns what it needs.
    pub(crate) fn lost(&self) -> impl std::future::Future<Output = Error> + Send + 'static {
        let mut state = self.state.clone();
        let id = self.id;
        async move {
            let reason = match state.wait_for(|s| s.lost().is_some()).await {
                Ok(s) => s.lost().unwrap_or_default().to_string(),
                // The task ended without saying why: only when its lease was dropped.
                Err(_) => "the keep-alive task stopped".to_string(),
            };
            Error::LeaseLost { lease: id, reason }
        }
    }

    fn lost_error(&self, reason: &str) -> Error {
        Error::LeaseLost {
            lease: self.id,
            reason: reason.to_string(),
        }
    }

    /// The client the lease was granted through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The request timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Stops keeping the lease alive and revokes it now.
    pub(crate) async fn revoke(mut self) -> Result<()> {
        self.keeper = None;
        self.revoke_on_drop = false;
        revoke(&self.client, self.id, self.timeout).await
    }
}

impl Drop for ElectionLease {
    fn drop(&mut self) {
        self.keeper = None;
        if self.revoke_on_drop {
            let (client, id, timeout) = (self.client.clone(), self.id, self.timeout);
            // On a runtime that has shut down, the task is dropped unrun: the lease expires.
            self.handle.spawn(async move {
                if let Err(e) = revoke(&client, id, timeout).await {
                    tracing::debug!(lease = id, error = %e, "election lease not revoked; it will expire");
                }
            });
        }
    }
}

/// Revokes `lease`; one etcd no longer knows is revoked already.
async fn revoke(client: &Client, lease: i64, timeout: Duration) -> Result<()> {
    retried(timeout, "lease revoke", || {
        let mut leases = client.lease_client();
        async move {
            match leases.revoke(lease).await {
                Ok(_) => Ok(()),
                Err(e) if Error::is_lease_not_found(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    })
    .await
}

/// How often a lease of `ttl` is refreshed: a third of its TTL, at least every 200 ms.
fn period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(200))
}

/// Why one keep-alive stream ended.
enum End {
    /// The lease is gone, for the reason given.
    Lost(String),
    /// The stream failed; the lease may still live.
    Broken(Error),
}

/// The keep-alive task: renews until the lease is lost, then records why and ends.
async fn keep_alive(
    client: Client,
    id: i64,
    period: Duration,
    timeout: Duration,
    state: watch::Sender<LeaseState>,
) {
    // No answer within a period means a stalled stream: open another while the lease lasts.
    let wait = timeout.min(period);
    let renewing = async {
        loop {
            match session(&client, id, period, wait, &state).await {
                End::Lost(reason) => return reason,
                End::Broken(e) => {
                    tracing::debug!(lease = id, error = %e, "election keep-alive broken; opening another");
                    tokio::time::sleep(REOPEN_PAUSE).await;
                }
            }
        }
    };
    let expiring = async {
        loop {
            let Some(deadline) = state.borrow().poll_deadline() else {
                return "lost".to_string();
            };
            if Instant::now() >= deadline {
                return "no keep-alive was answered before the lease's deadline".to_string();
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    };
    let reason = tokio::select! {
        reason = renewing => reason,
        reason = expiring => reason,
    };
    tracing::warn!(lease = id, %reason, "election lease lost");
    state.send_modify(|s| s.handle_gone(reason));
}

/// Keeps `id` alive on one keep-alive stream until the stream breaks or the lease is gone.
async fn session(
    client: &Client,
    id: i64,
    period: Duration,
    wait: Duration,
    state: &watch::Sender<LeaseState>,
) -> End {
    let timed_out = || {
        End::Broken(Error::Timeout {
            op: "lease keep-alive".into(),
            after: wait,
        })
    };
    let not_found = || End::Lost("etcd reports the lease not found (expired or revoked)".into());
    let answered = |sent: Instant| {
        let mut lost = None;
        state.send_modify(|s| {
            s.handle_answer(sent, Instant::now());
            lost = s.lost().map(str::to_string);
        });
        lost.map_or(Ok(()), |reason| Err(End::Lost(reason)))
    };
    let mut leases = client.lease_client();
    // Opening the stream sends a first keep-alive and reads its answer.
    let sent = Instant::now();
    let (mut keeper, mut answers) = match tokio::time::timeout(wait, leases.keep_alive(id)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) if Error::is_lease_not_found(&e) => return not_found(),
        Ok(Err(e)) => return End::Broken(e.into()),
        Err(_) => return timed_out(),
    };
    if let Err(end) = answered(sent) {
        return end;
    }
    loop {
        tokio::time::sleep(period).await;
        let sent = Instant::now();
        if let Err(e) = keeper.keep_alive().await {
            return End::Broken(e.into());
        }
        match tokio::time::timeout(wait, answers.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                if let Err(end) = answered(sent) {
                    return end;
                }
            }
            Ok(Ok(Some(_))) => return End::Lost("etcd answered a keep-alive with TTL 0".into()),
            Ok(Ok(None)) => {
                return End::Broken(Error::Unavailable {
                    reason: "the keep-alive stream ended".into(),
                })
            }
            Ok(Err(e)) if Error::is_lease_not_found(&e) => return not_found(),
            Ok(Err(e)) => return End::Broken(e.into()),
            Err(_) => return timed_out(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_refreshed_three_times_per_ttl() {
        assert_eq!(period(Duration::from_secs(3)), Duration::from_secs(1));
        assert_eq!(
            period(Duration::from_millis(300)),
            Duration::from_millis(200)
        );
    }
}
