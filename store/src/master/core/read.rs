//! Reads and removals: replica lists with leases, existence, sizes, remove, list and stats.

use super::Master;
use crate::error::{Error, Result};
use crate::master::log::Record;
use crate::master::pattern::KeyPattern;
use crate::master::types::{
    ListedObject, Millis, MountId, ReplicaDesc, ReplicaList, SegmentInfo, Stats,
};

impl Master {
    /// The readable replicas of `key`, granting (or extending) a read lease of the configured
    /// TTL, which also refreshes the object's access time and soft pin.
    ///
    /// Errors: `ObjectNotFound`; `ReplicaNotReady` (its put has not ended, an in-place upsert
    /// runs, or none of its nodes has remounted since a master restart).
    pub fn get_replica_list(&mut self, now: Millis, key: &str) -> Result<ReplicaList> {
        let now = self.tick(now);
        self.check_key(key)?;
        let lease_ttl = self.cfg.lease_ttl_ms;
        let Some(o) = self.objects.get_mut(key) else {
            return Err(if self.writes.contains_key(key) {
                Error::ReplicaNotReady { key: key.into() }
            } else {
                Error::ObjectNotFound { key: key.into() }
            });
        };
        if o.writing && self.writes.get(key).is_some_and(|w| w.in_place) {
            return Err(Error::ReplicaNotReady { key: key.into() });
        }
        let replicas: Vec<_> = o
            .replicas
            .iter()
            .filter(|r| self.space.readable(r))
            .filter_map(|r| self.space.describe(r, o.size))
            .collect();
        if replicas.is_empty() {
            return Err(Error::ReplicaNotReady { key: key.into() });
        }
        let until = o.lease_until.max(now.saturating_add(lease_ttl));
        self.leases.moved(o.lease_until, until);
        o.lease_until = until;
        self.tally.reads += 1;
        Ok(ReplicaList {
            size: o.size,
            replicas,
            lease_ms: lease_ttl,
        })
    }

    /// `get_replica_list` for each key, in order, one result each.
    pub fn batch_get_replica_list(
        &mut self,
        now: Millis,
        keys: &[String],
    ) -> Vec<Result<ReplicaList>> {
        keys.iter().map(|k| self.get_replica_list(now, k)).collect()
    }

    /// Whether a completed object has this key. Grants no lease and does not refresh the
    /// access time (see the module's rule against starved eviction).
    /// Answered from the master's [`Presence`](crate::master::presence::Presence), which the
    /// server reads without the core's lock.
    pub fn exist(&self, key: &str) -> Result<bool> {
        self.presence().exist(key)
    }

    /// `exist` for each key, in order.
    pub fn batch_exist(&self, keys: &[String]) -> Vec<Result<bool>> {
        self.presence().batch_exist(keys)
    }

    /// The size of a completed object (no lease).
    pub fn get_size(&self, key: &str) -> Result<u64> {
        self.check_key(key)?;
        match self.objects.get(key) {
            Some(o) => Ok(o.size),
            None if self.writes.contains_key(key) => {
                Err(Error::ReplicaNotReady { key: key.into() })
            }
            None => Err(Error::ObjectNotFound { key: key.into() }),
        }
    }

