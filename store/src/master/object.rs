//! What the master keeps per object, per write in progress, and per range held back.

use serde::{Deserialize, Deserializer, Serialize};
use smallvec::SmallVec;

use super::space::Replica;
use super::types::{ClientId, Millis};

/// The replicas of one object; one replica is stored inline.
pub type Replicas = SmallVec<[Replica; 1]>;

/// Reads [`Replicas`] as `SmallVec` writes them, reserving room only for replicas that
/// arrive: `SmallVec`'s own `Deserialize` reserves the count the input declares before reading
/// one, so a damaged count in a log entry or snapshot asked for gigabytes (or terabytes, and
/// failed). Fields of type `Replicas` in durable records use it
/// (`#[serde(deserialize_with = "deserialize_replicas")]`).
pub(crate) fn deserialize_replicas<'de, D: Deserializer<'de>>(d: D) -> Result<Replicas, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Replicas;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a sequence of replicas")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Replicas, A::Error> {
            // Objects have a handful of replicas: a larger declared count is only reserved as
            // the replicas actually arrive.
            let mut out = Replicas::with_capacity(seq.size_hint().unwrap_or(0).min(8));
            while let Some(r) = seq.next_element()? {
                out.push(r);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Visitor)
}

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
    #[serde(deserialize_with = "deserialize_replicas")]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::types::MountId;

    fn write(n: u32) -> PendingWrite {
        PendingWrite {
            client: ClientId(7),
            started: 1,
            size: 64,
            replicas: (0..n)
                .map(|i| Replica {
                    mount: MountId(i),
                    offset: 128 * u64::from(i),
                })
                .collect(),
            in_place: false,
            replaces: true,
            pin: Pin::Soft,
        }
    }

    #[test]
    fn replicas_read_back_as_smallvec_wrote_them() {
        for n in [0, 1, 3] {
            let bytes = bincode::serialize(&write(n)).unwrap();
            let back: PendingWrite = bincode::deserialize(&bytes).unwrap();
            assert_eq!(back, write(n));
        }
    }

    /// Regression (found by `master::disk::decode_fuzz`): a snapshot frame of 438 bytes whose
    /// replica count was damaged made the decoder ask for 537 MB before reading one replica.
    #[test]
    fn a_damaged_replica_count_allocates_nothing_wild() {
        let mut bytes = bincode::serialize(&write(1)).unwrap();
        // client (16 bytes), started and size (8 each), then the count (u64 LE).
        assert_eq!(bytes[32..40], 1u64.to_le_bytes());
        for count in [1u64 << 24, 1 << 40, u64::MAX] {
            bytes[32..40].copy_from_slice(&count.to_le_bytes());
            let (res, peak) =
                yuebing_testkit::alloc::measure(|| bincode::deserialize::<PendingWrite>(&bytes));
            assert!(
                res.is_err(),
                "{count} replicas do not fit in {} bytes",
                bytes.len()
            );
            assert!(peak < 4096, "{peak} bytes allocated for a count of {count}");
        }
    }
}
