//! Rates between two snapshots of a master's call counters ([`CallStats`]): calls and errors
//! per second, and the 99th-percentile latency of the calls of the interval alone, from the
//! differences of the latency buckets. Pure: no clock, no I/O.

use yuebing_store::master::{CallStats, MethodCalls};

/// What the master served between two snapshots.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Seconds between the snapshots, as the master measured them.
    pub seconds: f64,
    /// Calls finished per second, every method together (less the reader's own calls).
    pub ops: f64,
    /// Calls answered with an error per second.
    pub errors: f64,
    /// 99th-percentile latency of the interval's calls in microseconds: the upper bound of
    /// the latency bucket it falls in (the largest latency the master saw, beyond the last
    /// bucket). `None` when no call finished.
    pub p99_us: Option<u64>,
    /// The methods called in the interval, busiest first.
    pub methods: Vec<MethodRate>,
}

/// One method's share of [`Rates`].
#[derive(Debug, Clone, PartialEq)]
pub struct MethodRate {
    /// The method's name.
    pub method: String,
    /// Calls finished per second.
    pub calls: f64,
    /// Calls answered with an error per second.
    pub errors: f64,
    /// 99th-percentile latency of its calls in the interval (as [`Rates::p99_us`]).
    pub p99_us: Option<u64>,
}

impl Rates {
    /// The rates from `before` to `after`, not counting `own`: calls the reader itself made
    /// in between, by method (its own probes), taken off the counts. `None` where the two do
    /// not subtract: different runs of the master (a restart, another master), no time in
    /// between, other latency buckets, or a counter that went back.
    pub fn between(before: &CallStats, after: &CallStats, own: &[(&str, u64)]) -> Option<Rates> {
        if before.started_ms != after.started_ms
            || before.bucket_bounds_us != after.bucket_bounds_us
            || after.uptime_ms <= before.uptime_ms
        {
            return None;
        }
        let seconds = (after.uptime_ms - before.uptime_ms) as f64 / 1000.0;
        let bounds = &after.bucket_bounds_us;
        let mut all = Interval::new(bounds.len());
        let mut methods = Vec::new();
        for now in &after.methods {
            let zero = MethodCalls::default();
            let then = before
                .methods
                .iter()
                .find(|m| m.method == now.method)
                .unwrap_or(&zero);
            let mine = own
                .iter()
                .filter(|(m, _)| *m == now.method)
                .map(|(_, n)| n)
                .sum::<u64>();
            let d = Interval::of(then, now)?;
            let calls = d.calls.saturating_sub(mine);
            if calls == 0 {
                // Only the reader's own calls (or none): they count nowhere.
                continue;
            }
            all.add(&d);
            methods.push(MethodRate {
                method: now.method.clone(),
                calls: calls as f64 / seconds,
                errors: d.errors as f64 / seconds,
                p99_us: d.p99(bounds, now.max_us),
            });
        }
        methods.sort_by(|a, b| b.calls.total_cmp(&a.calls).then(a.method.cmp(&b.method)));
        let max_us = after.methods.iter().map(|m| m.max_us).max().unwrap_or(0);
        Some(Rates {
            seconds,
            ops: total(methods.iter().map(|m| m.calls)),
            errors: total(methods.iter().map(|m| m.errors)),
            p99_us: all.p99(bounds, max_us),
            methods,
        })
    }

    /// Calls per second of the methods named `names` together (`put_start` and
    /// `batch_put_start` for puts; a batch counts once).
    pub fn calls_of(&self, names: &[&str]) -> f64 {
        total(
            self.methods
                .iter()
                .filter(|m| names.contains(&m.method.as_str()))
                .map(|m| m.calls),
        )
    }
}

/// The sum of `rates`, `0.0` for none (`Sum` of no `f64` is `-0.0`, which prints `-0.0`).
fn total(rates: impl Iterator<Item = f64>) -> f64 {
    rates.fold(0.0, |a, b| a + b)
}

/// Counter differences of one method (or several, added) over an interval.
struct Interval {
    calls: u64,
    errors: u64,
    /// Cumulative, as the snapshots' buckets.
    buckets: Vec<u64>,
}

impl Interval {
    fn new(buckets: usize) -> Interval {
        Interval {
            calls: 0,
            errors: 0,
            buckets: vec![0; buckets],
        }
    }

    /// `now − then`, or `None` where a counter went back (they are not of one run).
    fn of(then: &MethodCalls, now: &MethodCalls) -> Option<Interval> {
        let errors = |m: &MethodCalls| m.errors.values().sum::<u64>();
        let then_buckets = then.buckets.iter().copied().chain(std::iter::repeat(0));
        Some(Interval {
            calls: now.calls.checked_sub(then.calls)?,
            errors: errors(now).checked_sub(errors(then))?,
            buckets: now
                .buckets
                .iter()
                .zip(then_buckets)
                .map(|(n, t)| n.checked_sub(t))
                .collect::<Option<_>>()?,
        })
    }

    fn add(&mut self, other: &Interval) {
        self.calls += other.calls;
        self.errors += other.errors;
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }

