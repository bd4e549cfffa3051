//! The master core: a pure state machine over objects, store space, clients and leases.
//!
//! No sockets, no clocks, no spawning. Every input takes `now` (a [`Millis`] master timestamp);
//! `handle_*` methods return the response; effects (log appends, expiries) are drained with
//! [`Master::poll_effect`]; [`Master::poll_timeout`] says when [`Master::handle_timeout`] is due.
//!
//! Every durable change goes through one [`Record`] applied by `apply`, and is appended to the
//! operation log as an [`Effect::Append`] when logging is on, so replaying the log (after a
//! snapshot) rebuilds the same state. Leases, pings and access times refreshed by reads are soft
//! state: not logged, not in snapshots.
//!
//! # The rule against starved eviction (Mooncake #2187)
//! `exist` (and `batch_exist`, `get_size`) neither grants a lease nor refreshes the access
//! time: only `get_replica_list` does, because only a reader about to transfer needs the bytes
//! pinned. Polling for existence therefore never keeps an object from eviction.

mod apply;
mod clients;
mod evict;
mod grants;
mod invariants;
mod leases;
mod read;
mod tasks;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

pub(crate) use self::apply::Mode;
use self::leases::LeaseEnds;
use super::config::MasterConfig;
use super::grant::{Grant, GrantId};
use super::keymap::{KeyHasher, KeyMap};
use super::log::{Effect, LogEntry, Record};
use super::object::{Held, PendingWrite};
use super::presence::{self, Objects, Presence};
use super::space::Space;
use super::task::Tasks;
use super::types::{ClientId, Millis};
use crate::error::{Error, Result};

/// What the master knows of a live client (soft state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientState {
    pub(crate) last_ping: Millis,
    /// Known only from restored store space: it must `remount` before it counts as live.
    pub(crate) need_remount: bool,
}

/// The master's metadata core. One lock around it serves all callers.
#[derive(Debug)]
pub struct Master {
    pub(crate) cfg: MasterConfig,
    pub(crate) objects: Objects,
    pub(crate) writes: KeyMap<PendingWrite>,
    pub(crate) space: Space,
    pub(crate) clients: HashMap<ClientId, ClientState>,
    pub(crate) held: Vec<Held>,
    pub(crate) effects: VecDeque<Effect>,
    pub(crate) seq: u64,
    pub(crate) epoch: u64,
    pub(crate) logging: bool,
    pub(crate) rng: fastrand::Rng,
    pub(crate) eviction_due: bool,
    pub(crate) evicted_total: u64,
    /// What this master did since [`Master::take_tally`] last took it (soft state).
    pub(crate) tally: Tally,
    pub(crate) last_now: Millis,
    /// Space freed before this time is held until then, whatever leases this master knows of:
    /// after a restart or a promotion the read leases granted before are unknown (soft state),
    /// and a reader may still be transferring under one (see [`Master::reuse_after`]).
    pub(crate) no_reuse_until: Millis,
    /// Until when a range a node remounts that this master does not know takes no new
    /// replicas (soft state): it was mounted at an earlier master, whose read leases on it are
    /// unknown here (see [`Master::remount`]).
    pub(crate) remount_hold_until: Millis,
    /// Clients that mounted or remounted with this master within that window (soft state).
    pub(crate) seen: HashSet<ClientId>,
    /// Store space removed while readers may still read it under earlier leases (soft state):
    /// a new mount over it is refused until then (see `remove_mount`).
    pub(crate) removed: Vec<RemovedRange>,
    /// Clients that said they left, and until when a mount or remount from them is refused
    /// (soft state): a remount their heartbeat had on the wire must not mount space that the
    /// process freed as it left.
    pub(crate) left: HashMap<ClientId, Millis>,
    /// Copy and move tasks (see [`task`](super::task)).
    pub(crate) tasks: Tasks,
    /// The read leases held, by their end (soft state).
    pub(crate) leases: LeaseEnds,
    /// Space granted to clients ahead of their puts, by id (see [`grant`](super::grant)).
    pub(crate) grants: BTreeMap<GrantId, Grant>,
    /// The id the next grant gets.
    pub(crate) next_grant: u64,
}

/// A removed range of a node's memory, and until when readers may still read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemovedRange {
    pub(crate) node: String,
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) until: Millis,
}

