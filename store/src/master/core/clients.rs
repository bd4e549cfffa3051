//! Clients and their store space: mount, remount, unmount, ping, and expiry.

use super::{ClientState, Master, RemovedRange};
use crate::error::{Error, Result};
use crate::master::log::{Effect, Record};
use crate::master::space::{Mount, Replica};
use crate::master::types::{ClientId, Millis, MountId, MountSpec, PingResult};

impl Master {
    /// Mounts ranges of a node's engine memory as store space owned by `client`, which counts
    /// as live from now on. All or nothing: any bad range refuses the whole call.
    ///
    /// Idempotent, as Mooncake's `MountSegment` (which answers OK for a segment already
    /// mounted): a range this client has mounted already (same node, base and length, not
    /// being unmounted, and in use: not one restored from the log that waits for its
    /// `remount`) is answered with its mount id, and nothing about it changes or is logged.
    ///
    /// Errors: `InvalidParams` (empty node name, length 0, overflowing range),
    /// `SegmentAlreadyExists` (overlap with another mounted range of the same node, whoever's,
    /// one being unmounted included, or with another new range of this call), `IllegalClient`
    /// (a client that left, see [`Master::leave`]).
    pub fn mount(
        &mut self,
        client: ClientId,
        now: Millis,
        specs: &[MountSpec],
    ) -> Result<Vec<MountId>> {
        let now = self.tick(now);
        self.check_not_left(client, now)?;
        let mounted: Vec<Option<MountId>> = specs
            .iter()
            .map(|s| {
                self.own_mount(client, s).filter(|&id| {
                    self.space
                        .get(id)
                        .is_some_and(|m| m.ready && m.draining_until.is_none())
                })
            })
            .collect();
        let fresh: Vec<MountSpec> = specs
            .iter()
            .zip(&mounted)
            .filter(|(_, id)| id.is_none())
            .map(|(s, _)| s.clone())
            .collect();
        self.check_specs(&fresh)?;
        self.check_not_being_read(now, &fresh)?;
        let ids = specs
            .iter()
            .zip(mounted)
            .map(|(s, id)| id.unwrap_or_else(|| self.add_mount(client, now, s)))
            .collect();
        self.note_seen(client, now);
        let c = self.clients.entry(client).or_insert(ClientState {
            last_ping: now,
            need_remount: false,
        });
        c.last_ping = now;
        Ok(ids)
    }

    /// Mounts the client's store space again after `NeedRemount`: ranges the master still
    /// knows for this client (same node, base and length: restored from disk) become readable
    /// again, new ones are added, and its ranges not listed are removed with their replicas.
    /// A new range remounted within a lease TTL of this master's start, restart or promotion,
    /// by a client that has not mounted with this master before, takes no new replicas until that TTL ends: the node
    /// mounted it at an earlier master, whose read leases on it this one cannot know (see
    /// [`Master::start_stateless`]).
    /// Errors as [`Master::mount`].
    pub fn remount(
        &mut self,
        client: ClientId,
        now: Millis,
        specs: &[MountSpec],
    ) -> Result<Vec<MountId>> {
        let now = self.tick(now);
        self.check_not_left(client, now)?;
        let known = self.space.of_client(client);
        let fresh: Vec<MountSpec> = specs
            .iter()
            .filter(|s| self.own_mount(client, s).is_none())
            .cloned()
            .collect();
        self.check_specs(&fresh)?;
        // (A new range over one of its own still mounted was refused just above.)
        self.check_not_being_read(now, &fresh)?;
        let kept: Vec<Option<MountId>> = specs.iter().map(|s| self.own_mount(client, s)).collect();
        // A client that mounted with this master adds new memory; one it never saw may bring
        // back a range of its previous life.
        let hold = now < self.remount_hold_until && !self.seen.contains(&client);
        self.note_seen(client, now);
        for id in known.iter().filter(|id| !kept.contains(&Some(**id))) {
            self.remove_mount(now, *id);
        }
        let mut ids = Vec::with_capacity(specs.len());
        for (spec, kept) in specs.iter().zip(kept) {
            ids.push(match kept {
                Some(id) => {
                    if let Some(m) = self.space.get_mut(id) {
                        m.ready = true;
                    }
                    id
                }
                None => {
                    let id = self.add_mount(client, now, spec);
                    if hold {
                        if let Some(m) = self.space.get_mut(id) {
                            m.hold_until = Some(self.remount_hold_until);
                        }
                    }
                    id
                }
            });
        }
        self.clients.insert(
            client,
            ClientState {
                last_ping: now,
                need_remount: false,
            },
        );
        Ok(ids)
    }

