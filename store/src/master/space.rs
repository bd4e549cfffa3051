//! Store space: the ranges nodes mounted, grouped by node, and where replicas go.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::alloc::{RangeAllocator, SpaceReport};
use super::config::PlacementStrategy;
use super::object::Replicas;
use super::types::{ClientId, MountId, MountSpec, ReplicaDesc};

/// One replica's place: a mounted range and an offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Replica {
    /// The range.
    pub mount: MountId,
    /// Offset from the range's base.
    pub offset: u64,
}

/// One mounted range.
#[derive(Debug, Clone)]
pub(crate) struct Mount {
    pub(crate) client: ClientId,
    pub(crate) node: u32,
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) alloc: RangeAllocator,
    /// Set by a graceful unmount: no new allocations; removed at this time.
    pub(crate) draining_until: Option<u64>,
    /// False for ranges restored from disk until their node remounts them.
    pub(crate) ready: bool,
    /// Set on a range new to this master that a node remounted within a lease TTL of a
    /// restart or promotion: readers may still read it under leases an earlier master granted,
    /// so it takes no new replicas until then (soft state, see `Master::remount`).
    pub(crate) hold_until: Option<u64>,
}

impl Mount {
    pub(crate) fn allocatable(&self) -> bool {
        self.ready && self.draining_until.is_none() && self.hold_until.is_none()
    }
}

#[derive(Debug, Clone, Default)]
struct Node {
    name: String,
    mounts: Vec<MountId>,
}

/// All mounted ranges.
#[derive(Debug, Clone)]
pub(crate) struct Space {
    mounts: BTreeMap<MountId, Mount>,
    nodes: Vec<Node>,
    by_name: HashMap<String, u32>,
    pub(crate) next_mount: u32,
    align: u64,
    used: u64,
    capacity: u64,
    scratch: Vec<u32>,
}