    /// The bound of the first bucket holding 99 % of the interval's calls; beyond the last
    /// bucket, `max_us` (but not below the last bound).
    fn p99(&self, bounds: &[u64], max_us: u64) -> Option<u64> {
        if self.calls == 0 {
            return None;
        }
        let wanted = self.calls - self.calls / 100;
        let within = self
            .buckets
            .iter()
            .zip(bounds)
            .find(|(n, _)| **n >= wanted)
            .map(|(_, &bound)| bound);
        Some(within.unwrap_or_else(|| max_us.max(bounds.last().copied().unwrap_or(0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [u64; 4] = [100, 1_000, 10_000, 100_000];

    /// A method's counters: `calls`, `errors` (of code −704), and calls per bucket (not
    /// cumulative; what is left over took longer than the last bound).
    fn method(
        name: &str,
        calls: u64,
        errors: u64,
        per_bucket: [u64; 4],
        max_us: u64,
    ) -> MethodCalls {
        let buckets = per_bucket
            .iter()
            .scan(0, |acc, n| {
                *acc += n;
                Some(*acc)
            })
            .collect();
        MethodCalls {
            method: name.into(),
            calls,
            errors: [(-704, errors)].into_iter().filter(|e| e.1 > 0).collect(),
            max_us,
            buckets,
            ..MethodCalls::default()
        }
    }

    fn snapshot(uptime_ms: u64, methods: Vec<MethodCalls>) -> CallStats {
        CallStats {
            started_ms: 1_700_000_000_000,
            uptime_ms,
            bucket_bounds_us: BOUNDS.to_vec(),
            methods,
        }
    }

    #[test]
    fn rates_are_the_differences_over_the_masters_time_less_the_readers_own_calls() {
        let before = snapshot(
            10_000,
            vec![
                method("call_stats", 4, 0, [4, 0, 0, 0], 50),
                method("put_start", 100, 0, [90, 10, 0, 0], 900),
                method("stats", 4, 0, [4, 0, 0, 0], 80),
            ],
        );
        // Two seconds later: 200 puts (7 within 1 ms, 3 within 10 ms, the rest faster), 100
        // fast gets of which 40 failed (a method called for the first time), and the reader's own
        // stats and call_stats.
        let after = snapshot(
            12_000,
            vec![
                method("call_stats", 5, 0, [5, 0, 0, 0], 50),
                method("get_replica_list", 100, 40, [100, 0, 0, 0], 60),
                method("put_start", 300, 0, [280, 17, 3, 0], 9_000),
                method("stats", 5, 0, [5, 0, 0, 0], 80),
            ],
        );
        let own = [("stats", 1), ("call_stats", 1)];
        let r = Rates::between(&before, &after, &own).unwrap();
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.ops, 150.0);
        assert_eq!(r.errors, 20.0);
        assert_eq!(r.calls_of(&["put_start", "batch_put_start"]), 100.0);
        let names: Vec<_> = r.methods.iter().map(|m| m.method.as_str()).collect();
        assert_eq!(
            names,
            ["put_start", "get_replica_list"],
            "own calls are left out"
        );
        // The puts alone: 200 calls, 197 within 1 ms: the 198th is in the 10 ms bucket.
        assert_eq!(r.methods[0].p99_us, Some(10_000));
        // With the gets, 300 calls: 297 within 1 ms, and 297 is the 99th percentile's.
        assert_eq!(r.p99_us, Some(1_000));
        assert_eq!(r.methods[1].p99_us, Some(100));
        assert_eq!(r.methods[1].errors, 20.0);
    }

    #[test]
    fn beyond_the_last_bucket_the_p99_is_the_largest_latency_seen() {
        let before = snapshot(1_000, vec![method("remove", 0, 0, [0; 4], 0)]);
        let after = snapshot(2_000, vec![method("remove", 3, 0, [1, 0, 0, 0], 7_000_000)]);
        let r = Rates::between(&before, &after, &[]).unwrap();
        assert_eq!(r.p99_us, Some(7_000_000));
        assert_eq!(r.ops, 3.0);
    }

    #[test]
    fn an_idle_interval_has_no_p99_and_counts_from_another_run_do_not_subtract() {
        let before = snapshot(1_000, vec![method("stats", 1, 0, [1, 0, 0, 0], 10)]);
        let idle = snapshot(2_000, vec![method("stats", 2, 0, [2, 0, 0, 0], 10)]);
        let r = Rates::between(&before, &idle, &[("stats", 1)]).unwrap();
        assert_eq!((r.ops, r.errors, r.p99_us), (0.0, 0.0, None));
        assert!(r.ops.is_sign_positive() && r.calls_of(&["get"]).is_sign_positive());
        assert!(r.methods.is_empty());

        let mut restarted = idle.clone();
        restarted.started_ms += 5_000;
        assert_eq!(Rates::between(&before, &restarted, &[]), None);
        // A counter that went back, no time in between, other buckets: no rates either.
        let back = snapshot(2_000, vec![method("stats", 0, 0, [0; 4], 10)]);
        assert_eq!(Rates::between(&before, &back, &[]), None);
        assert_eq!(Rates::between(&idle, &idle, &[]), None);
        let mut rebucketed = idle.clone();
        rebucketed.bucket_bounds_us.push(1_000_000);
        assert_eq!(Rates::between(&before, &rebucketed, &[]), None);
    }
}