    /// Gracefully unmounts a range: no new replicas go there; its replicas stay readable for
    /// the unmount grace period, then the range and they are removed. Repeating it is `Ok`.
    ///
    /// Errors: `SegmentNotFound`, `IllegalClient` (another client's range).
    pub fn unmount(&mut self, client: ClientId, now: Millis, mount: MountId) -> Result<()> {
        self.unmount_within(client, now, mount, self.cfg.unmount_grace_ms)
    }

    /// As [`Master::unmount`] with a grace period of `grace_ms` (at most the configured one:
    /// a client may shorten how long its leaving range stays readable, not hold it longer).
    /// With 0 the range and its replicas go at the next timer run.
    pub fn unmount_within(
        &mut self,
        client: ClientId,
        now: Millis,
        mount: MountId,
        grace_ms: u64,
    ) -> Result<()> {
        let now = self.tick(now);
        let m = self
            .space
            .get(mount)
            .ok_or(Error::SegmentNotFound { mount: mount.0 })?;
        if m.client != client {
            return Err(Error::IllegalClient {
                key: format!("mount {}", mount.0),
            });
        }
        if m.draining_until.is_none() {
            let until = now.saturating_add(grace_ms.min(self.cfg.unmount_grace_ms));
            self.commit(now, Record::UnmountBegin { mount, until });
        }
        Ok(())
    }

    /// A client's heartbeat: `Ok` for a live client (`TasksWaiting` when it has copy or move
    /// tasks to take), `NeedRemount` for one the master does not know (or knows only from
    /// restored store space).
    pub fn ping(&mut self, client: ClientId, now: Millis) -> PingResult {
        let now = self.tick(now);
        match self.clients.get_mut(&client) {
            Some(c) if !c.need_remount => {
                c.last_ping = now;
                match self.has_tasks(client) {
                    true => PingResult::TasksWaiting,
                    false => PingResult::Ok,
                }
            }
            _ => PingResult::NeedRemount,
        }
    }

