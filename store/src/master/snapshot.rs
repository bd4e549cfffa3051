//! The master's durable state as one value, and rebuilding a master from a snapshot plus the
//! log entries after it.
//!
//! A snapshot holds what the log would rebuild: store space, objects (without leases), writes in
//! progress, held space and copy/move tasks. Soft state (leases, pings, statistics) is not in it. A restored
//! master knows its clients only from their store space: those ranges stay unreadable until the
//! client remounts them, and a client that does not do so within the client TTL is expired.

use serde::{Deserialize, Serialize};

use super::core::{Master, Mode};
use super::disk::frame::{read_frame, write_frame, Frame};
use super::grant::{Grant, GrantId};
use super::log::{LogEntry, FORMAT_VERSION};
use super::object::{deserialize_replicas, Held, Object, PendingWrite, Pin, Replicas};
use super::task::{Task, TaskId, TaskState};
use super::types::{ClientId, Millis, MountId, MountSpec};
use super::MasterConfig;
use crate::error::{Error, Result};

/// The durable state at one log position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Format version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// The last log entry it includes.
    pub seq: u64,
    /// The master's term.
    pub epoch: u64,
    /// Alignment of the offsets inside (must match the configuration it is restored with).
    pub alignment: u64,
    next_mount: u32,
    mounts: Vec<MountState>,
    objects: Vec<ObjectState>,
    writes: Vec<(String, PendingWrite)>,
    held: Vec<Held>,
    /// Copy and move tasks: a frame of their own after the state's (see
    /// [`Snapshot::write_frames`]), so that files written before tasks existed still load.
    #[serde(skip)]
    tasks: Vec<(TaskId, Task)>,
    /// Grants: a frame of their own after the tasks' (files written before grants existed
    /// still load).
    #[serde(skip)]
    grants: Grants,
}

