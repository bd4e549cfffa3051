//! A standby publishing how far it has applied the log (`EtcdLog::publish_applied`), on a lease
//! of its own that it refreshes at each publication: the leader truncates the log no further
//! than the lowest published position, and a standby that dies stops holding the log back one
//! TTL later. The publication runs as a task of its own ([`Publisher::spawn`]), so that a long
//! catch-up or bootstrap of the standby does not let its lease lapse; its key names the
//! standby's address and this process (two standbys advertising one address stay apart).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::{oneshot, watch};

use super::Status;
use crate::error::{Error, Result};
use crate::log::EtcdLog;
use crate::metadata::timed;

/// A standby's publication of its applied position.
pub(super) struct Publisher {
    client: Client,
    log: Arc<EtcdLog>,
    /// The standby's id: its advertised rpc address.
    id: String,
    /// The lease's TTL, in seconds.
    ttl: i64,
    timeout: Duration,
    lease: Option<Kept>,
}

/// A granted lease and its keep-alive stream.
struct Kept {
    id: i64,
    keeper: LeaseKeeper,
    answers: LeaseKeepAliveStream,
}

impl Publisher {
    /// A publisher for the standby at `address` (its id in etcd: the address with each `/`
    /// written `%2F`, then `#` and a random id for this process) on leases of `ttl` (whole
    /// seconds, at least 1).
    pub(super) fn new(
        client: Client,
        log: Arc<EtcdLog>,
        address: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Publisher {
        let id = format!(
            "{}#{:x}",
            address.replace('%', "%25").replace('/', "%2F"),
            super::rules::random()
        );
        let ttl = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        Publisher {
            client,
            log,
            id,
            ttl,
            timeout,
            lease: None,
        }
    }

    /// Publishes the position `status` says, every [`Publisher::period`], on `handle`'s
    /// runtime, until the returned guard is dropped; then it withdraws the publication.
    pub(super) fn spawn(
        self,
        status: watch::Receiver<Status>,
        handle: &tokio::runtime::Handle,
    ) -> Publishing {
        let (stop, stopped) = oneshot::channel();
        // Not aborted with the guard: it ends by itself once told, after withdrawing.
        drop(handle.spawn(self.run(status, stopped)));
        Publishing { _stop: stop }
    }

    async fn run(mut self, status: watch::Receiver<Status>, mut stopped: oneshot::Receiver<()>) {
        let mut tick = tokio::time::interval(self.period());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = tick.tick() => {}
            }
            let seq = status.borrow().applied;
            match self.publish(seq).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "publishing the applied position failed; trying again");
                }
                Err(_) => {}
            }
        }
        self.retire().await;
    }

    /// How often to publish: three times per TTL, so that one lost refresh does not expire it.
    fn period(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.ttl).unwrap_or(1).saturating_mul(1000) / 3)
    }

    /// Refreshes the lease (granting a new one if it is gone) and publishes `seq` on it.
    async fn publish(&mut self, seq: u64) -> Result<()> {
        let lease = self.refresh().await?;
        let published = self.log.publish_applied(&self.id, seq, lease).await;
        if let Err(Error::LeaseNotFound { .. }) = published {
            self.lease = None;
        }
        published
    }

    /// Withdraws the publication (this master leads now, or stops): revokes its lease.
    async fn retire(mut self) {
        if let Some(kept) = self.lease.take() {
            let mut leases = self.client.lease_client();
            if let Err(e) = timed(self.timeout, "revoke", leases.revoke(kept.id)).await {
                tracing::debug!(error = %e, "revoking the standby's lease failed; it expires by itself");
            }
        }
    }

    /// The lease, kept alive now: the current one if etcd still has it, else a new one.
    async fn refresh(&mut self) -> Result<i64> {
        if let Some(kept) = &mut self.lease {
            match keep_alive(kept, self.timeout).await {
                Ok(true) => return Ok(kept.id),
                Ok(false) => {}
                Err(e) => {
                    self.lease = None;
                    return Err(e);
                }
            }
            self.lease = None;
        }
        let mut leases = self.client.lease_client();
        let granted = timed(self.timeout, "grant", leases.grant(self.ttl, None)).await?;
        let (keeper, answers) =
            timed(self.timeout, "keep-alive", leases.keep_alive(granted.id())).await?;
        let id = granted.id();
        self.lease = Some(Kept {
            id,
            keeper,
            answers,
        });
        Ok(id)
    }
}

/// A running publication: dropping it withdraws it (the lease is revoked; should that fail,
/// the lease expires by itself).
pub(super) struct Publishing {
    _stop: oneshot::Sender<()>,
}

/// One keep-alive: whether the lease still lives.
async fn keep_alive(kept: &mut Kept, timeout: Duration) -> Result<bool> {
    timed(timeout, "keep-alive", kept.keeper.keep_alive()).await?;
    match timed(timeout, "keep-alive", kept.answers.message()).await? {
        Some(answer) => Ok(answer.ttl() > 0),
        None => Err(Error::Unavailable {
            reason: "the keep-alive stream ended".into(),
        }),
    }
}
