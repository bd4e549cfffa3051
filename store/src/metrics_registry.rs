//! A registry of metrics for one process or one embedded client: a [`metrics`] recorder that
//! the master, a client, their rpc servers and pools, and an engine register their handles on
//! (through its [`MetricsSink`]), and, for a Prometheus registry, the text `/metrics` serves.
//!
//! Chosen by measurement (rpc/examples/metrics_cost.rs, issue 28): a call recorded on cached
//! `metrics` handles cost 0.43× of the rpc layer's own per-method statistics on one thread, and
//! `metrics-exporter-prometheus` renders the text format that `promtool check metrics` accepts
//! (prometheus-client, faster still, writes OpenMetrics counters that promtool rejects as
//! Prometheus text).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use yuebing_rpc::{MetricsSink, LATENCY_BUCKETS_US};

/// How often a Prometheus registry folds the samples its histograms queued into their buckets,
/// so that a process nobody scrapes does not hold every sample.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Where metrics go: a Prometheus registry of yuebing's own, an application's recorder, or
/// nowhere. Cloning shares it.
#[derive(Clone, Debug)]
pub struct MetricsRegistry {
    sink: MetricsSink,
    prometheus: Option<Arc<Prometheus>>,
}

impl Default for MetricsRegistry {
    /// A Prometheus registry of its own.
    fn default() -> Self {
        MetricsRegistry::prometheus()
    }
}

/// A Prometheus recorder with what renders it, as one recorder its sink shares.
struct Prometheus {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Set while an upkeep task runs for it.
    kept_up: AtomicBool,
}

impl Drop for Prometheus {
    /// Folds the samples the histograms still queue into their buckets: metrics-util's
    /// `AtomicBucket` frees its blocks when cleared, not when dropped, so a registry dropped
    /// between two upkeeps would leak the samples recorded since the last one.
    fn drop(&mut self) {
        self.handle.run_upkeep();
    }
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus").finish_non_exhaustive()
    }
}

impl MetricsRegistry {
    /// A Prometheus registry of its own: histograms in seconds with buckets from 10 µs to
    /// 10 s (those of [`LATENCY_BUCKETS_US`]).
    pub fn prometheus() -> Self {
        let buckets: Vec<f64> = LATENCY_BUCKETS_US
            .iter()
            .map(|&us| us as f64 / 1e6)
            .collect();
        let recorder = PrometheusBuilder::new()
            .set_buckets(&buckets)
            .expect("the latency buckets are a non-empty constant")
            .build_recorder();
        let prometheus = Arc::new(Prometheus {
            handle: recorder.handle(),
            recorder,
            kept_up: AtomicBool::new(false),
        });
        MetricsRegistry {
            sink: MetricsSink::new(prometheus.clone()),
            prometheus: Some(prometheus),
        }
    }

    /// Metrics go to an application's own `recorder`; [`MetricsRegistry::render`] has nothing
    /// to show (the application exports them). Counters and histograms are recorded as they
    /// happen; the gauges of what a master or client holds (objects, bytes, leases, role,
    /// process memory) are set when yuebing renders its own `/metrics`, so with an
    /// application's recorder they keep their first values.
    pub fn from_recorder(recorder: Arc<dyn Recorder + Send + Sync>) -> Self {
        MetricsRegistry {
            sink: MetricsSink::new(recorder),
            prometheus: None,
        }
    }

    /// Metrics go nowhere.
    pub fn off() -> Self {
        MetricsRegistry {
            sink: MetricsSink::off(),
            prometheus: None,
        }
    }

    /// The sink components register their handles on.
    pub fn sink(&self) -> &MetricsSink {
        &self.sink
    }

    /// Whether metrics are recorded at all.
    pub fn is_on(&self) -> bool {
        self.sink.is_on()
    }

    /// The Prometheus text of everything registered, for a registry of yuebing's own.
    pub fn render(&self) -> Option<String> {
        self.prometheus.as_ref().map(|p| p.handle.render())
    }

    /// Makes this registry the process's global recorder as well, so that code that records
    /// through `metrics`' macros lands in it; for the `yuebing` processes, never a library's
    /// choice. Fails if the process has one already.
    pub fn install_global(&self) -> Result<(), String> {
        let Some(p) = &self.prometheus else {
            return Err("only a Prometheus registry of yuebing's own can be installed".into());
        };
        metrics::set_global_recorder(p.clone())
            .map_err(|_| "a global metrics recorder is installed already".to_string())
    }

    /// Has the histograms' queued samples folded in every few seconds on `rt`, for as long as
    /// any component holds this registry's recorder; once per registry at a time.
    pub(crate) fn keep_up(&self, rt: &tokio::runtime::Handle) {
        let Some(p) = &self.prometheus else { return };
        if p.kept_up.swap(true, Ordering::AcqRel) {
            return;
        }
        // Made before the task: dropped with it even if it never runs (its runtime shut
        // down first), so that the next owner starts another.
        let flag = KeptUp(Arc::downgrade(p));
        rt.spawn(upkeep(flag));
    }
}

/// Clears `kept_up` when the upkeep task ends, however it ends (its runtime shut down), so
/// that the next owner starts another.
struct KeptUp(Weak<Prometheus>);

impl Drop for KeptUp {
    fn drop(&mut self) {
        if let Some(p) = self.0.upgrade() {
            p.kept_up.store(false, Ordering::Release);
        }
    }
}

async fn upkeep(flag: KeptUp) {
    let weak = flag.0.clone();
    let mut tick = tokio::time::interval(UPKEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match weak.upgrade() {
            Some(p) => p.handle.run_upkeep(),
            None => return,
        }
    }
}

impl Recorder for Prometheus {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.recorder.describe_counter(key, unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.recorder.describe_gauge(key, unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.recorder.describe_histogram(key, unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.recorder.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.recorder.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.recorder.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use yuebing_rpc::{label, MetricKind};

    #[test]
    fn a_prometheus_registry_renders_what_its_sink_registered() {
        let r = MetricsRegistry::prometheus();
        r.sink()
            .describe(MetricKind::Counter, "yuebing_test_total", "A test count.");
        r.sink()
            .counter("yuebing_test_total", vec![label("kind", "a")])
            .increment(3);
        r.sink()
            .histogram("yuebing_test_seconds", vec![])
            .record(0.0002);
        let text = r.render().unwrap();
        assert!(
            text.contains("# HELP yuebing_test_total A test count.\n"),
            "{text}"
        );
        assert!(
            text.contains("yuebing_test_total{kind=\"a\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("yuebing_test_seconds_bucket{le=\"0.00025\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("yuebing_test_seconds_bucket{le=\"0.0001\"} 0\n"),
            "{text}"
        );
        assert!(MetricsRegistry::off().render().is_none());
        assert!(!MetricsRegistry::off().is_on());
    }
}
