//! Counters a user can read: per method calls, errors by code, latency, in flight.
//!
//! A server keeps one [`Metrics`] for all its services; a client pool keeps one for its calls
//! (keyed by the method name given in [`CallOptions`](crate::CallOptions), or `"call"`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, up to one hour, with 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;

struct MethodStats {
    calls: u64,
    in_flight: u64,
    errors: BTreeMap<i32, u64>,
    latency_us: Histogram<u64>,
}

impl MethodStats {
    fn new() -> Self {
        MethodStats {
            calls: 0,
            in_flight: 0,
            errors: BTreeMap::new(),
            // Bounds are constants that hdrhistogram accepts.
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("constant histogram bounds are valid"),
        }
    }
}

/// A registry of per-method statistics. Cheap to update from many tasks.
#[derive(Default)]
pub struct Metrics {
    methods: Mutex<HashMap<String, MethodStats>>,
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
}

impl Metrics {
    fn with<R>(&self, method: &str, f: impl FnOnce(&mut MethodStats) -> R) -> R {
        let mut map = self.methods.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get_mut(method) {
            return f(s);
        }
        f(map
            .entry(method.to_string())
            .or_insert_with(MethodStats::new))
    }

    /// Marks a call to `method` as started.
    pub(crate) fn start(&self, method: &str) {
        self.with(method, |s| s.in_flight += 1);
    }

    /// Marks a call as finished after `elapsed`, with `Ok` or the error code.
    pub(crate) fn finish(&self, method: &str, elapsed: Duration, outcome: Result<(), i32>) {
        self.with(method, |s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.calls += 1;
            s.latency_us
                .saturating_record(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
            if let Err(code) = outcome {
                *s.errors.entry(code).or_default() += 1;
            }
        });
    }

    /// Starts recording a call to `method`; the call is finished when the returned guard drops,
    /// with the outcome set on it (by default [`Error::Timeout`](crate::Error::Timeout), which is
    /// what a call dropped before it completed counts as).
    pub(crate) fn record<'a>(&'a self, method: &'a str) -> Recording<'a> {
        self.start(method);
        Recording {
            metrics: self,
            method,
            started: Instant::now(),
            outcome: Err(crate::Error::Timeout.code()),
        }
    }

    /// A copy of every method's statistics, sorted by method name.
    pub fn snapshot(&self) -> Vec<MethodMetrics> {
        let map = self.methods.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<MethodMetrics> = map
            .iter()
            .map(|(name, s)| MethodMetrics {
                method: name.clone(),
                calls: s.calls,
                in_flight: s.in_flight,
                errors: s.errors.clone(),
                p50_us: s.latency_us.value_at_quantile(0.5),
                p99_us: s.latency_us.value_at_quantile(0.99),
                max_us: s.latency_us.max(),
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

/// One call being recorded; see [`Metrics::record`].
pub(crate) struct Recording<'a> {
    metrics: &'a Metrics,
    method: &'a str,
    started: Instant,
    /// `Ok`, or the error code, of the call.
    pub(crate) outcome: Result<(), i32>,
}

impl Recording<'_> {
    /// Sets the outcome from a result.
    pub(crate) fn set<T>(&mut self, r: &Result<T, crate::Error>) {
        self.outcome = r.as_ref().map(|_| ()).map_err(crate::Error::code);
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        self.metrics
            .finish(self.method, self.started.elapsed(), self.outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_errors_and_latency() {
        let m = Metrics::default();
        m.start("get");
        m.start("get");
        assert_eq!(m.method("get").unwrap().in_flight, 2);
        m.finish("get", Duration::from_micros(100), Ok(()));
        m.finish("get", Duration::from_micros(300), Err(-2003));
        let s = m.method("get").unwrap();
        assert_eq!((s.calls, s.in_flight), (2, 0));
        assert_eq!(s.errors.get(&-2003), Some(&1));
        assert!(s.p50_us >= 100 && s.max_us >= 300, "{s:?}");
        assert!(m.method("put").is_none());
    }
}
