//! The master election on etcd (issue 16): candidates campaign on an etcd lease, the oldest
//! candidate key leads, and everyone can read or follow who leads.
//!
//! # How a campaign goes
//! [`Election::campaign`] grants a lease of the election's TTL (etcd may grant more; the
//! granted TTL is what counts), starts keeping it alive on the election's runtime, and only
//! then campaigns under [`Keys::election`]: a standby may wait in the campaign for hours and
//! its lease must live meanwhile. etcd answers once the candidate's key
//! (`<election>/<lease id, hex>`) is the oldest. The **epoch** is that key's create revision
//! (`resp.leader().rev()`; the response header's revision is stale). As etcd's wait does not
//! notice the candidate's own lease expiring (etcd #19597), the win is confirmed by a
//! transaction on `CreateRevision(key) == epoch` and by the lease still holding. The
//! [`Leadership`] returned may serve only after its margin ([`LeaderLease::margin`]) has passed
//! ([`Leadership::usable_at`]): by then etcd has expired the previous leader's lease, whose
//! holder stopped serving a margin before that.
//!
//! # Losing it
//! A leader serves until its lease's deadline, counted from the send time of its last answered
//! keep-alive minus the margin ([`LeaderLease`]). When etcd reports the lease gone, or the
//! deadline passes unrenewed (etcd unreachable), the leadership is lost for good
//! ([`Leadership::lost`], [`Error::LeaseLost`]): unlike a segment descriptor's lease, an
//! election lease is never replaced. The master steps down and campaigns again from scratch.
//!
//! # Cancel safety
//! Dropping a campaign's future (a shutdown) drops its lease, which revokes it on the
//! election's runtime; etcd also deletes the key of a cancelled campaign. A lease granted but
//! not yet answered when the future is dropped expires after its TTL; no key is on it.
//!
//! # Following the leader
//! [`Election::leader`] reads who leads now; [`Election::observe`] follows each new leader.
//!
//! # A master's loop
//! ```no_run
//! # async fn master(config: yuebing_etcd::EtcdConfig) -> yuebing_etcd::Result<()> {
//! use std::time::{Duration, Instant};
//! use yuebing_etcd::Election;
//!
//! let handle = tokio::runtime::Handle::current();
//! let election = Election::connect_on(&config, Duration::from_secs(5), handle).await?;
//! loop {
//!     let leadership = match election.campaign("10.0.0.7:50051".into()).await {
//!         Ok(l) => l,
//!         // A lost lease or etcd away for a while: campaign again from scratch.
//!         Err(e) if e.is_retryable() || e.code() == -5016 => {
//!             tokio::time::sleep(Duration::from_secs(1)).await;
//!             continue;
//!         }
//!         Err(e) => return Err(e),
//!     };
//!     if leadership.ready().await.is_err() {
//!         continue; // lost during its margin
//!     }
//!     // Serve, checking `leadership.may_serve(Instant::now())` before each action and
//!     // guarding every etcd transaction with `leadership.compare()`; until:
//!     let lost = leadership.lost().await;
//!     assert!(!leadership.may_serve(Instant::now()), "{lost}");
//! }
//! # }
//! ```
//!
//! [`Keys::election`]: crate::Keys::election
//! [`LeaderLease`]: yuebing_store::master::ha::LeaderLease
//! [`LeaderLease::margin`]: yuebing_store::master::ha::LeaderLease::margin

mod leadership;
mod lease;
mod retry;
mod state;

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, KeyValue, Txn};
use futures::stream::{BoxStream, StreamExt};
use tokio::runtime::Handle;

pub use self::leadership::Leadership;
use self::lease::ElectionLease;
use self::retry::retried;
use crate::config::{EtcdConfig, Keys};
use crate::error::{Error, Result};

/// The pause before a campaign broken by etcd being unavailable is tried again on the same
/// lease.
const CAMPAIGN_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Who leads: the leader's rpc address and epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaderInfo {
    /// The value the leader campaigned with: its rpc address, `host:port`.
    pub address: String,
    /// Its epoch: the create revision of its election key.
    pub epoch: i64,
}

/// The master election of one yuebing cluster (see the module documentation). `Send + Sync`;
/// cheap to share in an `Arc`. Keep-alive tasks and revocations run on the runtime it was made
/// for; its calls may be awaited on any tokio runtime.
#[derive(Clone)]
pub struct Election {
    client: Client,
    /// The election's name, [`Keys::election`].
    name: String,
    /// The TTL asked for, in whole seconds.
    ttl: i64,
    timeout: Duration,
    handle: Handle,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// The election of `config`'s cluster on a lease of `ttl` (rounded up to whole seconds;
    /// etcd may grant more), its client and tasks on `handle`'s runtime.
    pub async fn connect_on(config: &EtcdConfig, ttl: Duration, handle: Handle) -> Result<Self> {
        let client = config.connect_on(&handle).await?;
        Self::with_client(client, &config.keys()?, ttl, config.request_timeout, handle)
    }