    /// Every mounted range, in mount order (an operator's view).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.space
            .iter()
            .map(|(mount, m)| {
                let report = m.alloc.report();
                SegmentInfo {
                    node: self.space.node_name(m.node).to_string(),
                    mount,
                    client: m.client,
                    base: m.base,
                    capacity: report.capacity,
                    used: report.used,
                    ready: m.ready,
                    draining: m.draining_until.is_some(),
                }
            })
            .collect()
    }

    /// Where a completed object's replicas are, described (an operator's view: no lease is
    /// granted). Errors: `ObjectNotFound`, `InvalidParams` (a bad key).
    pub fn describe_replicas(&self, key: &str) -> Result<Vec<ReplicaDesc>> {
        self.check_key(key)?;
        let o = self
            .objects
            .get(key)
            .ok_or_else(|| Error::ObjectNotFound { key: key.into() })?;
        Ok(self.describe_all(&o.replicas, o.size))
    }

    /// Where a completed object's replicas are (an operator's view: no lease is granted).
    pub fn placement(&self, key: &str) -> Option<Vec<crate::master::Replica>> {
        self.objects.get(key).map(|o| o.replicas.to_vec())
    }

    /// Removes `key`. Without `force`, a read lease (`ObjectHasLease`), a write in progress
    /// (`WriteInProgress`) or a running copy or move task (`ObjectHasReplicationTask`) refuses
    /// it. With `force`, leased replicas stay out of use until the
    /// lease ends and a running write's space until its release time, so no reader or writer
    /// still in flight touches reused memory.
    pub fn remove(&mut self, now: Millis, key: &str, force: bool) -> Result<()> {
        let now = self.tick(now);
        self.check_key(key)?;
        match self.objects.get(key) {
            Some(o) => {
                if !force && o.leased(now) {
                    return Err(Error::ObjectHasLease { key: key.into() });
                }
                if !force && o.writing {
                    return Err(Error::WriteInProgress { key: key.into() });
                }
                if !force && self.tasks.running(key) {
                    return Err(Error::ObjectHasReplicationTask { key: key.into() });
                }
                let hold_until = self.reuse_after(o.lease_until);
                self.commit(
                    now,
                    Record::Remove {
                        key: key.into(),
                        evicted: false,
                        hold_until,
                    },
                );
                Ok(())
            }
            None if self.writes.contains_key(key) => {
                if !force {
                    return Err(Error::WriteInProgress { key: key.into() });
                }
                self.revoke_held(now, key);
                Ok(())
            }
            None => Err(Error::ObjectNotFound { key: key.into() }),
        }
    }

    /// Mooncake's `BatchReplicaClear`: for each key, drops its replicas on `node` (all of them
    /// when `node` is empty) if nothing uses the object: no read lease, no write in progress,
    /// and no access (its put or a read) for a lease TTL, as if its put had granted a lease as
    /// Mooncake's does. An object left with no replica is removed. Returns the keys cleared, in
    /// order; keys that are bad, missing, in use or with no replica on `node` are skipped.
    pub fn batch_replica_clear(&mut self, now: Millis, keys: &[String], node: &str) -> Vec<String> {
        let now = self.tick(now);
        let ttl = self.cfg.lease_ttl_ms;
        let mut cleared = Vec::new();
        for key in keys {
            if self.check_key(key).is_err() {
                continue;
            }
            let Some(o) = self.objects.get(key.as_str()) else {
                continue;
            };
            if o.leased(now)
                || o.writing
                || self.tasks.running(key)
                || o.accessed(ttl).saturating_add(ttl) > now
            {
                continue;
            }
            let mut on: Vec<MountId> = o
                .replicas
                .iter()
                .map(|r| r.mount)
                .filter(|&m| {
                    node.is_empty()
                        || self
                            .space
                            .get(m)
                            .is_some_and(|s| self.space.node_name(s.node) == node)
                })
                .collect();
            on.sort_unstable();
            on.dedup();
            if on.is_empty() {
                continue;
            }
            let all = o.replicas.iter().all(|r| on.contains(&r.mount));
            let (key_box, hold_until) = (
                Box::<str>::from(key.as_str()),
                self.reuse_after(o.lease_until),
            );
            let record = match all {
                true => Record::Remove {
                    key: key_box,
                    evicted: false,
                    hold_until,
                },
                false => Record::ReplicasDrop {
                    key: key_box,
                    mounts: on,
                    hold_until,
                },
            };
            self.commit(now, record);
            cleared.push(key.clone());
        }
        cleared
    }

    /// Removes every completed object (without `force`: those with no lease, no write in
    /// progress and no running task). Returns how many were removed. Writes of new keys are left alone.
    pub fn remove_all(&mut self, now: Millis, force: bool) -> u64 {
        self.remove_where(now, force, |_| true)
    }

    /// `remove` for each key, in order: one outcome per key.
    pub fn batch_remove(&mut self, now: Millis, keys: &[String], force: bool) -> Vec<Result<()>> {
        keys.iter().map(|k| self.remove(now, k, force)).collect()
    }

    /// Removes every completed object with a key in which `pattern` (a regular expression, see
    /// [`KeyPattern`]) matches somewhere (anchor it with `^…$` for whole keys), as
    /// [`Master::remove_all`] does (`force`: leased and written-over ones too); returns how
    /// many. A bad pattern is `InvalidParams`.
    pub fn remove_by_regex(&mut self, now: Millis, pattern: &str, force: bool) -> Result<u64> {
        let pattern = KeyPattern::new(pattern)?;
        Ok(self.remove_where(now, force, |key| pattern.matches(key)))
    }

    /// Removes the completed objects whose key passes `wanted`, skipping those with a lease, a
    /// write in progress or a running task unless `force`, in key order; returns how many.
    fn remove_where(&mut self, now: Millis, force: bool, wanted: impl Fn(&str) -> bool) -> u64 {
        let now = self.tick(now);
        let mut keys: Vec<(Box<str>, Millis)> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                wanted(k) && (force || (!o.leased(now) && !o.writing && !self.tasks.running(k)))
            })
            .map(|(k, o)| (k.clone(), self.reuse_after(o.lease_until)))
            .collect();
        keys.sort();
        let n = keys.len() as u64;
        for (key, hold_until) in keys {
            self.commit(
                now,
                Record::Remove {
                    key,
                    evicted: false,
                    hold_until,
                },
            );
        }
        n
    }

    /// Completed objects whose key starts with `prefix`, sorted, at most `limit`. An admin call:
    /// it scans every key.
    pub fn list(&self, prefix: &str, limit: usize) -> Vec<ListedObject> {
        let mut out: Vec<ListedObject> = self
            .objects
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, o)| ListedObject {
                key: k.to_string(),
                size: o.size,
                replicas: o.replicas.len() as u32,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.truncate(limit);
        out
    }

    /// Objects under a read lease at `now`, from the lease book (no walk over the objects:
    /// a scrape holds the core's lock only for the ends that passed since the last one).
    /// `now` goes through the core's clock, which never goes back, so that a scrape never
    /// forgets ends later than a grant made after it.
    pub fn leases_held(&mut self, now: Millis) -> u64 {
        let now = self.tick(now);
        self.leases.held(now)
    }

    /// Counts for operators.
    pub fn stats(&self) -> Stats {
        let t = self.space.totals();
        Stats {
            objects: self.objects.len() as u64,
            pending_writes: self.writes.len() as u64,
            bytes_used: self.space.used(),
            bytes_capacity: self.space.capacity(),
            nodes: self.space.node_count() as u64,
            mounts: self.space.mount_count() as u64,
            clients: self.clients.values().filter(|c| !c.need_remount).count() as u64,
            evicted: self.evicted_total,
            fragmentation: t.fragmentation(),
            last_seq: self.seq,
        }
    }
}