impl Master {
    /// An empty master. With `logging`, every durable change is also an [`Effect::Append`].
    pub fn new(cfg: MasterConfig, logging: bool) -> Self {
        let rng = fastrand::Rng::with_seed(cfg.seed);
        let space = Space::new(cfg.alignment);
        let hasher = KeyHasher::default();
        Master {
            objects: Objects::new(hasher.clone(), cfg.max_key_len),
            cfg,
            writes: KeyMap::new(hasher),
            space,
            clients: HashMap::new(),
            left: HashMap::new(),
            held: Vec::new(),
            effects: VecDeque::new(),
            seq: 0,
            epoch: 1,
            logging,
            rng,
            eviction_due: false,
            evicted_total: 0,
            tally: Tally::default(),
            last_now: 0,
            no_reuse_until: 0,
            remount_hold_until: 0,
            seen: HashSet::new(),
            removed: Vec::new(),
            tasks: Tasks::default(),
            leases: LeaseEnds::default(),
            grants: BTreeMap::new(),
            next_grant: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &MasterConfig {
        &self.cfg
    }

    /// Sequence number of the last durable change.
    pub fn last_seq(&self) -> u64 {
        self.seq
    }

    /// The next effect for the driver, oldest first.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// What this master did since the last call (for the driver's metrics).
    pub(crate) fn take_tally(&mut self) -> Tally {
        std::mem::take(&mut self.tally)
    }

    /// Makes `record` durable state: numbers it, queues its log entry, applies it.
    pub(crate) fn commit(&mut self, now: Millis, record: Record) {
        self.commit_hinted(now, record, None);
    }

    /// [`Master::commit`] with the hash of the record's key when the caller has it.
    pub(crate) fn commit_hinted(&mut self, now: Millis, record: Record, hash: Option<u64>) {
        self.seq += 1;
        self.objects.at(self.seq);
        self.tally.count(&record);
        if self.logging {
            self.effects.push_back(Effect::Append(LogEntry {
                seq: self.seq,
                epoch: self.epoch,
                now,
                record: record.clone(),
            }));
        }
        if let Err(e) = self.apply_hinted(now, record, Mode::Live, hash) {
            // Handlers only commit records they checked against this state.
            debug_assert!(false, "a live record did not apply: {e}");
            tracing::error!(error = %e, "a live record did not apply");
        }
    }

    /// Becomes the leader of `epoch` at `now`, after applying the replicated log as a hot
    /// standby: entries made from now on carry `epoch`; client TTLs restart (a standby never ran
    /// their timeouts) and store space waits for its client's remount, as after a restart; and
    /// no space freed from now on is reused for one read-lease TTL, because the read leases the
    /// old leader granted are not known here. `epoch` must be newer than every entry applied.
    pub fn promote(&mut self, epoch: u64, now: Millis) -> Result<()> {
        if epoch <= self.epoch {
            return Err(Error::params(format!(
                "promotion to epoch {epoch}, but the log already holds epoch {}",
                self.epoch
            )));
        }
        self.epoch = epoch;
        let now = self.tick(now);
        self.restart_soft_state(now);
        Ok(())
    }

    /// The epoch of the entries this master makes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// After a restart or a promotion at `now`: every client must ping within its TTL from
    /// now and remount before its space counts, and space freed within one read-lease TTL is
    /// held until its end.
    pub(crate) fn restart_soft_state(&mut self, now: Millis) {
        self.no_reuse_until = now.saturating_add(self.cfg.lease_ttl_ms);
        self.remount_hold_until = self.no_reuse_until;
        // Owners of store space or of grants: each must remount within its TTL, or its space
        // and grants go.
        let owners: Vec<ClientId> = self
            .space
            .iter()
            .map(|(_, mt)| mt.client)
            .chain(self.grants.values().map(|g| g.client))
            .collect();
        let ids: Vec<_> = self.space.iter().map(|(id, _)| id).collect();
        for id in ids {
            if let Some(mt) = self.space.get_mut(id) {
                mt.ready = false;
            }
        }
        for client in owners {
            self.clients.insert(
                client,
                ClientState {
                    last_ping: now,
                    need_remount: true,
                },
            );
        }
    }

    /// Tells a master made by [`Master::new`] for a process that starts with no state (no data
    /// directory) that it starts at `now`. A master of a new cluster and one restarted without
    /// its state cannot tell each other apart; in the second, a node that remounts the range it
    /// had mounted before may hold objects that clients still read under the previous master's
    /// leases (clients keep locations for a lease, see the client's lease cache), so such a
    /// range takes no new replicas until one lease TTL from now. First mounts are not held.
    ///
    /// Its grant ids start from `now` (shifted up by 16 bits), so that no id of an earlier
    /// life, still held by a client that has not heard of the restart, names a new grant.
    pub fn start_stateless(&mut self, now: Millis) {
        let now = self.tick(now);
        self.remount_hold_until = now.saturating_add(self.cfg.lease_ttl_ms);
        self.next_grant = self.next_grant.max(now.saturating_mul(1 << 16));
    }

    /// Until when replicas freed now must stay out of use, given the newest read lease known on
    /// them: at least until that lease ends, and, after a restart or promotion, until one lease
    /// TTL after it (leases granted before it are unknown). Leaders put this into the records
    /// they make, so standbys replaying them hold the same space.
    pub(crate) fn reuse_after(&self, lease_until: Millis) -> Millis {
        lease_until.max(self.no_reuse_until)
    }

    /// Moves the clock forward (it never goes back, even if a caller's does).
    pub(crate) fn tick(&mut self, now: Millis) -> Millis {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// When [`Master::handle_timeout`] should next be called, if anything is pending.
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.eviction_due {
            return Some(self.last_now);
        }
        let clients = self
            .clients
            .values()
            .map(|c| c.last_ping.saturating_add(self.cfg.client_ttl_ms));
        let drains = self
            .space
            .iter()
            .filter_map(|(_, m)| m.draining_until.or(m.hold_until));
        let writes = self
            .writes
            .iter()
            .map(|(_, w)| w.started.saturating_add(self.cfg.put_release_ms));
        // Held space is released no earlier than the no-reuse window's end: its times may come
        // from another master's clock (see `handle_timeout`).
        let held = self.held.iter().map(|h| h.until.max(self.no_reuse_until));
        let tasks = self.task_timeout();
        clients
            .chain(drains)
            .chain(writes)
            .chain(held)
            .chain(tasks)
            .min()
    }

    /// Runs what is due at `now`: client expiry, the end of graceful unmounts, release of stale
    /// writes, tasks past their time, release of held space, and eviction above the high
    /// watermark.
    pub fn handle_timeout(&mut self, now: Millis) {
        let now = self.tick(now);
        self.expire_clients(now);
        let drained: Vec<_> = self
            .space
            .iter()
            .filter(|(_, m)| m.draining_until.is_some_and(|t| t <= now))
            .map(|(id, _)| id)
            .collect();
        for mount in drained {
            self.remove_mount(now, mount);
        }
        self.space.end_holds(now);
        let mut stale: Vec<Box<str>> = self
            .writes
            .iter()
            .filter(|(_, w)| w.started.saturating_add(self.cfg.put_release_ms) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        stale.sort();
        for key in stale {
            self.commit(now, Record::WriteRevoke { key, hold: false });
        }
        self.expire_tasks(now);
        // Not within a lease TTL of a restart or promotion: held times written by the master
        // before may run on another clock, and a reader of its leases may still be reading.
        if now >= self.no_reuse_until && self.held.iter().any(|h| h.until <= now) {
            self.commit(now, Record::Release);
        }
        if self.eviction_due || self.above_watermark() {
            self.eviction_due = false;
            self.evict(now, 0);
        }
    }

    /// Whether live objects (not space merely held until readers are done) fill more than the
    /// high watermark: evicting cannot free held space any sooner.
    fn above_watermark(&self) -> bool {
        let cap = self.space.capacity();
        let live = self.space.used().saturating_sub(self.held_bytes());
        cap > 0 && live as f64 > self.cfg.high_watermark * cap as f64
    }

    /// Bytes of store space held out of use until their readers or writers are done.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held
            .iter()
            .map(|h| self.space.align_up(h.size))
            .fold(0u64, u64::saturating_add)
    }

    /// Checks a key: not empty, not over the configured length.
    pub(crate) fn check_key(&self, key: &str) -> Result<()> {
        presence::check_key(key, self.cfg.max_key_len)
    }

    /// The view of this master's keys that existence checks read without its lock (see
    /// [`presence`](super::presence)).
    pub(crate) fn presence(&self) -> &Arc<Presence> {
        self.objects.presence()
    }

    /// Makes `presence` this master's view of its keys from now on, filled with them (see
    /// [`Objects::attach`]).
    pub(crate) fn attach_presence(&mut self, presence: Arc<Presence>) {
        self.objects.attach(presence);
    }
}

/// What a master did while it served (not what it replayed), counted where it commits records
/// and grants leases, whether or not it logs: its metrics' counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Objects published (puts and upserts that ended).
    pub(crate) puts: u64,
    /// Objects removed at a client's request.
    pub(crate) removals: u64,
    /// Objects evicted.
    pub(crate) evictions: u64,
    /// Reads granted a lease.
    pub(crate) reads: u64,
}

impl Tally {
    fn count(&mut self, record: &Record) {
        match record {
            Record::WriteEnd { .. } => self.puts += 1,
            Record::Remove { evicted: true, .. } => self.evictions += 1,
            Record::Remove { evicted: false, .. } => self.removals += 1,
            _ => {}
        }
    }
}
