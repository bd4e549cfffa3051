//! Counters a user can read: per method calls, errors by code, latency, in flight.
//!
//! A server keeps one [`Metrics`] for all its services; a client pool keeps one for its calls
//! (keyed by the method name given in [`CallOptions`](crate::CallOptions), or `"call"`).
//!
//! Two readers: this process, through [`Metrics::snapshot`] (quantiles for `yuebing store
//! stats`, served to other processes by the master), and a [`MetricsSink`]'s recorder, which
//! receives `yuebing_rpc_{server,client}_*` families per service and method when the owner's
//! configuration names one. Each method's handles on the sink are registered once, on its first
//! call.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::metrics::Label;
use hdrhistogram::Histogram;

use crate::sink::{label, MetricKind, MetricsSink};

/// Latencies are recorded in microseconds, up to one hour, with 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// One method's counters. The counts are atomics; latencies and error codes sit behind the
/// method's own lock, so two methods never contend.
struct MethodStats {
    calls: AtomicU64,
    in_flight: AtomicU64,
    detail: Mutex<Detail>,
    exported: Exported,
}

/// One method's handles on the sink.
struct Exported {
    names: &'static Names,
    sink: MetricsSink,
    labels: Vec<Label>,
    calls: ::metrics::Counter,
    in_flight: ::metrics::Gauge,
    latency: ::metrics::Histogram,
}

/// The families of one side of a call.
struct Names {
    calls: &'static str,
    errors: &'static str,
    in_flight: &'static str,
    latency: &'static str,
}

/// Which end of a call a registry counts, and so the names of its families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Calls a server handled: `yuebing_rpc_server_*`.
    Server,
    /// Calls a client made: `yuebing_rpc_client_*`.
    Client,
}

/// A server's open connections (clients' pools count none).
const CONNECTIONS: &str = "yuebing_rpc_server_connections";

static SERVER: Names = Names {
    calls: "yuebing_rpc_server_calls_total",
    errors: "yuebing_rpc_server_errors_total",
    in_flight: "yuebing_rpc_server_in_flight",
    latency: "yuebing_rpc_server_latency_seconds",
};

static CLIENT: Names = Names {
    calls: "yuebing_rpc_client_calls_total",
    errors: "yuebing_rpc_client_errors_total",
    in_flight: "yuebing_rpc_client_in_flight",
    latency: "yuebing_rpc_client_latency_seconds",
};

impl Side {
    fn names(self) -> &'static Names {
        match self {
            Side::Server => &SERVER,
            Side::Client => &CLIENT,
        }
    }
}

/// Where a registry's statistics are exported, if anywhere.
struct Export {
    sink: MetricsSink,
    names: &'static Names,
    /// The service of a method named without one (a client pool's calls).
    service: String,
}

impl Export {
    fn off() -> Self {
        Export {
            sink: MetricsSink::off(),
            names: &SERVER,
            service: String::new(),
        }
    }

    /// The handles of `method` (`Service.method`, or a method of `self.service`).
    fn register(&self, method: &str) -> Exported {
        let (service, method) = method
            .split_once('.')
            .unwrap_or((self.service.as_str(), method));
        let labels = vec![
            label("service", service.to_string()),
            label("method", method.to_string()),
        ];
        let (s, n) = (&self.sink, self.names);
        Exported {
            names: n,
            sink: s.clone(),
            calls: s.counter(n.calls, labels.clone()),
            in_flight: s.gauge(n.in_flight, labels.clone()),
            latency: s.histogram(n.latency, labels.clone()),
            labels,
        }
    }

    fn describe(&self) {
        let (s, n) = (&self.sink, self.names);
        s.describe(
            MetricKind::Counter,
            n.calls,
            "Calls finished, by service and method.",
        );
        s.describe(
            MetricKind::Counter,
            n.errors,
            "Calls that failed as a whole, by error code (a server counts a store error in its reply too).",
        );
        s.describe(MetricKind::Gauge, n.in_flight, "Calls running now.");
        if std::ptr::eq(n, &SERVER) {
            s.describe(
                MetricKind::Gauge,
                CONNECTIONS,
                "Connections open now, by the service they asked for.",
            );
        }
        s.describe(MetricKind::Histogram, n.latency, "How long calls took.");
    }
}

