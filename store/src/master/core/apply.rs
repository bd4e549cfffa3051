//! Applying a durable record to the state: the one place where durable state changes, shared by
//! live operation and replay.

use super::Master;
use crate::master::grant::{Grant, GrantId};
use crate::master::log::{Effect, Record};
use crate::master::object::{Held, Object, PendingWrite, Pin, Replicas};
use crate::master::space::Replica;
use crate::master::task::{Task, TaskId, TaskKind, TaskState, Work};
use crate::master::types::{ClientId, Millis, MountSpec};

/// Live records were decided by the handler, whose allocations already happened; replayed ones
/// must take their ranges again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Live,
    Replay,
}

impl Master {
    /// Applies `record` made at `now`. Fails only on a record that does not fit the state (a
    /// damaged or foreign log); the state is then unchanged.
    pub(crate) fn apply(&mut self, now: Millis, record: Record, mode: Mode) -> Result<(), String> {
        self.apply_hinted(now, record, mode, None)
    }

    /// [`Master::apply`] with the hash of the record's key, if known (it saves hashing again).
    pub(crate) fn apply_hinted(
        &mut self,
        now: Millis,
        record: Record,
        mode: Mode,
        hash: Option<u64>,
    ) -> Result<(), String> {
        match record {
            Record::Mount {
                client,
                mount,
                node,
                base,
                len,
            } => {
                let spec = MountSpec { node, base, len };
                self.space.check_add(mount, &spec)?;
                self.space.add(mount, client, &spec, true);
            }
            Record::UnmountBegin { mount, until } => {
                let m = self
                    .space
                    .get_mut(mount)
                    .ok_or_else(|| format!("unmount of unknown mount {}", mount.0))?;
                m.draining_until = Some(until);
            }
            Record::MountRemoved { mount } => self.apply_mount_removed(mount, now, mode)?,
            Record::WriteStart {
                client,
                key,
                size,
                replicas,
                in_place,
                replaces,
                pin,
            } => {
                let h = hash.unwrap_or_else(|| self.objects.hash(&key));
                let w = PendingWrite {
                    client,
                    started: now,
                    size,
                    replicas,
                    in_place,
                    replaces,
                    pin,
                };
                self.apply_write_start(h, key, w, mode)?;
            }
            Record::WriteEnd { key, old_until } => {
                let h = hash.unwrap_or_else(|| self.objects.hash(&key));
                self.apply_write_end(h, &key, old_until, now)?;
            }
            Record::WriteRevoke { key, hold } => {
                let w = self
                    .writes
                    .remove(&key)
                    .ok_or_else(|| format!("revoke of unknown write {key:?}"))?;
                self.drop_write(&key, w, hold, now);
            }
            Record::Remove {
                key,
                evicted,
                hold_until,
            } => {
                let o = self
                    .objects
                    .remove(&key)
                    .ok_or_else(|| format!("remove of unknown {key:?}"))?;
                self.leases.ended(o.lease_until);
                let mut until = hold_until;
                if o.writing {
                    if let Some(w) = self.writes.remove(&key) {
                        let release = w.started.saturating_add(self.cfg.put_release_ms);
                        if w.in_place {
                            until = until.max(release);
                        } else {
                            self.hold_or_free(&w.replicas, w.size, release, now);
                        }
                    }
                }
                self.hold_or_free(&o.replicas, o.size, until, now);
                if evicted {
                    self.evicted_total += 1;
                }
            }
            Record::ReplicasDrop {
                key,
                mounts,
                hold_until,
            } => {
                let o = self
                    .objects
                    .get_mut(&key)
                    .ok_or_else(|| format!("replica drop of unknown {key:?}"))?;
                let (gone, kept): (Replicas, Replicas) = o
                    .replicas
                    .iter()
                    .copied()
                    .partition(|r| mounts.contains(&r.mount));
                if gone.is_empty() || kept.is_empty() {
                    return Err(format!(
                        "replica drop of {key:?} on {mounts:?} drops {} of {} replicas",
                        gone.len(),
                        o.replicas.len()
                    ));
                }
                o.replicas = kept;
                let size = o.size;
                self.hold_or_free(&gone, size, hold_until, now);
            }
            Record::TaskCreate {
                id,
                key,
                kind,
                client,
            } => {
                let task = Task {
                    key,
                    kind,
                    client,
                    state: TaskState::Pending,
                    created: now,
                    updated: now,
                    message: String::new(),
                    work: None,
                };
                let due = self.pending_task_due(now);
                if !self.tasks.insert(id, task, due) {
                    return Err(format!("second task {id}"));
                }
            }
            Record::TaskStart {
                id,
                source,
                targets,
                until,
            } => self.apply_task_start(now, id, source, targets, until, mode)?,
            Record::TaskEnd {
                id,
                error,
                hold_until,
            } => self.apply_task_end(now, id, error, hold_until)?,
            Record::Release => {
                let (due, keep): (Vec<Held>, Vec<Held>) =
                    self.held.drain(..).partition(|h| h.until <= now);
                self.held = keep;
                for h in due {
                    self.space.free(h.replica, h.size);
                }
            }
            Record::GrantStart {
                client,
                grant,
                replica,
                len,
            } => {
                if self.grants.contains_key(&grant) {
                    return Err(format!("second {grant}"));
                }
                if mode == Mode::Replay && !self.space.reserve(replica, len) {
                    return Err(format!("{grant} overlaps used space"));
                }
                let g = Grant::new(client, replica.mount, replica.offset, len);
                self.grants.insert(grant, g);
                self.next_grant = self.next_grant.max(grant.0.saturating_add(1));
            }
            Record::WriteGranted {
                client,
                key,
                size,
                parts,
                replaces,
                pin,
            } => {
                let h = hash.unwrap_or_else(|| self.objects.hash(&key));
                self.apply_write_granted(h, key, (client, size, replaces, pin), parts, now)?;
            }
            Record::GrantEnd { grant, hold_until } => {
                let g = self
                    .grants
                    .remove(&grant)
                    .ok_or_else(|| format!("end of unknown {grant}"))?;
                for (replica, len) in g.extents() {
                    self.hold_or_free(&Replicas::from_elem(replica, 1), len, hold_until, now);
                }
            }
        }
        Ok(())
    }

