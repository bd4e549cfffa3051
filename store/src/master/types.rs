//! The words of the master's interface: ids, put settings, replica descriptions, results.

use serde::{Deserialize, Serialize};

/// A master timestamp: milliseconds since the Unix epoch as read by the driver, never going
/// backwards. It can be saved and compared across restarts.
pub type Millis = u64;

/// A client (one store client process), chosen by the client at random when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientId(pub u128);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A mounted range of store space, numbered by the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MountId(pub u32);

/// A range of a node's engine memory offered as store space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    /// The node: its engine segment name (with embedded metadata, the engine's `host:port`).
    pub node: String,
    /// Start address of the range in the node's engine.
    pub base: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// How an object is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutConfig {
    /// Replicas wanted, on distinct nodes (fewer when fewer nodes have room). Default 1.
    pub replica_num: u32,
    /// Nodes to use first, in order.
    pub preferred: Vec<String>,
    /// Evict after unpinned objects, for as long as it is accessed within the soft-pin TTL.
    pub soft_pin: bool,
    /// Never evict.
    pub hard_pin: bool,
}

impl PutConfig {
    /// The object's eviction protection these settings ask for (hard wins over soft).
    pub(crate) fn pin(&self) -> crate::master::Pin {
        use crate::master::Pin;
        if self.hard_pin {
            Pin::Hard
        } else if self.soft_pin {
            Pin::Soft
        } else {
            Pin::None
        }
    }
}

impl Default for PutConfig {
    fn default() -> Self {
        PutConfig {
            replica_num: 1,
            preferred: Vec::new(),
            soft_pin: false,
            hard_pin: false,
        }
    }
}

/// Whether a write may replace a completed object of its key: a value in the call's options,
/// not a separate call at every layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Write {
    /// A new key only: a completed object of the key is `ObjectAlreadyExists`, its value
    /// unchanged.
    #[default]
    Put,
    /// A new key, or a replacement of the completed object (Mooncake's `upsert`).
    Upsert,
}

/// Where one replica's bytes live: a range of a node's engine memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDesc {
    /// The node's engine segment name.
    pub node: String,
    /// Start address in that engine.
    pub addr: u64,
    /// Length: the object's size.
    pub len: u64,
}

/// A readable object: its replicas and the lease granted on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaList {
    /// The object's size in bytes.
    pub size: u64,
    /// Readable replicas, in placement order.
    pub replicas: Vec<ReplicaDesc>,
    /// How long the read lease lasts from the master's `now` (milliseconds). A reader must
    /// finish its transfer within this, counted from when it sent the request.
    pub lease_ms: u64,
}

/// The answer to a ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PingResult {
    /// The master knows this client and its store space.
    Ok,
    /// The master does not know this client (it restarted, or expired the client): mount the
    /// store space again with `remount`.
    NeedRemount,
    /// As `Ok`, and copy or move tasks wait for this client: take them with `task_take`.
    TasksWaiting,
}

/// The operator's view of the master.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Completed objects.
    pub objects: u64,
    /// Writes (puts, upserts) in progress.
    pub pending_writes: u64,
    /// Bytes allocated (replicas, writes in progress, and space held back for stale writers).
    pub bytes_used: u64,
    /// Bytes of mounted store space.
    pub bytes_capacity: u64,
    /// Nodes with mounted space.
    pub nodes: u64,
    /// Mounted ranges.
    pub mounts: u64,
    /// Live clients.
    pub clients: u64,
    /// Objects evicted since the master started.
    pub evicted: u64,
    /// `1 − largest free extent / free bytes`, over all ranges.
    pub fragmentation: f64,
    /// Sequence number of the last durable mutation.
    pub last_seq: u64,
}

/// One mounted range of store space, as an operator sees it (the admin server's
/// `/get_all_segments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// The node (its engine segment name).
    pub node: String,
    /// The master's id of the range.
    pub mount: MountId,
    /// The client that mounted it.
    pub client: ClientId,
    /// Start address in the node's engine.
    pub base: u64,
    /// Bytes it holds.
    pub capacity: u64,
    /// Bytes handed out (replicas, writes in progress, space held back).
    pub used: u64,
    /// Its node has mounted it since the master started (else it waits for a remount).
    pub ready: bool,
    /// Being unmounted gracefully.
    pub draining: bool,
}

/// One key of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedObject {
    /// The key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Replicas it has.
    pub replicas: u32,
}

/// What a master's rpc server counted of the calls it served, by method (the `call_stats`
/// call): counters since the master started, which a reader turns into rates by subtracting
/// two of them (`yuebing store stats --watch`). Describes the process that answers, leader or
/// standby, not the store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallStats {
    /// When the counting began (the master's start), in milliseconds since the Unix epoch: two
    /// snapshots with different values come from different runs, whose counts do not subtract.
    pub started_ms: Millis,
    /// Time since then, in milliseconds, on a monotonic clock: the time between two snapshots
    /// of one run, as the master measured it.
    pub uptime_ms: u64,
    /// Upper bounds in microseconds of the latency buckets of every
    /// [`MethodCalls::buckets`], ascending.
    pub bucket_bounds_us: Vec<u64>,
    /// One entry per method called since the start, sorted by name.
    pub methods: Vec<MethodCalls>,
}

/// One method's counters in [`CallStats`]. A call that is answered with an error counts in
/// `calls` and in `errors`; a batch call counts once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MethodCalls {
    /// The method's name, as the master's service names it (`put_start`, `stats`, …).
    pub method: String,
    /// Calls finished.
    pub calls: u64,
    /// Calls running when the snapshot was taken.
    pub in_flight: u64,
    /// Failed calls by error code.
    pub errors: std::collections::BTreeMap<i32, u64>,
    /// Median latency since the start, in microseconds.
    pub p50_us: u64,
    /// 99th-percentile latency since the start, in microseconds.
    pub p99_us: u64,
    /// Largest latency since the start, in microseconds.
    pub max_us: u64,
    /// Calls that took at most each of [`CallStats::bucket_bounds_us`] (cumulative).
    pub buckets: Vec<u64>,
}

impl From<yuebing_rpc::MethodMetrics> for MethodCalls {
    fn from(m: yuebing_rpc::MethodMetrics) -> Self {
        MethodCalls {
            method: m.method,
            calls: m.calls,
            in_flight: m.in_flight,
            errors: m.errors,
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            max_us: m.max_us,
            buckets: m.buckets,
        }
    }
}
