//! Where a component's metrics go: a [`metrics`](::metrics) recorder chosen by the application.
//!
//! Libraries never install a process-global recorder: a server, a pool or an engine takes a
//! [`MetricsSink`] in its configuration (off by default), registers its handles on it once
//! (per method, per transport) and updates them on its hot path, an atomic operation each.
//! The `yuebing` processes hand every component the same Prometheus recorder; an embedding
//! application passes its own (any [`metrics::Recorder`](::metrics::Recorder)).

use std::sync::Arc;

use ::metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString};

/// The metadata every yuebing metric is registered with: its target names the crate family.
static METADATA: Metadata<'static> = Metadata::new("yuebing", ::metrics::Level::INFO, None);

/// A handle on a recorder, or nothing: components register their metrics through it.
#[derive(Clone, Default)]
pub struct MetricsSink {
    recorder: Option<Arc<dyn Recorder + Send + Sync>>,
}

impl std::fmt::Debug for MetricsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsSink")
            .field("on", &self.is_on())
            .finish()
    }
}

/// A metric's kind, for its description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A count that only grows (`_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of observations (in seconds, for yuebing's).
    Histogram,
}

impl MetricsSink {
    /// Metrics go to `recorder`.
    pub fn new(recorder: Arc<dyn Recorder + Send + Sync>) -> Self {
        MetricsSink {
            recorder: Some(recorder),
        }
    }

    /// Metrics go nowhere: every handle is a no-op (the default).
    pub fn off() -> Self {
        MetricsSink::default()
    }

    /// Whether a recorder receives the metrics.
    pub fn is_on(&self) -> bool {
        self.recorder.is_some()
    }

    /// Describes the metric `name` (its `# HELP` line): once per name, before or after its
    /// handles are registered.
    pub fn describe(&self, kind: MetricKind, name: &'static str, help: &'static str) {
        let Some(r) = &self.recorder else { return };
        let (name, help) = (KeyName::from_const_str(name), SharedString::const_str(help));
        match kind {
            MetricKind::Counter => r.describe_counter(name, None, help),
            MetricKind::Gauge => r.describe_gauge(name, None, help),
            MetricKind::Histogram => r.describe_histogram(name, None, help),
        }
    }

    /// The counter `name` with `labels`; register once and keep the handle.
    pub fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        match &self.recorder {
            Some(r) => r.register_counter(&Key::from_parts(name, labels), &METADATA),
            None => Counter::noop(),
        }
    }

    /// The gauge `name` with `labels`; register once and keep the handle.
    pub fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        match &self.recorder {
            Some(r) => r.register_gauge(&Key::from_parts(name, labels), &METADATA),
            None => Gauge::noop(),
        }
    }

    /// The histogram `name` with `labels`; register once and keep the handle.
    pub fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        match &self.recorder {
            Some(r) => r.register_histogram(&Key::from_parts(name, labels), &METADATA),
            None => Histogram::noop(),
        }
    }
}

/// A label, for [`MetricsSink`]'s registrations.
pub fn label(key: &'static str, value: impl Into<SharedString>) -> Label {
    Label::new(key, value)
}