    /// An object written into grants starts as a write: its replicas are taken out of their
    /// grants (all or none).
    fn apply_write_granted(
        &mut self,
        h: u64,
        key: Box<str>,
        (client, size, replaces, pin): (ClientId, u64, bool, Pin),
        parts: Vec<(GrantId, Replica)>,
        now: Millis,
    ) -> Result<(), String> {
        self.check_write_matches(h, &key, replaces, false)?;
        let footprint = self
            .space
            .checked_align_up(size)
            .ok_or_else(|| format!("write of {key:?}: size {size} overflows"))?;
        let align = self.cfg.alignment;
        let fits = parts.iter().enumerate().all(|(i, (id, r))| {
            let distinct = parts[..i].iter().all(|(o, _)| o != id);
            distinct
                && self.grants.get(id).is_some_and(|g| {
                    g.client == client
                        && g.mount == r.mount
                        && r.offset % align == 0
                        && g.holds(r.offset, footprint)
                })
        });
        if parts.is_empty() || !fits {
            return Err(format!("write of {key:?} is not in its client's grants"));
        }
        let mut replicas = Replicas::new();
        for (id, r) in parts {
            if let Some(g) = self.grants.get_mut(&id) {
                g.take(r.offset, footprint);
            }
            replicas.push(r);
        }
        let w = PendingWrite {
            client,
            started: now,
            size,
            replicas,
            in_place: false,
            replaces,
            pin,
        };
        self.insert_write(h, key, w);
        Ok(())
    }

    /// A write starts. Live records come from a handler that checked the key (`replaces` says
    /// whether a completed object exists), so only replay probes the objects to verify it.
    fn apply_write_start(
        &mut self,
        h: u64,
        key: Box<str>,
        w: PendingWrite,
        mode: Mode,
    ) -> Result<(), String> {
        if mode == Mode::Replay {
            self.check_write_matches(h, &key, w.replaces, w.in_place)?;
            for (i, r) in w.replicas.iter().enumerate() {
                if !self.space.reserve(*r, w.size) {
                    w.replicas[..i]
                        .iter()
                        .for_each(|r| self.space.free(*r, w.size));
                    return Err(format!("replica of {key:?} overlaps used space"));
                }
            }
        }
        self.insert_write(h, key, w);
        Ok(())
    }

    /// A replayed write must be the only one of its key and agree with its object (live ones
    /// come from handlers that checked).
    fn check_write_matches(
        &self,
        h: u64,
        key: &str,
        replaces: bool,
        in_place: bool,
    ) -> Result<(), String> {
        if self.writes.contains_key_h(h, key) {
            return Err(format!("second write of {key:?}"));
        }
        if self.objects.contains_key_h(h, key) != replaces || (in_place && !replaces) {
            return Err(format!("write of {key:?} does not match its object"));
        }
        Ok(())
    }

