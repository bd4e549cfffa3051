//! A client's metrics on its [`MetricsRegistry`] (`ClientConfig::metrics`): how long its puts
//! and gets took by size class, and its standing as gauges read when they are rendered. Its
//! calls to the masters and its engine's transfers go to the same registry.

use std::time::Duration;

use metrics::{Gauge, Histogram};
use yuebing_rpc::{label, MetricKind};

use crate::metrics_registry::MetricsRegistry;
use crate::process::ProcessGauges;

const OP_SECONDS: &str = "yuebing_client_op_seconds";

/// Upper bounds of the size classes, with their labels; larger objects are `>16MiB`.
const CLASSES: [(u64, &str); 4] = [
    (4 << 10, "<=4KiB"),
    (64 << 10, "<=64KiB"),
    (1 << 20, "<=1MiB"),
    (16 << 20, "<=16MiB"),
];

/// What a timed operation did.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Put,
    Get,
}

/// The client's handles.
pub(crate) struct ClientMetrics {
    registry: MetricsRegistry,
    /// Per operation (put, get), per size class (the last: larger).
    ops: [[Histogram; CLASSES.len() + 1]; 2],
    ready: Gauge,
    space_bytes: Gauge,
    space_ranges: Gauge,
    process: ProcessGauges,
}

impl ClientMetrics {
    /// Registers the client's families on `registry`.
    pub(crate) fn new(registry: MetricsRegistry) -> Self {
        let s = registry.sink();
        s.describe(
            MetricKind::Histogram,
            OP_SECONDS,
            "How long one object's successful put or get took, from its first master call to its last transfer, by size class (an object put in a batch took the batch's time).",
        );
        let sizes: Vec<&str> = CLASSES
            .iter()
            .map(|(_, name)| *name)
            .chain([">16MiB"])
            .collect();
        let ops = ["put", "get"].map(|op| {
            std::array::from_fn(|i| {
                s.histogram(OP_SECONDS, vec![label("op", op), label("size", sizes[i])])
            })
        });
        let gauge = |name: &'static str, help: &'static str| {
            s.describe(MetricKind::Gauge, name, help);
            s.gauge(name, vec![])
        };
        ClientMetrics {
            ops,
            ready: gauge(
                "yuebing_client_ready",
                "1 while the master confirmed this client with its store space mounted, else 0.",
            ),
            space_bytes: gauge(
                "yuebing_client_store_space_bytes",
                "Bytes of store space this client mounted.",
            ),
            space_ranges: gauge(
                "yuebing_client_store_space_ranges",
                "Ranges of store space this client mounted.",
            ),
            process: ProcessGauges::new(s),
            registry,
        }
    }

    /// The registry these metrics are on.
    pub(crate) fn registry(&self) -> &MetricsRegistry {
        &self.registry
    }

    /// One object of `len` bytes was put or read in `took`.
    pub(crate) fn took(&self, op: Op, len: u64, took: Duration) {
        let class = CLASSES
            .iter()
            .position(|&(max, _)| len <= max)
            .unwrap_or(CLASSES.len());
        self.ops[op as usize][class].record(took.as_secs_f64());
    }

    /// Sets the gauges of this client's standing: ready or not, and its store space (the
    /// lengths of its ranges).
    pub(crate) fn standing(&self, ready: bool, space: impl ExactSizeIterator<Item = u64>) {
        self.ready.set(u64::from(ready) as f64);
        self.space_ranges.set(space.len() as f64);
        self.space_bytes.set(space.sum::<u64>() as f64);
        self.process.update();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_timed_by_size_class() {
        let m = ClientMetrics::new(MetricsRegistry::prometheus());
        m.took(Op::Put, 4096, Duration::from_micros(300));
        m.took(Op::Get, 4097, Duration::from_micros(30));
        m.took(Op::Get, 1 << 30, Duration::from_millis(3));
        let text = m.registry().render().unwrap();
        for line in [
            r#"yuebing_client_op_seconds_count{op="put",size="<=4KiB"} 1"#,
            r#"yuebing_client_op_seconds_count{op="get",size="<=64KiB"} 1"#,
            r#"yuebing_client_op_seconds_count{op="get",size=">16MiB"} 1"#,
            r#"yuebing_client_op_seconds_count{op="put",size="<=1MiB"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
