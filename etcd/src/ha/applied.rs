//! A standby publishing how far it has applied the log (`EtcdLog::publish_applied`), on a lease
//! of its own that it refreshes at each publication: the leader truncates the log no further
//! than the lowest published position, and a standby that dies stops holding the log back one
//! TTL later.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};

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
    /// written `%2F`) on leases of `ttl` (whole seconds, at least 1).
    pub(super) fn new(
        client: Client,
        log: Arc<EtcdLog>,
        address: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Publisher {
        let id = address.replace('%', "%25").replace('/', "%2F");
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

    /// How often to publish: three times per TTL, so that one lost refresh does not expire it.
    pub(super) fn period(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.ttl).unwrap_or(1).saturating_mul(1000) / 3)
    }

    /// Refreshes the lease (granting a new one if it is gone) and publishes `seq` on it.
    pub(super) async fn publish(&mut self, seq: u64) -> Result<()> {
        let lease = self.refresh().await?;
        let published = self.log.publish_applied(&self.id, seq, lease).await;
        if let Err(Error::LeaseNotFound { .. }) = published {
            self.lease = None;
        }
        published
    }

    /// Withdraws the publication (this master leads now, or stops): revokes its lease.
    pub(super) async fn retire(mut self) {
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