/// The grants in a snapshot, and the id the next one gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Grants {
    next: u64,
    grants: Vec<(GrantId, Grant)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MountState {
    id: MountId,
    client: ClientId,
    spec: MountSpec,
    draining_until: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ObjectState {
    key: String,
    size: u64,
    #[serde(deserialize_with = "deserialize_replicas")]
    replicas: Replicas,
    stamped: Millis,
    pin: Pin,
    writing: bool,
}

impl Snapshot {
    /// Objects it holds.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Writes the snapshot as its files hold it after their header: the state's frame, then
    /// the tasks' frame, then the grants'.
    pub(crate) fn write_frames(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        write_frame(w, self)?;
        write_frame(w, &self.tasks)?;
        write_frame(w, &self.grants).map(drop)
    }

    /// Reads what [`Snapshot::write_frames`] wrote; a file that ends before the tasks' or the
    /// grants' frame (written before they existed) holds none.
    pub(crate) fn read_frames(r: &mut impl std::io::Read) -> std::io::Result<Frame<Snapshot>> {
        let (mut s, mut n) = match read_frame::<Snapshot>(r)? {
            Frame::Value(s, n) => (s, n),
            Frame::End => return Ok(Frame::End),
            Frame::Torn(why) => return Ok(Frame::Torn(why)),
        };
        match read_frame::<Vec<(TaskId, Task)>>(r)? {
            Frame::Value(tasks, m) => {
                s.tasks = tasks;
                n += m;
            }
            Frame::End => return Ok(Frame::Value(s, n)),
            Frame::Torn(why) => return Ok(Frame::Torn(format!("its tasks: {why}"))),
        }
        Ok(match read_frame::<Grants>(r)? {
            Frame::Value(grants, m) => {
                s.grants = grants;
                Frame::Value(s, n + m)
            }
            Frame::End => Frame::Value(s, n),
            Frame::Torn(why) => Frame::Torn(format!("its grants: {why}")),
        })
    }
}

impl Master {
    /// The durable state now, in a canonical order (equal states give equal snapshots).
    pub fn snapshot(&self) -> Snapshot {
        let mounts = self
            .space
            .iter()
            .map(|(id, m)| MountState {
                id,
                client: m.client,
                spec: MountSpec {
                    node: self.space.node_name(m.node).to_string(),
                    base: m.base,
                    len: m.len,
                },
                draining_until: m.draining_until,
            })
            .collect();
        let mut objects: Vec<ObjectState> = self
            .objects
            .iter()
            .map(|(k, o)| ObjectState {
                key: k.to_string(),
                size: o.size,
                replicas: o.replicas.clone(),
                stamped: o.stamped,
                pin: o.pin,
                writing: o.writing,
            })
            .collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        let mut writes: Vec<(String, PendingWrite)> = self
            .writes
            .iter()
            .map(|(k, w)| (k.to_string(), w.clone()))
            .collect();
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        let mut held = self.held.clone();
        held.sort();
        let tasks = self.tasks.to_vec();
        Snapshot {
            version: FORMAT_VERSION,
            seq: self.seq,
            epoch: self.epoch,
            alignment: self.cfg.alignment,
            next_mount: self.space.next_mount,
            mounts,
            objects,
            writes,
            held,
            tasks,
            grants: Grants {
                next: self.next_grant,
                grants: self.grants.iter().map(|(&id, g)| (id, g.clone())).collect(),
            },
        }
    }

    /// Rebuilds a master from an optional snapshot and the log entries after it, at `now` (the
    /// restarted master's clock). Entries at or before the snapshot are skipped; a gap, an
    /// entry or snapshot range that does not fit the state, or a last position of `u64::MAX`
    /// (no number left for the next entry) is `Corrupt`.
    pub fn restore(
        cfg: MasterConfig,
        logging: bool,
        snapshot: Option<Snapshot>,
        log: impl IntoIterator<Item = LogEntry>,
        now: Millis,
    ) -> Result<Master> {
        let mut m = Master::new(cfg, logging);
        if let Some(s) = snapshot {
            m.load(s)?;
        }
        for entry in log {
            m.replay(entry)?;
        }
        m.objects.at(m.seq);
        if m.seq == u64::MAX {
            // The next entry would have no number.
            return Err(corrupt("the log is at position u64::MAX".into()));
        }
        let now = m.tick(now);
        m.restart_soft_state(now);
        Ok(m)
    }

    /// Applies one log entry (skipping those already included).
    pub fn replay(&mut self, entry: LogEntry) -> Result<()> {
        if entry.seq <= self.seq {
            return Ok(());
        }
        if entry.seq != self.seq + 1 {
            return Err(corrupt(format!(
                "log jumps from {} to {}",
                self.seq, entry.seq
            )));
        }
        self.objects.at(entry.seq);
        self.apply(entry.now, entry.record, Mode::Replay)
            .map_err(|e| corrupt(format!("entry {}: {e}", entry.seq)))?;
        self.seq = entry.seq;
        self.epoch = entry.epoch;
        self.tick(entry.now);
        Ok(())
    }

    fn load(&mut self, s: Snapshot) -> Result<()> {
        if s.version != FORMAT_VERSION {
            return Err(Error::InvalidVersion {
                found: s.version,
                supported: FORMAT_VERSION,
            });
        }
        if s.alignment != self.cfg.alignment {
            return Err(Error::params(format!(
                "the snapshot was made with alignment {}, the configuration says {}",
                s.alignment, self.cfg.alignment
            )));
        }
        for mt in &s.mounts {
            self.space.check_add(mt.id, &mt.spec).map_err(corrupt)?;
            self.space.add(mt.id, mt.client, &mt.spec, true);
            if let Some(m) = self.space.get_mut(mt.id) {
                m.draining_until = mt.draining_until;
            }
        }
        self.space.next_mount = self.space.next_mount.max(s.next_mount);
        let mut stamp = 0;
        for o in s.objects {
            self.take(&o.replicas, o.size, &o.key)?;
            stamp = stamp.max(o.stamped);
            self.objects.insert(
                o.key.into_boxed_str(),
                Object {
                    size: o.size,
                    replicas: o.replicas,
                    stamped: o.stamped,
                    lease_until: 0,
                    pin: o.pin,
                    writing: o.writing,
                },
            );
        }
        for (key, w) in s.writes {
            self.take(&w.replicas, w.size, &key)?;
            self.writes.insert(key.into_boxed_str(), w);
        }
        for h in &s.held {
            self.take(&[h.replica], h.size, "held space")?;
        }
        self.held = s.held;
        for (id, g) in &s.grants.grants {
            let inside = g.extents().all(|(r, len)| {
                r.offset >= g.offset
                    && r.offset.saturating_add(len) <= g.offset.saturating_add(g.len)
            });
            if !inside || self.space.get(g.mount).is_none() {
                return Err(corrupt(format!("{id}: not inside a mounted range")));
            }
            for (r, len) in g.extents() {
                self.take(&[r], len, &id.to_string())?;
            }
        }
        self.next_grant = s.grants.next.max(
            s.grants
                .grants
                .iter()
                .map(|(id, _)| id.0.saturating_add(1))
                .max()
                .unwrap_or(0),
        );
        let count = s.grants.grants.len();
        self.grants = s.grants.grants.into_iter().collect();
        if self.grants.len() != count {
            return Err(corrupt("a grant id twice".into()));
        }
        for (id, t) in s.tasks {
            if let Some(w) = &t.work {
                self.take(&w.targets, w.size, &format!("task {id}"))?;
            }
            let due = match t.state {
                TaskState::Pending => self.pending_task_due(t.created),
                _ => None,
            };
            if !self.tasks.insert(id, t, due) {
                return Err(corrupt(format!("task {id} twice")));
            }
        }
        self.seq = s.seq;
        self.epoch = s.epoch;
        self.tick(stamp);
        Ok(())
    }

    fn take(&mut self, replicas: &[super::Replica], size: u64, what: &str) -> Result<()> {
        for r in replicas {
            if !self.space.reserve(*r, size) {
                return Err(corrupt(format!("{what:?}: replica overlaps used space")));
            }
        }
        Ok(())
    }
}

fn corrupt(reason: String) -> Error {
    Error::Corrupt {
        path: "snapshot/log".into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::task::TaskKind;
    use crate::master::types::MountSpec as Spec;

    /// A master with one task in its state.
    fn with_task() -> Master {
        let mut m = Master::new(MasterConfig::default(), false);
        let spec = |node: &str, base| Spec {
            node: node.into(),
            base,
            len: 1 << 20,
        };
        m.mount(ClientId(1), 1, &[spec("a", 0x1000)]).unwrap();
        m.mount(ClientId(2), 1, &[spec("b", 0x2000_0000)]).unwrap();
        let cfg = crate::master::PutConfig {
            preferred: vec!["a".into()],
            ..Default::default()
        };
        m.put_start(ClientId(1), 2, "k", 10, &cfg, crate::Write::Put)
            .unwrap();
        m.put_end(ClientId(1), 2, "k").unwrap();
        m.task_copy(3, "k", &["b".into()]).unwrap();
        m
    }

    #[test]
    fn tasks_travel_in_a_frame_of_their_own_that_older_files_lack() {
        let m = with_task();
        let snap = m.snapshot();
        assert_eq!(snap.tasks.len(), 1);
        let mut both = Vec::new();
        snap.write_frames(&mut both).unwrap();
        let Frame::Value(back, n) = Snapshot::read_frames(&mut &both[..]).unwrap() else {
            panic!("not read back");
        };
        assert_eq!((back, n), (snap.clone(), both.len()));
        assert!(matches!(snap.tasks[0].1.kind, TaskKind::Copy { .. }));
        // A file written before tasks existed holds the state's frame only.
        let mut old = Vec::new();
        write_frame(&mut old, &snap).unwrap();
        let Frame::Value(back, _) = Snapshot::read_frames(&mut &old[..]).unwrap() else {
            panic!("an old file does not load");
        };
        assert!(back.tasks.is_empty());
        assert_eq!(back.objects, snap.objects);
        // A torn grants' frame is a torn snapshot, not one without grants.
        let cut = &both[..both.len() - 2];
        assert!(matches!(
            Snapshot::read_frames(&mut &cut[..]).unwrap(),
            Frame::Torn(_)
        ));
    }

    #[test]
    fn grants_travel_in_a_frame_of_their_own_that_older_files_lack() {
        let mut m = with_task();
        let g = m.grant(ClientId(1), 4, 4096, &["b".into()]).unwrap();
        let snap = m.snapshot();
        assert_eq!(snap.grants.grants.len(), 1);
        let mut all = Vec::new();
        snap.write_frames(&mut all).unwrap();
        let Frame::Value(back, n) = Snapshot::read_frames(&mut &all[..]).unwrap() else {
            panic!("not read back");
        };
        assert_eq!((&back, n), (&snap, all.len()));
        let restored = Master::restore(m.config().clone(), false, Some(back), [], 5).unwrap();
        restored.check_invariants().unwrap();
        assert_eq!(restored.snapshot().grants.next, g.id.0 + 1);
        // A file written before grants existed ends after the tasks' frame.
        let mut old = Vec::new();
        write_frame(&mut old, &snap).unwrap();
        write_frame(&mut old, &snap.tasks).unwrap();
        let Frame::Value(back, _) = Snapshot::read_frames(&mut &old[..]).unwrap() else {
            panic!("an old file does not load");
        };
        assert!(back.grants.grants.is_empty());
        assert_eq!(back.tasks, snap.tasks);
    }
}