struct Detail {
    errors: BTreeMap<i32, u64>,
    latency_us: Histogram<u64>,
}

impl MethodStats {
    fn new(exported: Exported) -> Self {
        MethodStats {
            exported,
            calls: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            detail: Mutex::new(Detail {
                errors: BTreeMap::new(),
                // Bounds are constants that hdrhistogram accepts.
                latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                    .expect("constant histogram bounds are valid"),
            }),
        }
    }
}

/// A registry of per-method statistics. Cheap to update from many tasks.
pub struct Metrics {
    methods: Mutex<HashMap<String, Arc<MethodStats>>>,
    export: Export,
}

impl Default for Metrics {
    /// Statistics for this process only.
    fn default() -> Self {
        Metrics {
            methods: Mutex::default(),
            export: Export::off(),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// One method's statistics at the time of [`Metrics::snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct MethodMetrics {
    /// Method name.
    pub method: String,
    /// Calls finished (successfully or not).
    pub calls: u64,
    /// Calls running now.
    pub in_flight: u64,
    /// Failed calls by error code.
    pub errors: BTreeMap<i32, u64>,
    /// Median latency in microseconds.
    pub p50_us: u64,
    /// 99th-percentile latency in microseconds.
    pub p99_us: u64,
    /// Largest latency in microseconds.
    pub max_us: u64,
    /// Calls that took at most each bound of [`LATENCY_BUCKETS_US`] (cumulative, as a
    /// Prometheus histogram's buckets).
    pub buckets: Vec<u64>,
    /// Sum of all latencies in microseconds (to the histogram's precision).
    pub sum_us: u64,
}

/// Upper bounds of the latency buckets of [`MethodMetrics::buckets`], in microseconds: from
/// 10 µs to 10 s, as the control plane's calls range from a cached look-up to a deadline.
pub const LATENCY_BUCKETS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

impl Metrics {
    /// Statistics that are also exported to `sink` as `side`'s families; a method named
    /// without its service counts as `service`'s.
    pub fn exported(sink: MetricsSink, side: Side, service: impl Into<String>) -> Self {
        let export = Export {
            sink,
            names: side.names(),
            service: service.into(),
        };
        export.describe();
        Metrics {
            methods: Mutex::default(),
            export,
        }
    }

    /// A connection to `service` is open until the returned guard drops (a server's
    /// `yuebing_rpc_server_connections` gauge).
    pub(crate) fn connected(&self, service: &str) -> Connected {
        let gauge = self
            .export
            .sink
            .gauge(CONNECTIONS, vec![label("service", service.to_string())]);
        gauge.increment(1.0);
        Connected(gauge)
    }

    fn stats(&self, method: &str) -> Arc<MethodStats> {
        let mut map = self.methods.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(method) {
            return s.clone();
        }
        map.entry(method.to_string())
            .or_insert_with(|| Arc::new(MethodStats::new(self.export.register(method))))
            .clone()
    }

    /// Starts recording a call to `method` that began at `started`; the call is finished when
    /// the returned guard drops, with the outcome set on it (by default
    /// [`Error::Timeout`](crate::Error::Timeout), which is what a call dropped before it
    /// completed counts as).
    pub(crate) fn record(&self, method: &str, started: Instant) -> Recording {
        let stats = self.stats(method);
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        stats.exported.in_flight.increment(1.0);
        Recording {
            stats,
            started,
            outcome: Err(crate::Error::Timeout.code()),
        }
    }

    /// Records one finished event named `name` that took `took` (and failed with `error`, if
    /// it did): the same statistics as a call's, for work that is not an rpc (a log's fsync).
    pub fn observe(&self, name: &str, took: std::time::Duration, error: Option<i32>) {
        let started = Instant::now()
            .checked_sub(took)
            .unwrap_or_else(Instant::now);
        let mut recording = self.record(name, started);
        recording.outcome = error.map_or(Ok(()), Err);
    }

    /// A copy of every method's statistics, sorted by method name.
    pub fn snapshot(&self) -> Vec<MethodMetrics> {
        let map = self.methods.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<MethodMetrics> = map
            .iter()
            .map(|(name, s)| {
                let d = s.detail.lock().unwrap_or_else(|p| p.into_inner());
                MethodMetrics {
                    method: name.clone(),
                    calls: s.calls.load(Ordering::Relaxed),
                    in_flight: s.in_flight.load(Ordering::Relaxed),
                    errors: d.errors.clone(),
                    p50_us: d.latency_us.value_at_quantile(0.5),
                    p99_us: d.latency_us.value_at_quantile(0.99),
                    max_us: d.latency_us.max(),
                    buckets: LATENCY_BUCKETS_US
                        .iter()
                        .map(|&le| d.latency_us.count_between(0, le))
                        .collect(),
                    sum_us: d
                        .latency_us
                        .iter_recorded()
                        .map(|v| v.value_iterated_to().saturating_mul(v.count_at_value()))
                        .fold(0u64, u64::saturating_add),
                }
            })
            .collect();
        out.sort_by(|a, b| a.method.cmp(&b.method));
        out
    }

    /// The statistics of one method, if it was ever called.
    pub fn method(&self, method: &str) -> Option<MethodMetrics> {
        self.snapshot().into_iter().find(|m| m.method == method)
    }
}

/// An open connection, counted until dropped; see [`Metrics::connected`].
pub(crate) struct Connected(::metrics::Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// One call being recorded; see [`Metrics::record`].
pub(crate) struct Recording {
    stats: Arc<MethodStats>,
    started: Instant,
    /// `Ok`, or the error code, of the call.
    pub(crate) outcome: Result<(), i32>,
}

impl Recording {
    /// Sets the outcome from a result.
    pub(crate) fn set<T>(&mut self, r: &Result<T, crate::Error>) {
        self.outcome = r.as_ref().map(|_| ()).map_err(crate::Error::code);
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let s = &self.stats;
        let took = self.started.elapsed();
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        s.calls.fetch_add(1, Ordering::Relaxed);
        let e = &s.exported;
        e.in_flight.decrement(1.0);
        e.calls.increment(1);
        e.latency.record(took.as_secs_f64());
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut d = s.detail.lock().unwrap_or_else(|p| p.into_inner());
        d.latency_us.saturating_record(us);
        if let Err(code) = self.outcome {
            *d.errors.entry(code).or_default() += 1;
            // Errors are rare: their handle is looked up when one happens.
            let mut labels = e.labels.clone();
            labels.push(label("code", code.to_string()));
            e.sink.counter(e.names.errors, labels).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_calls_errors_and_latency() {
        let m = Metrics::default();
        let now = Instant::now();
        let mut a = m.record("get", now - Duration::from_micros(100));
        let mut b = m.record("get", now - Duration::from_micros(300));
        assert_eq!(m.method("get").unwrap().in_flight, 2);
        a.outcome = Ok(());
        b.outcome = Err(-2003);
        drop((a, b));
        let s = m.method("get").unwrap();
        assert_eq!((s.calls, s.in_flight), (2, 0));
        assert_eq!(s.errors.get(&-2003), Some(&1));
        assert!(s.p50_us >= 100 && s.max_us >= 300, "{s:?}");
        // Cumulative buckets: neither call within 50 µs, both within 1 s.
        let at = |le| LATENCY_BUCKETS_US.iter().position(|&b| b == le).unwrap();
        assert_eq!(
            (s.buckets[at(50)], s.buckets[at(1_000_000)]),
            (0, 2),
            "{s:?}"
        );
        assert!(s.buckets.windows(2).all(|w| w[0] <= w[1]));
        assert!(s.sum_us >= 400, "{s:?}");
        m.observe("fsync", Duration::from_millis(3), None);
        let fsync = m.method("fsync").unwrap();
        assert_eq!((fsync.calls, fsync.in_flight), (1, 0));
        assert!(fsync.errors.is_empty() && fsync.sum_us >= 3000, "{fsync:?}");
        assert!(m.method("put").is_none());
    }
}
