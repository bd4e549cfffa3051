//! The master's metrics on its [`MetricsRegistry`]: what it did as counters (the core's
//! [`Tally`] of the records it committed and the leases it granted, taken where the driver
//! performs its effects), and what it holds as gauges, read from the core when the metrics are
//! rendered. Its rpc server's calls and its log's fsyncs go to the same registry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use metrics::{Counter, Gauge};
use yuebing_rpc::{label, MetricKind, MetricsSink};

use super::core::Tally;
use super::service::Health;
use super::types::{SegmentInfo, Stats};
use crate::metrics_registry::MetricsRegistry;
use crate::process::ProcessGauges;

/// The fsync histogram's name (the log writer records it).
pub(crate) const FSYNC: &str = "yuebing_master_log_fsync_seconds";

const SEGMENT_CAPACITY: &str = "yuebing_master_segment_capacity_bytes";
const SEGMENT_USED: &str = "yuebing_master_segment_used_bytes";

/// The roles a master may have (`Health::role`).
const ROLES: [&str; 3] = ["single", "leader", "standby"];

/// The master's handles.
pub(crate) struct MasterMetrics {
    registry: MetricsRegistry,
    puts: Counter,
    removals: Counter,
    evictions: Counter,
    gets: Counter,
    appends: Counter,
    serving: Gauge,
    roles: [Gauge; 3],
    epoch: Gauge,
    applied: Gauge,
    durable: Gauge,
    held: Held,
    /// The segments given gauges at the last render, to zero those since removed.
    segments: Mutex<BTreeSet<String>>,
    process: ProcessGauges,
}

/// The gauges of what the core holds.
struct Held {
    objects: Gauge,
    pending: Gauge,
    used: Gauge,
    capacity: Gauge,
    nodes: Gauge,
    mounts: Gauge,
    clients: Gauge,
    leases: Gauge,
}

fn counter(sink: &MetricsSink, name: &'static str, help: &'static str) -> Counter {
    sink.describe(MetricKind::Counter, name, help);
    sink.counter(name, vec![])
}

fn gauge(sink: &MetricsSink, name: &'static str, help: &'static str) -> Gauge {
    sink.describe(MetricKind::Gauge, name, help);
    sink.gauge(name, vec![])
}

impl MasterMetrics {
    /// Registers the master's families on `registry`.
    pub(crate) fn new(registry: MetricsRegistry) -> Self {
        let s = registry.sink();
        s.describe(
            MetricKind::Histogram,
            FSYNC,
            "How long each group commit's final flush and fdatasync of the data directory's log took.",
        );
        s.describe(
            MetricKind::Gauge,
            SEGMENT_CAPACITY,
            "Bytes of store space a node (segment) mounted.",
        );
        s.describe(
            MetricKind::Gauge,
            SEGMENT_USED,
            "Bytes handed out in a node's (segment's) store space (replicas, writes in progress, space held back).",
        );
        s.describe(
            MetricKind::Gauge,
            "yuebing_master_role",
            "1 for this master's role (single, leader or standby), 0 for the others.",
        );
        let roles = ROLES.map(|r| s.gauge("yuebing_master_role", vec![label("role", r)]));
        MasterMetrics {
            puts: counter(s, "yuebing_master_puts_total", "Objects this master published (puts and upserts that ended)."),
            removals: counter(s, "yuebing_master_removals_total", "Objects removed at a client's request."),
            evictions: counter(s, "yuebing_master_evictions_total", "Objects evicted since this master started."),
            gets: counter(s, "yuebing_master_gets_total", "Replica lists this master handed out (reads granted a lease)."),
            appends: counter(s, "yuebing_master_log_appends_total", "Entries this master handed to its operation log."),
            serving: gauge(s, "yuebing_master_serving", "1 while this master serves calls (leader or single, caught up), else 0."),
            roles,
            epoch: gauge(s, "yuebing_master_epoch", "The election term (epoch) of the entries this master's state holds or makes."),
            applied: gauge(s, "yuebing_master_log_applied_seq", "Position of the last mutation applied."),
            durable: gauge(s, "yuebing_master_log_durable_seq", "Position of the last durable mutation."),
            held: Held {
                objects: gauge(s, "yuebing_master_objects", "Completed objects."),
                pending: gauge(s, "yuebing_master_pending_writes", "Writes (puts, upserts) in progress."),
                used: gauge(s, "yuebing_master_used_bytes", "Bytes allocated in store space (replicas, writes in progress, space held back)."),
                capacity: gauge(s, "yuebing_master_capacity_bytes", "Bytes of mounted store space."),
                nodes: gauge(s, "yuebing_master_nodes", "Nodes with mounted store space."),
                mounts: gauge(s, "yuebing_master_mounts", "Mounted ranges of store space."),
                clients: gauge(s, "yuebing_master_clients", "Live clients."),
                leases: gauge(s, "yuebing_master_leases_held", "Objects under a read lease now (the master neither evicts nor removes them)."),
            },
            segments: Mutex::default(),
            process: ProcessGauges::new(s),
            registry,
        }
    }

