//! The master's durable state as one value, and rebuilding a master from a snapshot plus the
//! log entries after it.
//!
//! A snapshot holds what the log would rebuild: store space, objects (without leases), writes in
//! progress and held space. Soft state (leases, pings, statistics) is not in it. A restored
//! master knows its clients only from their store space: those ranges stay unreadable until the
//! client remounts them, and a client that does not do so within the client TTL is expired.

use serde::{Deserialize, Serialize};

use super::core::{Master, Mode};
use super::log::{LogEntry, FORMAT_VERSION};
use super::object::{deserialize_replicas, Held, Object, PendingWrite, Pin, Replicas};
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
