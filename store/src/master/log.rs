//! Durable mutations, the operation log's entries, and the effects the core asks its driver for.

use serde::{Deserialize, Serialize};

use super::grant::GrantId;
use super::object::{deserialize_replicas, Pin, Replicas};
use super::space::Replica;
use super::task::{TaskId, TaskKind};
use super::types::{ClientId, Millis, MountId};

/// Format version of log entries and snapshots.
pub const FORMAT_VERSION: u32 = 1;

/// One durable mutation. Every decision (ids, offsets) is inside, so applying the same records
/// to the same state gives the same state: that is what replay relies on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A node mounted a range as store space.
    Mount {
        /// The owner.
        client: ClientId,
        /// The id given to it.
        mount: MountId,
        /// The node (engine segment name).
        node: String,
        /// Start address.
        base: u64,
        /// Length.
        len: u64,
    },
    /// A graceful unmount: no new allocations; the range goes at `until`.
    UnmountBegin {
        /// The range.
        mount: MountId,
        /// When it is removed.
        until: Millis,
    },
    /// A range is gone (drained, its client expired, or not remounted); replicas on it are lost.
    MountRemoved {
        /// The range.
        mount: MountId,
    },
    /// A put or upsert started; a stale write of the same key, if any, is pre-empted.
    WriteStart {
        /// The writer.
        client: ClientId,
        /// The key.
        key: Box<str>,
        /// Bytes.
        size: u64,
        /// Where the new replicas go (empty when in place).
        #[serde(deserialize_with = "deserialize_replicas")]
        replicas: Replicas,
        /// Writes into the existing object's replicas.
        in_place: bool,
        /// A completed object of the key exists and this write replaces it.
        replaces: bool,
        /// The object's pin once completed.
        pin: Pin,
    },
    /// A write ended: its replicas become the object's. Replicas it replaced stay out of use
    /// until `old_until` (a reader's lease on them), freed at once if that has passed.
    WriteEnd {
        /// The key.
        key: Box<str>,
        /// End of the newest lease on the replaced replicas.
        old_until: Millis,
    },
    /// A write is revoked. With `hold`, its space stays out of use until its release time (the
    /// writer may still be writing); else it is freed at once.
    WriteRevoke {
        /// The key.
        key: Box<str>,
        /// Keep the space until the release timeout.
        hold: bool,
    },
    /// A completed object is removed (by `remove`, `remove_all` or eviction). A write in
    /// progress on the key is revoked with its space held.
    Remove {
        /// The key.
        key: Box<str>,
        /// Removed by eviction (for statistics).
        evicted: bool,
        /// A forced removal keeps the replicas out of use until the newest lease ends.
        hold_until: Millis,
    },
    /// Held-back space whose time has come is released.
    Release,
    /// Some replicas of a completed object are dropped (`batch_replica_clear` of one node);
    /// the object keeps its others (a drop of all of them is a `Remove`).
    ReplicasDrop {
        /// The key.
        key: Box<str>,
        /// The ranges whose replicas of it go.
        mounts: Vec<MountId>,
        /// Their space stays out of use until then (a restart's no-reuse window).
        hold_until: Millis,
    },
    /// A copy or move task was created, for `client` to run.
    TaskCreate {
        /// Its id.
        id: TaskId,
        /// The object's key.
        key: Box<str>,
        /// What it does.
        kind: TaskKind,
        /// The client that runs it.
        client: ClientId,
    },
    /// A task's client took it: the new replicas' space is placed, the source chosen.
    TaskStart {
        /// The task.
        id: TaskId,
        /// The replica copied from.
        source: Replica,
        /// Where the new replicas go.
        #[serde(deserialize_with = "deserialize_replicas")]
        targets: Replicas,
        /// When the master fails it if it has not ended.
        until: Millis,
    },
    /// A task ended. On success its new replicas become the object's (a move's source replica
    /// is dropped, held until `hold_until`); on failure the new replicas' space is held until
    /// `hold_until` (freed at once if that has passed).
    TaskEnd {
        /// The task.
        id: TaskId,
        /// Why it failed; `None` on success.
        error: Option<String>,
        /// Until when freed space stays out of use.
        hold_until: Millis,
    },
    /// A client was granted store space ahead of its puts (see [`grant`](super::grant)).
    GrantStart {
        /// The client.
        client: ClientId,
        /// The id given to it.
        grant: GrantId,
        /// Where it starts.
        replica: Replica,
        /// Bytes (aligned).
        len: u64,
    },
    /// An object the client wrote into its grants starts as a write (its `WriteEnd` follows):
    /// each replica is taken out of what is left of its grant.
    WriteGranted {
        /// The writer.
        client: ClientId,
        /// The key.
        key: Box<str>,
        /// Bytes.
        size: u64,
        /// Each replica, with the grant it comes from.
        parts: Vec<(GrantId, Replica)>,
        /// A completed object of the key exists and this write replaces it.
        replaces: bool,
        /// The object's pin once completed.
        pin: Pin,
    },
    /// A grant ends: what is left of it is held until `hold_until` (freed at once if that has
    /// passed).
    GrantEnd {
        /// The grant.
        grant: GrantId,
        /// Until when its space stays out of use.
        hold_until: Millis,
    },
}

/// A record with its place in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// The master's term; constant until high availability exists.
    pub epoch: u64,
    /// The master's time when it was made.
    pub now: Millis,
    /// The mutation.
    pub record: Record,
}

/// Something the driver must do or may report, drained with `poll_effect`.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append this entry to the operation log; the response to the mutation that made it may be
    /// released only once it is durable.
    Append(LogEntry),
    /// A client missed its pings for the TTL and was expired.
    ClientExpired {
        /// The client.
        client: ClientId,
        /// Ranges it had mounted, now gone.
        mounts: usize,
        /// Its writes in progress, revoked.
        writes: usize,
    },
    /// An eviction round ran.
    Evicted {
        /// Objects removed.
        objects: u64,
        /// Bytes freed.
        bytes: u64,
    },
    /// A range was removed; objects left without a replica are gone.
    MountRemoved {
        /// The range.
        mount: MountId,
        /// Objects that lost their last replica.
        objects_lost: u64,
    },
}