impl Space {
    pub(crate) fn new(align: u64) -> Self {
        Space {
            mounts: BTreeMap::new(),
            nodes: Vec::new(),
            by_name: HashMap::new(),
            next_mount: 1,
            align,
            used: 0,
            capacity: 0,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn get(&self, id: MountId) -> Option<&Mount> {
        self.mounts.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: MountId) -> Option<&mut Mount> {
        self.mounts.get_mut(&id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (MountId, &Mount)> {
        self.mounts.iter().map(|(&id, m)| (id, m))
    }

    pub(crate) fn node_name(&self, node: u32) -> &str {
        &self.nodes[node as usize].name
    }

    /// Whether `spec` overlaps a range already mounted on its node.
    pub(crate) fn overlaps(&self, spec: &MountSpec) -> bool {
        let Some(&n) = self.by_name.get(&spec.node) else {
            return false;
        };
        self.nodes[n as usize].mounts.iter().any(|id| {
            let m = &self.mounts[id];
            spec.base < m.base.saturating_add(m.len) && m.base < spec.base.saturating_add(spec.len)
        })
    }

    /// Why a range (from the log, a snapshot or a live mount) cannot be added under `id`: the id
    /// is taken, the range is what `mount` refuses (no node, empty, past `u64::MAX`), it
    /// overlaps its node's others, or the total capacity would pass `u64::MAX`. Ranges mounted
    /// live passed `Master::mount`'s checks already; a damaged or foreign file may hold any.
    pub(crate) fn check_add(&self, id: MountId, spec: &MountSpec) -> Result<(), String> {
        let fits = !spec.node.is_empty()
            && spec.len > 0
            && spec.base.checked_add(spec.len).is_some()
            && self.capacity.checked_add(spec.len).is_some();
        if !fits {
            return Err(format!(
                "mount {}: range {:?} {:#x}+{} is not one a node can mount",
                id.0, spec.node, spec.base, spec.len
            ));
        }
        if self.mounts.contains_key(&id) || self.overlaps(spec) {
            return Err(format!("mount {} collides", id.0));
        }
        Ok(())
    }

    /// Adds a range under a given id (ids come from the log so that replay rebuilds the same).
    pub(crate) fn add(&mut self, id: MountId, client: ClientId, spec: &MountSpec, ready: bool) {
        let node = match self.by_name.get(&spec.node) {
            Some(&n) => n,
            None => {
                let n = self.nodes.len() as u32;
                self.nodes.push(Node {
                    name: spec.node.clone(),
                    mounts: Vec::new(),
                });
                self.by_name.insert(spec.node.clone(), n);
                n
            }
        };
        self.nodes[node as usize].mounts.push(id);
        let alloc = RangeAllocator::new(spec.len, self.align);
        self.capacity += alloc.capacity();
        self.mounts.insert(
            id,
            Mount {
                client,
                node,
                base: spec.base,
                len: spec.len,
                alloc,
                draining_until: None,
                ready,
                hold_until: None,
            },
        );
        self.next_mount = self.next_mount.max(id.0.saturating_add(1));
    }

    /// Lets ranges held since a remount (see `Mount::hold_until`) take replicas from `now`.
    pub(crate) fn end_holds(&mut self, now: u64) {
        for m in self.mounts.values_mut() {
            if m.hold_until.is_some_and(|t| t <= now) {
                m.hold_until = None;
            }
        }
    }

    pub(crate) fn remove(&mut self, id: MountId) -> Option<Mount> {
        let m = self.mounts.remove(&id)?;
        self.nodes[m.node as usize].mounts.retain(|&x| x != id);
        self.capacity -= m.alloc.capacity();
        self.used -= m.alloc.used();
        Some(m)
    }

    /// The mounts a client owns.
    pub(crate) fn of_client(&self, client: ClientId) -> Vec<MountId> {
        self.mounts
            .iter()
            .filter(|(_, m)| m.client == client)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Places up to `n` replicas of `size` bytes on distinct nodes: `preferred` nodes first (in
    /// order), then by `strategy`. Returns fewer (possibly none) when fewer nodes have room.
    pub(crate) fn place(
        &mut self,
        size: u64,
        n: usize,
        preferred: &[String],
        strategy: PlacementStrategy,
        rng: &mut fastrand::Rng,
    ) -> Replicas {
        let mut chosen: SmallVec<[u32; 4]> = SmallVec::new();
        for name in preferred {
            if chosen.len() == n {
                break;
            }
            if let Some(&node) = self.by_name.get(name) {
                if !chosen.contains(&node) && self.node_fits(node, size) {
                    chosen.push(node);
                }
            }
        }
        if chosen.len() < n {
            // Reused between calls: placing must not allocate on the hot path.
            let mut rest = std::mem::take(&mut self.scratch);
            rest.clear();
            rest.extend(
                (0..self.nodes.len() as u32)
                    .filter(|x| !chosen.contains(x) && self.node_fits(*x, size)),
            );
            let want = (n - chosen.len()).min(rest.len());
            match strategy {
                PlacementStrategy::Random => {
                    // A partial Fisher–Yates: only the first picks need shuffling.
                    for i in 0..want {
                        let j = rng.usize(i..rest.len());
                        rest.swap(i, j);
                    }
                }
                PlacementStrategy::FreeRatioFirst => {
                    let ratio = |x: u32| {
                        let (cap, used) = self.node_usage(x);
                        (cap - used) as f64 / cap.max(1) as f64
                    };
                    rest.sort_by(|a, b| ratio(*b).total_cmp(&ratio(*a)).then(a.cmp(b)));
                }
            }
            chosen.extend(rest[..want].iter().copied());
            self.scratch = rest;
        }
        chosen
            .into_iter()
            .filter_map(|node| self.allocate_on(node, size))
            .collect()
    }

    /// Places one replica of `size` bytes on the node named `name` (its allocatable ranges in
    /// mount order), or `None` when it has no room or no such node is mounted.
    pub(crate) fn place_on(&mut self, name: &str, size: u64) -> Option<Replica> {
        let node = *self.by_name.get(name)?;
        self.allocate_on(node, size)
    }

    /// Whether the node named `name` has a range that takes new replicas (mounted, its node
    /// remounted, not being unmounted).
    pub(crate) fn node_allocatable(&self, name: &str) -> bool {
        self.by_name.get(name).is_some_and(|&n| {
            self.nodes[n as usize]
                .mounts
                .iter()
                .any(|id| self.mounts[id].allocatable())
        })
    }

    /// The name of the node a range belongs to.
    pub(crate) fn node_of(&self, id: MountId) -> Option<&str> {
        self.mounts.get(&id).map(|m| self.node_name(m.node))
    }

    fn node_fits(&self, node: u32, size: u64) -> bool {
        self.nodes[node as usize].mounts.iter().any(|id| {
            let m = &self.mounts[id];
            m.allocatable() && m.alloc.fits(size)
        })
    }

    fn node_usage(&self, node: u32) -> (u64, u64) {
        self.nodes[node as usize]
            .mounts
            .iter()
            .map(|id| &self.mounts[id])
            .filter(|m| m.allocatable())
            .fold((0, 0), |(c, u), m| {
                (c + m.alloc.capacity(), u + m.alloc.used())
            })
    }

    fn allocate_on(&mut self, node: u32, size: u64) -> Option<Replica> {
        let footprint = self.align_up(size);
        let ids = &self.nodes[node as usize].mounts;
        for &id in ids {
            let m = self.mounts.get_mut(&id)?;
            if m.allocatable() {
                if let Some(offset) = m.alloc.allocate(size) {
                    self.used += footprint;
                    return Some(Replica { mount: id, offset });
                }
            }
        }
        None
    }

    /// Frees a replica's range (nothing if its mount is gone).
    pub(crate) fn free(&mut self, r: Replica, size: u64) {
        if let Some(m) = self.mounts.get_mut(&r.mount) {
            m.alloc.free(r.offset, size);
            self.used -= self.align_up(size);
        }
    }

    /// Takes a replica's exact range again (replay); false when it is not free.
    pub(crate) fn reserve(&mut self, r: Replica, size: u64) -> bool {
        let ok = self
            .mounts
            .get_mut(&r.mount)
            .is_some_and(|m| m.alloc.reserve(r.offset, size));
        if ok {
            self.used += self.align_up(size);
        }
        ok
    }

    /// Bytes a replica of `size` takes (aligned), or `None` when that does not fit in a `u64`
    /// (a size from the wire near `u64::MAX`).
    pub(crate) fn checked_align_up(&self, size: u64) -> Option<u64> {
        size.div_ceil(self.align).checked_mul(self.align)
    }

    /// Bytes a replica of `size` takes (aligned); saturates where
    /// [`Space::checked_align_up`] has no answer (no stored object has such a size: writes
    /// are refused by it first).
    pub(crate) fn align_up(&self, size: u64) -> u64 {
        self.checked_align_up(size).unwrap_or(u64::MAX)
    }

    /// Bytes handed out over all ranges.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Bytes of all ranges.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether a replica can be read now (its range is mounted and its node has remounted).
    pub(crate) fn readable(&self, r: &Replica) -> bool {
        self.mounts.get(&r.mount).is_some_and(|m| m.ready)
    }

    pub(crate) fn describe(&self, r: &Replica, size: u64) -> Option<ReplicaDesc> {
        let m = self.mounts.get(&r.mount)?;
        Some(ReplicaDesc {
            node: self.nodes[m.node as usize].name.clone(),
            addr: m.base + r.offset,
            len: size,
        })
    }

    /// Capacity, used bytes, and the summed report of all ranges.
    pub(crate) fn totals(&self) -> SpaceReport {
        self.mounts.values().fold(SpaceReport::default(), |a, m| {
            let r = m.alloc.report();
            SpaceReport {
                capacity: a.capacity + r.capacity,
                used: a.used + r.used,
                largest_free: a.largest_free + r.largest_free,
                free_extents: a.free_extents + r.free_extents,
            }
        })
    }

    /// Nodes with at least one mounted range.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.iter().filter(|n| !n.mounts.is_empty()).count()
    }

    /// Nodes that can take new replicas now (a mounted, ready, not draining range).
    pub(crate) fn allocatable_node_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.mounts.iter().any(|id| self.mounts[id].allocatable()))
            .count()
    }

    pub(crate) fn mount_count(&self) -> usize {
        self.mounts.len()
    }
}
