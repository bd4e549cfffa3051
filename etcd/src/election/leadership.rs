//! [`Leadership`]: a won election, usable while its lease holds.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, LeaderKey, ResignOptions};
use yuebing_store::master::ha::LeaderLease;

use super::lease::ElectionLease;
use super::retry::retried;
use crate::error::{Error, Result};

/// A won election (see [`crate::election`]). The leader may serve while
/// [`Leadership::may_serve`] says so: not before its margin has passed after winning
/// ([`Leadership::usable_at`]), and never after its lease's deadline (counted from the send
/// time of its last answered keep-alive) or once etcd reported the lease gone.
/// [`Leadership::lost`] resolves then; a lost leadership is never renewed: step down and
/// campaign again.
///
/// `Send + Sync`. Dropping it stops its keep-alive task and revokes its lease on the election's
/// runtime, so that the next candidate wins at once; [`Leadership::resign`] does the same and
/// waits for it.
#[derive(Debug)]
pub struct Leadership {
    lease: ElectionLease,
    leader: LeaderKey,
    key: String,
    epoch: i64,
    usable_at: Instant,
}

impl Leadership {
    /// Wraps a confirmed win: usable from `usable_at`.
    pub(super) fn new(
        lease: ElectionLease,
        leader: LeaderKey,
        key: String,
        usable_at: Instant,
    ) -> Leadership {
        Leadership {
            epoch: leader.rev(),
            lease,
            leader,
            key,
            usable_at,
        }
    }

    /// The epoch: the create revision of the leader's election key. It grows from leader to
    /// leader; every log append is guarded by it ([`Leadership::compare`]).
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The leader's election key, `<election>/<lease id, hex>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The id of the lease the leadership lives on.
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// The TTL etcd granted the lease (at least the one asked for).
    pub fn granted_ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// The condition that holds exactly while this leadership does: the election key exists
    /// with create revision [`Leadership::epoch`]. Put it in every transaction the leader
    /// commits, so a deposed leader that has not noticed yet cannot commit.
    pub fn compare(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.epoch)
    }

    /// When the leader may start serving: its margin after the win was confirmed, by which
    /// time etcd has expired the previous leader's lease past any doubt.
    pub fn usable_at(&self) -> Instant {
        self.usable_at
    }

    /// Whether the leader may serve (accept writes and reads) at `now`: past
    /// [`Leadership::usable_at`], before the lease's deadline, the lease not lost.
    pub fn may_serve(&self, now: Instant) -> bool {
        now >= self.usable_at && self.lease.state().may_serve(now)
    }

    /// A copy of the leader's lease as it stands (its deadline, its margin).
    pub fn lease(&self) -> LeaderLease {
        self.lease.state().lease().clone()
    }

    /// The latest deadline the lease reached: while the lease holds, the instant serving must
    /// stop unless a keep-alive is answered first; once lost, the last instant at which the
    /// leader could have served.
    pub fn deadline(&self) -> Option<Instant> {
        self.lease.state().deadline()
    }

    /// The error that says the leadership is lost ([`Error::LeaseLost`]), if it is.
    pub fn check(&self) -> Result<()> {
        self.lease.check()
    }

    /// Resolves once the leadership is lost: etcd reported the lease gone, or its deadline
    /// passed without a renewal. The future owns what it needs (spawn it, or select on it).
    pub fn lost(&self) -> impl std::future::Future<Output = Error> + Send + 'static {
        self.lease.lost()
    }

    /// Waits until [`Leadership::usable_at`]; fails if the leadership is lost by then.
    pub async fn ready(&self) -> Result<()> {
        tokio::time::sleep_until(self.usable_at.into()).await;
        self.check()
    }

    /// Gives the leadership up: resigns (etcd deletes the election key, so the next candidate
    /// wins at once), then revokes the lease. The lease is revoked even if resigning fails.
    pub async fn resign(self) -> Result<()> {
        let Leadership { lease, leader, .. } = self;
        let resigned = retried(lease.timeout(), "election resign", || {
            let mut election = lease.client().election_client();
            let options = ResignOptions::new().with_leader(leader.clone());
            async move {
                match election.resign(Some(options)).await {
                    Ok(_) => Ok(()),
                    // The key went with its lease: nothing to resign.
                    Err(e) if Error::is_lease_not_found(&e) => Ok(()),
                    Err(e) => Err(Error::from(e)),
                }
            }
        })
        .await;
        let revoked = lease.revoke().await;
        resigned.and(revoked)
    }
}