    /// The registry these metrics are on.
    pub(crate) fn registry(&self) -> &MetricsRegistry {
        &self.registry
    }

    /// Counts `n` entries handed to the operation log.
    pub(crate) fn appended(&self, n: usize) {
        self.appends.increment(n as u64);
    }

    /// Counts what the core did (see [`Tally`]).
    pub(crate) fn tally(&self, t: Tally) {
        self.puts.increment(t.puts);
        self.removals.increment(t.removals);
        self.evictions.increment(t.evictions);
        self.gets.increment(t.reads);
    }

    /// Sets the gauges of this master's standing.
    pub(crate) fn standing(&self, h: &Health, serving: bool) {
        self.serving.set(u64::from(serving) as f64);
        for (gauge, role) in self.roles.iter().zip(ROLES) {
            gauge.set(u64::from(h.role == role) as f64);
        }
        self.epoch.set(h.epoch as f64);
        self.applied.set(h.last_seq as f64);
        self.durable.set(h.durable_seq as f64);
        self.process.update();
    }

    /// Sets the gauges of what the core holds: `None` for a master that does not serve (a
    /// standby shows no counts of its own: zero). Per segment, its mounts are summed; a
    /// segment gone since the last render shows 0 (the exporter cannot unregister a series).
    pub(crate) fn held(&self, now: Option<(Stats, u64, Vec<SegmentInfo>)>) {
        let h = &self.held;
        let (st, leases, segments) = now.unwrap_or_default();
        for (gauge, value) in [
            (&h.objects, st.objects),
            (&h.pending, st.pending_writes),
            (&h.used, st.bytes_used),
            (&h.capacity, st.bytes_capacity),
            (&h.nodes, st.nodes),
            (&h.mounts, st.mounts),
            (&h.clients, st.clients),
            (&h.leases, leases),
        ] {
            gauge.set(value as f64);
        }
        let mut by_segment: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for g in segments {
            let (capacity, used) = by_segment.entry(g.node).or_default();
            *capacity += g.capacity;
            *used += g.used;
        }
        let s = self.registry.sink();
        let set = |node: &str, (capacity, used): (u64, u64)| {
            let labels = vec![label("segment", node.to_string())];
            s.gauge(SEGMENT_CAPACITY, labels.clone())
                .set(capacity as f64);
            s.gauge(SEGMENT_USED, labels).set(used as f64);
        };
        // Held across, so that two renders at once cannot zero a live segment.
        let mut last = self.segments.lock().unwrap_or_else(|p| p.into_inner());
        for gone in last.iter().filter(|n| !by_segment.contains_key(*n)) {
            set(gone, (0, 0));
        }
        for (node, values) in &by_segment {
            set(node, *values);
        }
        *last = by_segment.into_keys().collect();
    }
}