    /// Records a write in progress (marking the object it replaces).
    fn insert_write(&mut self, h: u64, key: Box<str>, w: PendingWrite) {
        if w.replaces {
            if let Some(o) = self.objects.get_mut_h(h, &key) {
                o.writing = true;
            }
        }
        self.writes.insert_h(h, key, w);
    }

    /// A write ends: a new object is inserted with one probe of the big table; a replacing
    /// write updates its object (an in-place one keeps the replicas, another holds the old ones
    /// until `old_until`).
    fn apply_write_end(
        &mut self,
        h: u64,
        key: &str,
        old_until: Millis,
        now: Millis,
    ) -> Result<(), String> {
        let (key, w) = self
            .writes
            .remove_entry_h(h, key)
            .ok_or_else(|| format!("end of unknown write {key:?}"))?;
        if !w.replaces {
            let PendingWrite {
                client,
                started,
                size,
                replicas,
                in_place,
                replaces,
                pin,
            } = w;
            let object = Object {
                size,
                replicas,
                stamped: now,
                lease_until: 0,
                pin,
                writing: false,
            };
            return self
                .objects
                .try_insert_h(h, key, object)
                .map_err(|(key, o)| {
                    // Put the write back: a failed record leaves the state unchanged.
                    let msg = format!("end of {key:?} over an existing object");
                    let w = PendingWrite {
                        client,
                        started,
                        size: o.size,
                        replicas: o.replicas,
                        in_place,
                        replaces,
                        pin: o.pin,
                    };
                    self.writes.insert_h(h, key, w);
                    msg
                });
        }
        let Some(o) = self.objects.get_mut_h(h, &key) else {
            let msg = format!("end of {key:?}: its object is gone");
            self.writes.insert_h(h, key, w);
            return Err(msg);
        };
        o.writing = false;
        o.stamped = now;
        o.pin = w.pin;
        if !w.in_place {
            let old = std::mem::replace(&mut o.replicas, w.replicas);
            let old_size = std::mem::replace(&mut o.size, w.size);
            self.leases.ended(std::mem::take(&mut o.lease_until));
            self.hold_or_free(&old, old_size, old_until, now);
        }
        Ok(())
    }

    /// Removes a revoked write's traces: its space held until its release time (`hold`) or
    /// freed; an in-place write leaves its object torn, so the object goes too.
    pub(crate) fn drop_write(&mut self, key: &str, w: PendingWrite, hold: bool, now: Millis) {
        let until = if hold {
            w.started.saturating_add(self.cfg.put_release_ms)
        } else {
            now
        };
        self.hold_or_free(&w.replicas, w.size, until, now);
        if w.in_place {
            if let Some(o) = self.objects.remove(key) {
                self.leases.ended(o.lease_until);
                self.hold_or_free(&o.replicas, o.size, until, now);
            }
        } else if let Some(o) = self.objects.get_mut(key) {
            o.writing = false;
        }
    }

    /// A task's client took it: its new replicas' space (taken again on replay) and its
    /// object's size and stamp become its work.
    fn apply_task_start(
        &mut self,
        now: Millis,
        id: TaskId,
        source: Replica,
        targets: Replicas,
        until: Millis,
        mode: Mode,
    ) -> Result<(), String> {
        let task = self
            .tasks
            .get(id)
            .ok_or_else(|| format!("start of unknown task {id}"))?;
        if task.state != TaskState::Pending {
            return Err(format!("start of task {id} in state {}", task.state.name()));
        }
        let o = self
            .objects
            .get(&task.key)
            .ok_or_else(|| format!("start of task {id}: its object is gone"))?;
        if !o.replicas.contains(&source) {
            return Err(format!("start of task {id}: no such source replica"));
        }
        let (size, stamped) = (o.size, o.stamped);
        if mode == Mode::Replay {
            for (i, r) in targets.iter().enumerate() {
                if !self.space.reserve(*r, size) {
                    targets[..i].iter().for_each(|r| self.space.free(*r, size));
                    return Err(format!("task {id}: a target overlaps used space"));
                }
            }
        }
        let work = Work {
            source,
            targets,
            size,
            stamped,
            started: now,
            until,
        };
        self.tasks.start(id, work, now)
    }

