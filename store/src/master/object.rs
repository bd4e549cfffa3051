//! What the master keeps per object, per write in progress, and per range held back.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::space::Replica;
use super::types::{ClientId, Millis};

/// The replicas of one object; one replica is stored inline.
pub type Replicas = SmallVec<[Replica; 1]>;

/// Eviction protection chosen at put time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub enum Pin {
    /// Evicted oldest access first.
    #[default]
    None,
    /// Evicted after unpinned objects while accessed within the soft-pin TTL.
    Soft,
    /// Never evicted.
    Hard,
}

/// A completed object. Kept small: the master holds millions of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
    pub(crate) size: u64,
    pub(crate) replicas: Replicas,
    /// When its put (or upsert) ended: the durable part of its access time.
    pub(crate) stamped: Millis,
    /// End of the newest read lease (soft state: not logged, not in snapshots).
    pub(crate) lease_until: Millis,
    pub(crate) pin: Pin,
    /// An upsert of this key is in progress (see the master's `writes`).
    pub(crate) writing: bool,
}

impl Object {
    /// The last access: the put's end or the newest lease grant, whichever is later.
    pub(crate) fn accessed(&self, lease_ttl: u64) -> Millis {
        self.stamped.max(self.lease_until.saturating_sub(lease_ttl))
    }

    pub(crate) fn leased(&self, now: Millis) -> bool {
        self.lease_until > now
    }
}

/// A put or upsert between its start and its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingWrite {
    pub(crate) client: ClientId,
    pub(crate) started: Millis,
    pub(crate) size: u64,
    /// Newly allocated replicas; empty for an in-place upsert (which writes into the object's).
    pub(crate) replicas: Replicas,
    pub(crate) in_place: bool,
    /// A completed object of the key exists and this write replaces it (an upsert).
    pub(crate) replaces: bool,
    pub(crate) pin: Pin,
}

/// Space taken from a write that may still be in flight (a pre-empted or forcibly removed put)
/// or from a replaced object a reader may still hold a lease on: kept out of use until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Held {
    pub(crate) until: Millis,
    pub(crate) replica: Replica,
    pub(crate) size: u64,
}