    /// The election under `keys` on an existing client (made by [`EtcdConfig::connect_on`] on
    /// `handle`; it must have no channel-wide request timeout, which would cancel a waiting
    /// campaign), with `request_timeout` for each unary call other than the campaign.
    pub fn with_client(
        client: Client,
        keys: &Keys,
        ttl: Duration,
        request_timeout: Duration,
        handle: Handle,
    ) -> Result<Self> {
        Ok(Election {
            client,
            name: keys.election(),
            ttl: ttl_seconds(ttl)?,
            timeout: request_timeout,
            handle,
        })
    }

    /// The election's name: candidates' keys lie under `<name>/`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The TTL asked for each campaign's lease.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl.unsigned_abs())
    }

    /// Campaigns with `value` (the candidate's rpc address, `host:port`) and returns once this
    /// candidate leads, which may take as long as another leads. Fails with
    /// [`Error::LeaseLost`] if the candidate's lease is lost while it waits (etcd unreachable
    /// for about a TTL), and with the error of any call that cannot be retried; a campaign
    /// broken by etcd being briefly unavailable is made again on the same lease. Cancel-safe:
    /// dropping the future revokes the lease.
    pub async fn campaign(&self, value: String) -> Result<Leadership> {
        let lease =
            ElectionLease::grant(&self.client, &self.handle, self.ttl, self.timeout).await?;
        let lost = lease.lost();
        tokio::pin!(lost);
        let mut election = self.client.election_client();
        let mut won = loop {
            let attempt = election.campaign(self.name.as_str(), value.as_str(), lease.id());
            let result = tokio::select! {
                result = attempt => result,
                e = &mut lost => return Err(e),
            };
            match result {
                Ok(won) => break won,
                Err(e) if Error::is_lease_not_found(&e) => return Err(lease_gone(&lease)),
                Err(e) => {
                    let e = Error::from(e);
                    if !e.is_retryable() {
                        return Err(e);
                    }
                    tracing::debug!(lease = lease.id(), error = %e, "campaign broken; campaigning again");
                    tokio::select! {
                        _ = tokio::time::sleep(CAMPAIGN_RETRY_PAUSE) => {}
                        e = &mut lost => return Err(e),
                    }
                }
            }
        };
        let leader = won.take_leader().ok_or_else(|| Error::Client {
            reason: "etcd answered a campaign without a leader key".into(),
        })?;
        let key = leader
            .key_str()
            .map_err(|e| Error::BadValue {
                key: String::from_utf8_lossy(leader.key()).into_owned(),
                reason: format!("an election key that is not UTF-8: {e}"),
            })?
            .to_string();
        let epoch = leader.rev();
        if epoch <= 0 || leader.lease() != lease.id() {
            return Err(Error::Client {
                reason: format!(
                    "etcd answered a campaign with key {key:?} revision {epoch} lease {:#x}, \
                     not this candidate's lease {:#x}",
                    leader.lease(),
                    lease.id()
                ),
            });
        }
        self.confirm(&key, epoch, &lease).await?;
        let margin = lease.state().lease().margin();
        Ok(Leadership::new(lease, leader, key, Instant::now() + margin))
    }

    /// Confirms a won campaign: the key still exists with create revision `epoch` (etcd's wait
    /// does not notice the candidate's own lease expiring, etcd #19597), and the lease holds.
    async fn confirm(&self, key: &str, epoch: i64, lease: &ElectionLease) -> Result<()> {
        let confirmed = retried(self.timeout, "confirm leadership", || {
            let mut kv = self.client.kv_client();
            let txn = Txn::new().when([Compare::create_revision(
                key,
                etcd_client::CompareOp::Equal,
                epoch,
            )]);
            async move { kv.txn(txn).await.map_err(Error::from) }
        })
        .await?;
        if !confirmed.succeeded() {
            return Err(Error::LeaseLost {
                lease: lease.id(),
                reason: format!(
                    "the campaign returned, but election key {key:?} with create revision \
                     {epoch} is gone"
                ),
            });
        }
        lease.check()?;
        if !lease.state().may_serve(Instant::now()) {
            return Err(lease_gone(lease));
        }
        Ok(())
    }

    /// Who leads now; `None` when no candidate does.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        retried(self.timeout, "election leader", || {
            let mut election = self.client.election_client();
            let name = self.name.clone();
            async move {
                match election.leader(name).await {
                    Ok(resp) => resp.kv().map(leader_info).transpose(),
                    Err(e) if is_no_leader(&e) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await
    }

    /// Follows the leader: the current one (once there is one), then each new one, in order,
    /// each once. A time without a leader shows as nothing until the next one wins. The stream
    /// ends after its first error (etcd unreachable, the stream broken); observe again, and
    /// read [`Election::leader`] to learn what was missed. Nothing is spawned: the stream
    /// moves only while polled.
    pub fn observe(&self) -> BoxStream<'static, Result<LeaderInfo>> {
        /// Where the stream stands.
        enum Step {
            Start(Box<etcd_client::ElectionClient>, String),
            Open(Box<etcd_client::ObserveStream>, Option<LeaderInfo>),
            Done,
        }
        let start = Step::Start(Box::new(self.client.election_client()), self.name.clone());
        futures::stream::unfold(start, |step| async move {
            let (mut stream, mut last) = match step {
                // No timeout: etcd sends nothing, not even headers, until there is a leader.
                Step::Start(mut client, name) => match client.observe(name).await {
                    Ok(stream) => (Box::new(stream), None),
                    Err(e) => return Some((Err(e.into()), Step::Done)),
                },
                Step::Open(stream, last) => (stream, last),
                Step::Done => return None,
            };
            loop {
                let item = match stream.message().await {
                    Ok(Some(resp)) => match resp.kv().map(leader_info) {
                        Some(Ok(info)) => Ok(info),
                        Some(Err(e)) => Err(e),
                        None => continue,
                    },
                    Ok(None) => Err(Error::Unavailable {
                        reason: "the election's observe stream ended".into(),
                    }),
                    Err(e) => Err(e.into()),
                };
                return match item {
                    Ok(info) if last.as_ref() == Some(&info) => continue,
                    Ok(info) => {
                        last = Some(info.clone());
                        Some((Ok(info), Step::Open(stream, last)))
                    }
                    Err(e) => Some((Err(e), Step::Done)),
                };
            }
        })
        .boxed()
    }
}

