//! Closed-loop load: `inflight` workers each run one operation after another until time is up.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What one measurement saw.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Operations completed.
    pub ops: u64,
    /// Wall time of the measurement.
    pub elapsed: Duration,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th-percentile latency, µs.
    pub p99_us: f64,
}

impl Sample {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

fn histogram() -> Histogram<u64> {
    // Constant bounds that hdrhistogram accepts: 1 ns .. 100 s.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// What one worker of a closed loop saw: its latencies, its count, and when its last counted
/// operation ended. Workers' recorders are merged into one [`Sample`].
#[derive(Debug, Clone)]
pub struct Recorder {
    hist: Histogram<u64>,
    ops: u64,
    last: Option<Instant>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hist: histogram(),
            ops: 0,
            last: None,
        }
    }
}

impl Recorder {
    /// Counts one operation that ran from `t0` to `t1`.
    pub fn record(&mut self, t0: Instant, t1: Instant) {
        self.ops += 1;
        self.hist.saturating_record((t1 - t0).as_nanos() as u64);
        self.last = Some(self.last.map_or(t1, |l| l.max(t1)));
    }

    /// Adds another worker's operations.
    pub fn merge(&mut self, other: &Recorder) {
        self.ops += other.ops;
        self.hist.add(&other.hist).expect("same histogram bounds");
        self.last = self.last.max(other.last);
    }

    /// When the last counted operation ended, if any was counted.
    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    /// The operations so far, as a sample over `elapsed`.
    pub fn sample(&self, elapsed: Duration) -> Sample {
        Sample {
            ops: self.ops,
            elapsed,
            p50_us: self.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: self.hist.value_at_quantile(0.99) as f64 / 1000.0,
        }
    }
}

/// Runs `op` from `inflight` concurrent tasks for `duration` (after `warmup`), and returns the
/// count and latencies. Each task measures at least one operation, even one that first runs
/// after the time is up (a loaded machine may start it late): a measurement never comes back
/// empty, and its rate is over the time it really took. An error from `op` ends the
/// measurement with that error.
pub async fn closed_loop<F, Fut, E>(
    inflight: usize,
    warmup: Duration,
    duration: Duration,
    op: F,
) -> Result<Sample, E>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Send + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now() + warmup;
    let end = start + duration;
    let workers: Vec<_> = (0..inflight)
        .map(|w| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut rec = Recorder::default();
                loop {
                    let t0 = Instant::now();
                    if t0 >= end && rec.ops > 0 {
                        break;
                    }
                    op(w).await?;
                    if t0 >= start {
                        rec.record(t0, Instant::now());
                    }
                }
                Ok::<_, E>(rec)
            })
        })
        .collect();
    let mut all = Recorder::default();
    for w in workers {
        // A worker task only fails by panicking, which is a bug in the benchmark itself.
        all.merge(&w.await.expect("benchmark worker panicked")?);
    }
    let took = all.last().map_or(duration, |last| last.max(end) - start);
    Ok(all.sample(took))
}

/// The median and the spread (max − min) of `values`.
pub fn median_spread(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[v.len() - 1] - v[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median_spread(&[3.0, 1.0, 2.0]), (2.0, 2.0));
        assert_eq!(median_spread(&[4.0, 1.0, 2.0, 3.0]), (2.5, 3.0));
        assert!(median_spread(&[]).0.is_nan());
    }

    #[test]
    fn recorders_merge_counts_latencies_and_the_last_end() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Recorder::default(), Recorder::default());
        a.record(t0, t0 + Duration::from_micros(10));
        b.record(t0, t0 + Duration::from_micros(30));
        b.record(t0, t0 + Duration::from_micros(30));
        a.merge(&b);
        assert_eq!(a.last(), Some(t0 + Duration::from_micros(30)));
        let s = a.sample(Duration::from_secs(1));
        assert_eq!(s.ops, 3);
        assert!((s.p50_us - 30.0).abs() < 0.1, "{s:?}");
        assert_eq!(Recorder::default().last(), None);
    }

    #[tokio::test]
    async fn closed_loop_counts_operations() {
        let s = closed_loop(4, Duration::ZERO, Duration::from_millis(50), |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
        assert!(s.ops >= 4, "{s:?}");
        assert!(s.p50_us >= 5000.0, "{s:?}");
    }

    #[tokio::test]
    async fn a_worker_started_after_the_time_is_up_still_measures_one_operation() {
        let s = closed_loop(2, Duration::ZERO, Duration::ZERO, |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
        assert_eq!(s.ops, 2, "{s:?}");
        assert!(s.elapsed >= Duration::from_millis(5), "{s:?}");
        assert!(s.p50_us >= 5000.0, "{s:?}");
    }
}
