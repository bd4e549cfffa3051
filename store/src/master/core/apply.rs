//! Applying a durable record to the state: the one place where durable state changes, shared by
//! live operation and replay.

use super::Master;
use crate::master::log::{Effect, Record};
use crate::master::object::{Held, Object, PendingWrite, Replicas};
use crate::master::types::{Millis, MountSpec};

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
                if self.space.get(mount).is_some() || self.space.overlaps(&spec) {
                    return Err(format!("mount {} collides", mount.0));
                }
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
                pin,
            } => {
                let h = hash.unwrap_or_else(|| self.objects.hash(&key));
                if self.writes.contains_key_h(h, &key) {
                    return Err(format!("second write of {key:?}"));
                }
                match self.objects.get_mut_h(h, &key) {
                    Some(o) => o.writing = true,
                    None if in_place => return Err(format!("in-place write of missing {key:?}")),
                    None => {}
                }
                if mode == Mode::Replay {
                    for (i, r) in replicas.iter().enumerate() {
                        if !self.space.reserve(*r, size) {
                            replicas[..i].iter().for_each(|r| self.space.free(*r, size));
                            if let Some(o) = self.objects.get_mut_h(h, &key) {
                                o.writing = false;
                            }
                            return Err(format!("replica of {key:?} overlaps used space"));
                        }
                    }
                }
                self.writes.insert_h(
                    h,
                    key,
                    PendingWrite {
                        client,
                        started: now,
                        size,
                        replicas,
                        in_place,
                        pin,
                    },
                );
            }
            Record::WriteEnd { key, old_until } => {
                let h = hash.unwrap_or_else(|| self.objects.hash(&key));
                let (key, w) = self
                    .writes
                    .remove_entry_h(h, &key)
                    .ok_or_else(|| format!("end of unknown write {key:?}"))?;
                match self.objects.get_mut_h(h, &key) {
                    Some(o) if w.in_place => {
                        o.writing = false;
                        o.stamped = now;
                        o.pin = w.pin;
                    }
                    Some(o) => {
                        let old = std::mem::replace(&mut o.replicas, w.replicas);
                        let old_size = o.size;
                        o.size = w.size;
                        o.writing = false;
                        o.stamped = now;
                        o.lease_until = 0;
                        o.pin = w.pin;
                        self.hold_or_free(&old, old_size, old_until, now);
                    }
                    None if w.in_place => return Err(format!("in-place end of missing {key:?}")),
                    None => {
                        self.objects.insert_h(
                            h,
                            key,
                            Object {
                                size: w.size,
                                replicas: w.replicas,
                                stamped: now,
                                lease_until: 0,
                                pin: w.pin,
                                writing: false,
                            },
                        );
                    }
                }
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
                let mut until = hold_until;
                if o.writing {
                    if let Some(w) = self.writes.remove(&key) {
                        let release = w.started + self.cfg.put_release_ms;
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
            Record::Release => {
                let (due, keep): (Vec<Held>, Vec<Held>) =
                    self.held.drain(..).partition(|h| h.until <= now);
                self.held = keep;
                for h in due {
                    self.space.free(h.replica, h.size);
                }
            }
        }
        Ok(())
    }

    /// Removes a revoked write's traces: its space held until its release time (`hold`) or
    /// freed; an in-place write leaves its object torn, so the object goes too.
    pub(crate) fn drop_write(&mut self, key: &str, w: PendingWrite, hold: bool, now: Millis) {
        let until = if hold {
            w.started + self.cfg.put_release_ms
        } else {
            now
        };
        self.hold_or_free(&w.replicas, w.size, until, now);
        if w.in_place {
            if let Some(o) = self.objects.remove(key) {
                self.hold_or_free(&o.replicas, o.size, until, now);
            }
        } else if let Some(o) = self.objects.get_mut(key) {
            o.writing = false;
        }
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
        self.objects.retain(|key, o| {
            if o.replicas.iter().any(|r| r.mount == mount) {
                o.replicas.retain(|r| r.mount != mount);
                if o.replicas.is_empty() {
                    lost.push((key.clone(), o.writing));
                    return false;
                }
            }
            true
        });
        let objects_lost = lost.len() as u64;
        for (key, writing) in lost {
            if writing && self.writes.get(&key).is_some_and(|w| w.in_place) {
                self.writes.remove(&key);
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
                let release = w.started + self.cfg.put_release_ms;
                self.hold_or_free(&w.replicas, w.size, release, now);
                if let Some(o) = self.objects.get_mut(&key) {
                    o.writing = false;
                }
            }
        }
        self.held.retain(|h| h.replica.mount != mount);
        if mode == Mode::Live {
            self.effects.push_back(Effect::MountRemoved {
                mount,
                objects_lost,
            });
        }
        Ok(())
    }
}