    /// Expires clients that missed their pings for the TTL: their store space is removed
    /// (objects left with no replica go with it) and their writes in progress are revoked, their
    /// space held until their release time, as a leaving client's: a client cut off from the
    /// master but not from its peers may still be writing there.
    pub(crate) fn expire_clients(&mut self, now: Millis) {
        let ttl = self.cfg.client_ttl_ms;
        let mut dead: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.last_ping.saturating_add(ttl) <= now)
            .map(|(&id, _)| id)
            .collect();
        dead.sort();
        for client in dead {
            let (mounts, writes) = self.forget_client(now, client, true);
            tracing::info!(%client, mounts, writes, "client expired");
            self.effects.push_back(Effect::ClientExpired {
                client,
                mounts,
                writes,
            });
        }
    }

    /// A client says it is gone for good (it dropped its store space without a graceful
    /// unmount): what its expiry would do, at once, so that no new replica is placed in space
    /// that no longer exists. Its store space is removed (objects left with no replica go with
    /// it) and its writes in progress are revoked, their space held until their release time
    /// (transfers the process had started may still land). For a client TTL from now, a mount
    /// or remount from it is refused (`IllegalClient`): one its heartbeat had under way must
    /// not mount the freed space again. Repeating it, or calling it as a client the master
    /// does not know, is `Ok`.
    pub fn leave(&mut self, client: ClientId, now: Millis) {
        let now = self.tick(now);
        self.left.retain(|_, until| *until > now);
        self.left
            .insert(client, now.saturating_add(self.cfg.client_ttl_ms));
        let (mounts, writes) = self.forget_client(now, client, true);
        tracing::info!(%client, mounts, writes, "client left");
    }

    /// Within the remount hold window, remembers that `client` mounted with this master
    /// (forgotten once the window is over, when nothing asks any more).
    fn note_seen(&mut self, client: ClientId, now: Millis) {
        if now < self.remount_hold_until {
            self.seen.insert(client);
        } else if !self.seen.is_empty() {
            self.seen = Default::default();
        }
    }

    pub(crate) fn check_not_left(&self, client: ClientId, now: Millis) -> Result<()> {
        match self.left.get(&client) {
            Some(&until) if until > now => Err(Error::IllegalClient {
                key: format!("client {client} left the cluster"),
            }),
            _ => Ok(()),
        }
    }

    /// Forgets `client`: removes its ranges, revokes its writes in progress, their space held
    /// until their release time (`hold`) or freed, and fails its tasks. Returns how many ranges
    /// and writes there were.
    fn forget_client(&mut self, now: Millis, client: ClientId, hold: bool) -> (usize, usize) {
        self.clients.remove(&client);
        let mounts = self.space.of_client(client);
        for &mount in &mounts {
            self.remove_mount(now, mount);
        }
        let mut writes: Vec<Box<str>> = self
            .writes
            .iter()
            .filter(|(_, w)| w.client == client)
            .map(|(k, _)| k.clone())
            .collect();
        writes.sort();
        let n = writes.len();
        for key in writes {
            self.commit(now, Record::WriteRevoke { key, hold });
        }
        self.end_grants_of(now, client);
        self.fail_tasks_of(now, client);
        (mounts.len(), n)
    }

    /// The range `client` has mounted at exactly `spec` (node, base and length), if any.
    fn own_mount(&self, client: ClientId, spec: &MountSpec) -> Option<MountId> {
        let same = |m: &Mount| {
            m.client == client
                && (m.base, m.len) == (spec.base, spec.len)
                && self.space.node_name(m.node) == spec.node
        };
        self.space.iter().find(|(_, m)| same(m)).map(|(id, _)| id)
    }

    fn check_specs(&self, specs: &[MountSpec]) -> Result<()> {
        for (i, s) in specs.iter().enumerate() {
            crate::args::node(&s.node, "node name")?;
            if s.len == 0 || s.base.checked_add(s.len).is_none() {
                return Err(Error::params(format!(
                    "range {:#x}+{} is empty or overflows",
                    s.base, s.len
                )));
            }
            let clash = specs[..i]
                .iter()
                .any(|o| o.node == s.node && s.base < o.base + o.len && o.base < s.base + s.len);
            if clash || self.space.overlaps(s) {
                return Err(Error::SegmentAlreadyExists {
                    node: s.node.clone(),
                    base: s.base,
                    len: s.len,
                });
            }
        }
        Ok(())
    }

    /// Removes a range with its replicas (`MountRemoved`), remembering until when readers may
    /// still read it under leases granted before (see [`Master::removed_range`]).
    pub(crate) fn remove_mount(&mut self, now: Millis, mount: MountId) {
        if let Some(r) = self.removed_range(now, mount).filter(|r| r.until > now) {
            self.removed.push(r);
        }
        self.commit(now, Record::MountRemoved { mount });
    }

    /// Range `mount` as removed at `now`: readable under earlier leases, and written by puts
    /// under way, until the last of these ends (at least until the no-reuse window's end): the
    /// newest lease on an object with a replica there, the hold on space there freed while
    /// leased, the release time of a write, a copy task's target or a grant there.
    fn removed_range(&self, now: Millis, mount: MountId) -> Option<RemovedRange> {
        let m = self.space.get(mount)?;
        let there = |r: &Replica| r.mount == mount;
        let leased = self
            .objects
            .iter()
            .filter(|(_, o)| o.replicas.iter().any(there))
            .map(|(_, o)| o.lease_until);
        let held = self
            .held
            .iter()
            .filter(|h| there(&h.replica))
            .map(|h| h.until);
        let release = self.cfg.put_release_ms;
        let written = self
            .writes
            .iter()
            .filter(|(_, w)| w.replicas.iter().any(there))
            .map(|(_, w)| w.started.saturating_add(release));
        let copied = self
            .tasks
            .iter()
            .filter_map(|(_, t)| t.work.as_ref())
            .filter(|w| w.targets.iter().any(there))
            .map(|w| w.started.saturating_add(release));
        let granted = self
            .grants
            .values()
            .filter(|g| g.mount == mount)
            .map(|_| now.saturating_add(release));
        let newest = leased
            .chain(held)
            .chain(written)
            .chain(copied)
            .chain(granted)
            .max()
            .unwrap_or(0);
        Some(RemovedRange {
            node: self.space.node_name(m.node).to_string(),
            base: m.base,
            len: m.len,
            until: self.reuse_after(newest),
        })
    }

    /// `ObjectHasLease` (retryable) if a range of `specs` overlaps one removed while readers
    /// may still read it: new objects placed there could be read under those old leases. The
    /// node's next remount after the leases end succeeds.
    fn check_not_being_read(&mut self, now: Millis, specs: &[MountSpec]) -> Result<()> {
        self.removed.retain(|r| r.until > now);
        for s in specs {
            let end = s.base.saturating_add(s.len);
            let hit = self.removed.iter().find(|r| {
                r.node == s.node && s.base < r.base.saturating_add(r.len) && r.base < end
            });
            if let Some(r) = hit {
                return Err(Error::ObjectHasLease {
                    key: format!(
                        "store space {}@{:#x}+{} (removed; readers may read it until {})",
                        s.node, s.base, s.len, r.until
                    ),
                });
            }
        }
        Ok(())
    }

    fn add_mount(&mut self, client: ClientId, now: Millis, spec: &MountSpec) -> MountId {
        let mount = MountId(self.space.next_mount);
        self.commit(
            now,
            Record::Mount {
                client,
                mount,
                node: spec.node.clone(),
                base: spec.base,
                len: spec.len,
            },
        );
        mount
    }
}