/// The leader's address and epoch from its election key.
fn leader_info(kv: &KeyValue) -> Result<LeaderInfo> {
    let address = kv.value_str().map_err(|e| Error::BadValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: format!("a leader address that is not UTF-8: {e}"),
    })?;
    Ok(LeaderInfo {
        address: address.to_string(),
        epoch: kv.create_revision(),
    })
}

/// Whether etcd said the election has no leader (`election: no leader`, gRPC Unknown).
fn is_no_leader(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("election: no leader"))
}

/// The error for a lease etcd reported gone.
fn lease_gone(lease: &ElectionLease) -> Error {
    let reason = lease
        .state()
        .lost()
        .unwrap_or("etcd reports the lease not found (expired or revoked)")
        .to_string();
    Error::LeaseLost {
        lease: lease.id(),
        reason,
    }
}

/// A TTL in whole seconds for etcd, rounded up; zero is refused.
fn ttl_seconds(ttl: Duration) -> Result<i64> {
    if ttl.is_zero() {
        return Err(Error::config("the election's TTL must be positive"));
    }
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(secs).map_err(|_| Error::config(format!("TTL {ttl:?} is too long for etcd")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(2001)).unwrap(), 3);
        assert_eq!(ttl_seconds(Duration::ZERO).unwrap_err().code(), -5001);
        assert_eq!(ttl_seconds(Duration::MAX).unwrap_err().code(), -5001);
    }

    #[test]
    fn no_leader_is_told_apart_from_other_errors() {
        use tonic::{Code, Status};
        let no = etcd_client::Error::GRpcStatus(Status::new(Code::Unknown, "election: no leader"));
        assert!(is_no_leader(&no));
        let other = etcd_client::Error::GRpcStatus(Status::new(Code::Unknown, "boom"));
        assert!(!is_no_leader(&other));
    }

    #[test]
    fn leader_info_reads_value_and_create_revision() {
        // KeyValue has no public constructor; its protobuf form converts.
        let pb = etcd_client::proto::PbKeyValue {
            key: b"/e/1".to_vec(),
            value: b"127.0.0.1:7".to_vec(),
            create_revision: 42,
            ..Default::default()
        };
        let kv: &KeyValue = (&pb).into();
        let info = leader_info(kv).unwrap();
        assert_eq!(info.address, "127.0.0.1:7");
        assert_eq!(info.epoch, 42);
    }
}
