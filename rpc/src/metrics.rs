//! Counters a user can read: per method calls, errors by code, latency, in flight.
//!
//! A server keeps one [`Metrics`] for all its services; a client pool keeps one for its calls
//! (keyed by the method name given in [`CallOptions`](crate::CallOptions), or `"call"`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, up to one hour, with 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// One method's counters. The counts are atomics; latencies and error codes sit behind the
/// method's own lock, so two methods never contend.
struct MethodStats {
    calls: AtomicU64,
    in_flight: AtomicU64,
    detail: Mutex<Detail>,
}

struct Detail {
    errors: BTreeMap<i32, u64>,
    latency_us: Histogram<u64>,
}

impl MethodStats {
    fn new() -> Self {
        MethodStats {
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
#[derive(Default)]
pub struct Metrics {
    methods: Mutex<HashMap<String, Arc<MethodStats>>>,
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
    fn stats(&self, method: &str) -> Arc<MethodStats> {
        let mut map = self.methods.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(method) {
            return s.clone();
        }
        map.entry(method.to_string())
            .or_insert_with(|| Arc::new(MethodStats::new()))
            .clone()
    }

    /// Starts recording a call to `method` that began at `started`; the call is finished when
    /// the returned guard drops, with the outcome set on it (by default
    /// [`Error::Timeout`](crate::Error::Timeout), which is what a call dropped before it
    /// completed counts as).
    pub(crate) fn record(&self, method: &str, started: Instant) -> Recording {
        let stats = self.stats(method);
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
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

    /// Snapshots of several registries (a client's pools, one per server) as one: counts,
    /// errors, buckets and sums added by method; the quantiles and the maximum are the
    /// largest of the parts' (an upper bound, not the merged quantile).
    pub fn merged(parts: impl IntoIterator<Item = Vec<MethodMetrics>>) -> Vec<MethodMetrics> {
        let mut by_method: BTreeMap<String, MethodMetrics> = BTreeMap::new();
        for m in parts.into_iter().flatten() {
            match by_method.get_mut(&m.method) {
                None => {
                    by_method.insert(m.method.clone(), m);
                }
                Some(acc) => {
                    acc.calls += m.calls;
                    acc.in_flight += m.in_flight;
                    for (code, n) in m.errors {
                        *acc.errors.entry(code).or_default() += n;
                    }
                    acc.p50_us = acc.p50_us.max(m.p50_us);
                    acc.p99_us = acc.p99_us.max(m.p99_us);
                    acc.max_us = acc.max_us.max(m.max_us);
                    for (a, b) in acc.buckets.iter_mut().zip(m.buckets) {
                        *a += b;
                    }
                    acc.sum_us = acc.sum_us.saturating_add(m.sum_us);
                }
            }
        }
        by_method.into_values().collect()
    }

    /// The statistics of one method, if it was ever called.
    pub fn method(&self, method: &str) -> Option<MethodMetrics> {
        self.snapshot().into_iter().find(|m| m.method == method)
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
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        s.calls.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut d = s.detail.lock().unwrap_or_else(|p| p.into_inner());
        d.latency_us.saturating_record(us);
        if let Err(code) = self.outcome {
            *d.errors.entry(code).or_default() += 1;
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
        let other = Metrics::default();
        drop(other.record("get", now));
        drop(other.record("put", now));
        let merged = Metrics::merged([m.snapshot(), other.snapshot()]);
        let names: Vec<_> = merged
            .iter()
            .map(|m| (m.method.as_str(), m.calls))
            .collect();
        assert_eq!(names, [("fsync", 1), ("get", 3), ("put", 1)]);
        assert_eq!(merged[1].errors.get(&-2003), Some(&1));
        assert_eq!(merged[1].buckets.last(), Some(&3));
        assert!(m.method("put").is_none());
    }
}
