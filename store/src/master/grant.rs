//! Space granted to a client ahead of its puts: a client holding a grant writes a small
//! object's bytes into it at once and needs only the publication round trip
//! ([`Master::put_granted`](super::Master::put_granted)).
//!
//! A grant is a range of one mounted range that the master handed to one client. What is left
//! of it is a set of free extents (aligned, relative to the mount); a publication takes an
//! object's replica out of them, and from then on that space is the object's (freed to the
//! mount when the object goes, not back to the grant). The master counts a grant's extents as
//! used store space, so eviction, quotas and statistics see them; the extents go back to the
//! mount when the client ends the grant, or when its lease on the cluster ends (held for the
//! write release time then: the client may still be writing there).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::space::Replica;
use super::types::{ClientId, MountId};

/// A grant, numbered by the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GrantId(pub u64);

impl std::fmt::Display for GrantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "grant {}", self.0)
    }
}

/// Where a granted range lies, as the client that holds it sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantDesc {
    /// Its id, named when an object placed in it is published.
    pub id: GrantId,
    /// The node (engine segment) that holds it.
    pub node: String,
    /// Its first byte in the node's memory.
    pub addr: u64,
    /// Its length in bytes (a multiple of the master's alignment).
    pub len: u64,
    /// The master's alignment: each object placed in the grant starts at a multiple of it
    /// from `addr` and takes its size rounded up to it.
    pub alignment: u64,
    /// For how long from the request the client may write into it: a write must end by
    /// then. The master keeps the space of a grant that ends (or whose store space goes)
    /// out of use for the write release time, which is at least this long.
    pub valid_ms: u64,
}

/// An object a client wrote into its grants, to publish ([`Master::put_granted`]).
///
/// [`Master::put_granted`]: super::Master::put_granted
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantedPut {
    /// The key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// One replica per entry: the grant it lies in, and its address in that grant's node.
    pub parts: Vec<(GrantId, u64)>,
}

/// A grant in the master's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub(crate) client: ClientId,
    pub(crate) mount: MountId,
    /// Offset (in the mount) and length of what was granted.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// What is left: offset (in the mount) to length, aligned, inside the granted range.
    pub(crate) free: BTreeMap<u64, u64>,
}

impl Grant {
    /// A whole, unused grant of `len` bytes (aligned) at `offset` of `mount`.
    pub(crate) fn new(client: ClientId, mount: MountId, offset: u64, len: u64) -> Self {
        Grant {
            client,
            mount,
            offset,
            len,
            free: BTreeMap::from([(offset, len)]),
        }
    }

    /// Whether `len` bytes (aligned) at `offset` lie in one free extent.
    pub(crate) fn holds(&self, offset: u64, len: u64) -> bool {
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        len > 0
            && self
                .free
                .range(..=offset)
                .next_back()
                .is_some_and(|(&o, &l)| end <= o + l)
    }

    /// Takes `len` bytes at `offset` out of the free extents; false (nothing changed) when
    /// they do not lie in one.
    pub(crate) fn take(&mut self, offset: u64, len: u64) -> bool {
        if !self.holds(offset, len) {
            return false;
        }
        let Some((&o, &l)) = self.free.range(..=offset).next_back() else {
            return false;
        };
        self.free.remove(&o);
        if offset > o {
            self.free.insert(o, offset - o);
        }
        let end = offset + len;
        if end < o + l {
            self.free.insert(end, o + l - end);
        }
        true
    }

    /// Bytes still free.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// The free extents as replicas of the mount (each with its length).
    pub(crate) fn extents(&self) -> impl Iterator<Item = (Replica, u64)> + '_ {
        let mount = self.mount;
        self.free
            .iter()
            .map(move |(&offset, &len)| (Replica { mount, offset }, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taking_splits_extents_and_refuses_what_is_not_free() {
        let mut g = Grant::new(ClientId(1), MountId(2), 4096, 4096);
        assert!(g.take(4096 + 1024, 1024));
        assert_eq!(g.free_bytes(), 3072);
        assert!(!g.take(4096 + 1024, 1024), "taken already");
        assert!(!g.take(4096 + 512, 1024), "overlaps the taken part");
        assert!(!g.take(0, 512), "before the grant");
        assert!(!g.take(8192, 512), "after the grant");
        assert!(!g.take(4096, 0), "empty");
        assert!(!g.take(u64::MAX - 10, 512), "overflows");
        assert!(g.take(4096, 1024));
        assert!(g.take(4096 + 2048, 2048));
        assert_eq!(g.free_bytes(), 0);
        assert_eq!(g.extents().count(), 0);
    }
}