    /// A task ended: on success its new replicas join the object (a move's source leaves it,
    /// held until `hold_until`); on failure they are held until `hold_until` or freed.
    fn apply_task_end(
        &mut self,
        now: Millis,
        id: TaskId,
        error: Option<String>,
        hold_until: Millis,
    ) -> Result<(), String> {
        let task = self
            .tasks
            .get(id)
            .ok_or_else(|| format!("end of unknown task {id}"))?;
        let keep = self.cfg.max_finished_tasks;
        let Some(message) = error else {
            // Checked before anything changes: a record that does not fit leaves no trace.
            let (key, is_move) = (task.key.clone(), matches!(task.kind, TaskKind::Move { .. }));
            let Some(w) = task.work.as_ref() else {
                // Every target held a replica already: done without a copy.
                if task.state != TaskState::Pending || is_move {
                    return Err(format!("success of task {id} without a copy"));
                }
                self.tasks
                    .finish(id, TaskState::Success, String::new(), now, keep)?;
                return Ok(());
            };
            let fits = self
                .objects
                .get(&key)
                .is_some_and(|o| o.replicas.contains(&w.source) && o.size == w.size);
            if !fits {
                return Err(format!("success of task {id}: its object changed"));
            }
            let w = self
                .tasks
                .finish(id, TaskState::Success, String::new(), now, keep)?
                .ok_or_else(|| format!("success of task {id}, which never started"))?;
            // A target node the object got a replica on meanwhile keeps that one; the copy's
            // space there is free again (its writes are over).
            let (new, spare): (Replicas, Replicas) = w.targets.iter().copied().partition(|r| {
                let node = self.space.node_of(r.mount);
                self.objects.get(&key).is_some_and(|o| {
                    !o.replicas
                        .iter()
                        .any(|x| self.space.node_of(x.mount) == node)
                })
            });
            self.hold_or_free(&spare, w.size, now, now);
            let mut dropped = false;
            let space = &self.space;
            if let Some(o) = self.objects.get_mut(&key) {
                o.replicas.extend(new.iter().copied());
                // A move's source goes only where the object keeps a replica in a range that
                // stays (not one being unmounted).
                let stays = |r: &Replica| {
                    *r != w.source
                        && space
                            .get(r.mount)
                            .is_some_and(|m| m.draining_until.is_none())
                };
                if is_move && o.replicas.iter().any(stays) {
                    o.replicas.retain(|r| *r != w.source);
                    dropped = true;
                }
            }
            if dropped {
                self.hold_or_free(&[w.source].into_iter().collect(), w.size, hold_until, now);
            }
            return Ok(());
        };
        if let Some(w) = self
            .tasks
            .finish(id, TaskState::Failed, message, now, keep)?
        {
            self.hold_or_free(&w.targets, w.size, hold_until, now);
        }
        Ok(())
    }

    fn hold_or_free(&mut self, replicas: &Replicas, size: u64, until: Millis, now: Millis) {
        for &replica in replicas {
            if until > now {
                self.held.push(Held {
                    until,
                    replica,
                    size,
                });
            } else {
                self.space.free(replica, size);
            }
        }
    }

    fn apply_mount_removed(
        &mut self,
        mount: crate::master::types::MountId,
        now: Millis,
        mode: Mode,
    ) -> Result<(), String> {
        self.space
            .remove(mount)
            .ok_or_else(|| format!("removal of unknown mount {}", mount.0))?;
        let mut lost: Vec<(Box<str>, bool)> = Vec::new();
        let leases = &mut self.leases;
        self.objects.retain(|key, o| {
            if o.replicas.iter().any(|r| r.mount == mount) {
                o.replicas.retain(|r| r.mount != mount);
                if o.replicas.is_empty() {
                    leases.ended(o.lease_until);
                    lost.push((key.clone(), o.writing));
                    return false;
                }
            }
            true
        });
        let objects_lost = lost.len() as u64;
        for (key, _) in lost.into_iter().filter(|(_, writing)| *writing) {
            // An in-place write has nothing left to write into; another write now creates the
            // object instead of replacing it.
            match self.writes.get_mut(&key) {
                Some(w) if w.in_place => {
                    self.writes.remove(&key);
                }
                Some(w) => w.replaces = false,
                None => {}
            }
        }
        let broken: Vec<Box<str>> = self
            .writes
            .iter()
            .filter(|(_, w)| w.replicas.iter().any(|r| r.mount == mount))
            .map(|(k, _)| k.clone())
            .collect();
        for key in broken {
            if let Some(mut w) = self.writes.remove(&key) {
                w.replicas.retain(|r| r.mount != mount);
                let release = w.started.saturating_add(self.cfg.put_release_ms);
                self.hold_or_free(&w.replicas, w.size, release, now);
                if let Some(o) = self.objects.get_mut(&key) {
                    o.writing = false;
                }
            }
        }
        self.held.retain(|h| h.replica.mount != mount);
        self.grants.retain(|_, g| g.mount != mount);
        self.tasks.forget_mount(mount);
        if mode == Mode::Live {
            self.effects.push_back(Effect::MountRemoved {
                mount,
                objects_lost,
            });
        }
        Ok(())
    }
}
