//! The samples of a run, their medians over the repetitions, and both outputs: the JSON rows of
//! the conventions and the human table (one line per operation, calls in flight and mode, with
//! the ratio to the baseline mode and the targets' verdicts).

use std::collections::HashMap;

use super::mode::Mode;
use super::ops::Op;
use super::targets::{Check, TARGETS};
use crate::bench::harness::{median_spread, Sample};
use crate::bench::report::{aligned, Row};

/// The workload's name in rows: the operation and the calls in flight.
pub(super) fn case(op: Op, inflight: usize) -> String {
    format!("{} x{inflight}", op.name())
}

/// Every sample of a run, in the order of the run's settings.
#[derive(Debug, Default)]
pub(super) struct Results {
    ops: Vec<Op>,
    inflight: Vec<usize>,
    modes: Vec<Mode>,
    samples: HashMap<(Op, usize, Mode), Vec<Sample>>,
    /// Per number of pairs.
    pingpong: HashMap<usize, Vec<Sample>>,
}

const PINGPONG: &str = "condvar ping-pong";

impl Results {
    /// Empty results of a run of `ops` × `inflight` × `modes`.
    pub(super) fn new(ops: &[Op], inflight: &[usize], modes: &[Mode]) -> Results {
        Results {
            ops: ops.to_vec(),
            inflight: inflight.to_vec(),
            modes: modes.to_vec(),
            ..Results::default()
        }
    }

    /// One repetition's sample of `op` with `inflight` in flight through `mode`.
    pub(super) fn add(&mut self, op: Op, inflight: usize, mode: Mode, sample: Sample) {
        self.samples
            .entry((op, inflight, mode))
            .or_default()
            .push(sample);
    }

    /// One repetition's condvar ping-pong of `pairs` pairs (latencies per round trip).
    pub(super) fn add_pingpong(&mut self, pairs: usize, sample: Sample) {
        self.pingpong.entry(pairs).or_default().push(sample);
    }

    fn stat(
        &self,
        op: Op,
        inflight: usize,
        mode: Mode,
        f: fn(&Sample) -> f64,
    ) -> Option<(f64, f64)> {
        let of = self.samples.get(&(op, inflight, mode))?;
        Some(median_spread(&of.iter().map(f).collect::<Vec<_>>()))
    }

    /// Calls per second: median and spread.
    pub(super) fn rate(&self, op: Op, inflight: usize, mode: Mode) -> Option<(f64, f64)> {
        self.stat(op, inflight, mode, Sample::ops_per_sec)
    }

    /// How much longer `mode`'s p50 is than `against`'s: the median and spread of the
    /// differences within each repetition (the two ran back to back).
    pub(super) fn p50_over(
        &self,
        op: Op,
        inflight: usize,
        mode: Mode,
        against: Mode,
    ) -> Option<(f64, f64)> {
        let a = self.samples.get(&(op, inflight, mode))?;
        let b = self.samples.get(&(op, inflight, against))?;
        let over: Vec<f64> = a.iter().zip(b).map(|(a, b)| a.p50_us - b.p50_us).collect();
        Some(median_spread(&over))
    }

    /// One thread wake-up: half the p50 round trip of a lone ping-pong pair (median and
    /// spread).
    pub(super) fn wakeup_us(&self) -> Option<(f64, f64)> {
        self.pingpong_stat(1, |s| s.p50_us / 2.0)
    }

    fn pingpong_stat(&self, pairs: usize, f: fn(&Sample) -> f64) -> Option<(f64, f64)> {
        let of = self.pingpong.get(&pairs)?;
        Some(median_spread(&of.iter().map(f).collect::<Vec<_>>()))
    }

    /// The numbers of ping-pong pairs measured, in order.
    fn pingpong_pairs(&self) -> Vec<usize> {
        let mut pairs: Vec<usize> = self.pingpong.keys().copied().collect();
        pairs.sort_unstable();
        pairs
    }

    /// Every target checked for every operation measured.
    fn checks(&self) -> Vec<Check> {
        self.ops
            .iter()
            .flat_map(|&op| TARGETS.iter().filter_map(move |t| t.check(self, op)))
            .collect()
    }

    /// The cells measured, in table order.
    fn cells(&self) -> impl Iterator<Item = (Op, usize, Mode)> + '_ {
        self.ops.iter().flat_map(move |&op| {
            self.inflight.iter().flat_map(move |&n| {
                self.modes
                    .iter()
                    .filter(move |&&m| self.samples.contains_key(&(op, n, m)))
                    .map(move |&m| (op, n, m))
            })
        })
    }

    /// The JSON rows: per cell ops/s (against the baseline mode), p50_us and p99_us; the
    /// targets' rows (a target's ops/s row replaces the plain one); the ping-pong's rows.
    pub(super) fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for pairs in self.pingpong_pairs() {
            let (case, rt) = (format!("{PINGPONG} x{pairs}"), "round-trip");
            let stat = |f| self.pingpong_stat(pairs, f).unwrap_or((f64::NAN, f64::NAN));
            rows.push(Row::new(&case, rt, "ops/s", stat(Sample::ops_per_sec)));
            rows.push(Row::new(&case, rt, "p50_us", stat(|s| s.p50_us)));
            rows.push(Row::new(&case, rt, "p99_us", stat(|s| s.p99_us)));
            if pairs == 1 {
                rows.push(Row::new(
                    &case,
                    "one-way wake-up",
                    "p50_us",
                    stat(|s| s.p50_us / 2.0),
                ));
            }
        }
        for (op, n, mode) in self.cells() {
            let case = case(op, n);
            let Some(rate) = self.rate(op, n, mode) else {
                continue;
            };
            let mut row = Row::new(&case, mode.name(), "ops/s", rate);
            if let Some(base) = self
                .rate(op, n, Mode::BASELINE)
                .filter(|_| mode != Mode::BASELINE)
            {
                row = row.against(Mode::BASELINE.name(), base.0);
            }
            rows.push(row);
            if let Some(p50) = self.stat(op, n, mode, |s| s.p50_us) {
                rows.push(Row::new(&case, mode.name(), "p50_us", p50));
            }
            if let Some(p99) = self.stat(op, n, mode, |s| s.p99_us) {
                rows.push(Row::new(&case, mode.name(), "p99_us", p99));
            }
        }
        for check in self.checks() {
            let r = check.row;
            let same = rows.iter().position(|x| {
                (&x.case, &x.variant, &x.metric, &x.baseline)
                    == (&r.case, &r.variant, &r.metric, &r.baseline)
            });
            match same {
                Some(i) => rows[i] = r,
                None => rows.push(r),
            }
        }
        rows
    }

    /// The human table.
    pub(super) fn table(&self) -> String {
        let header = [
            "op",
            "in flight",
            "mode",
            "calls/s",
            "±",
            "p50 us",
            "±",
            "p99 us",
            "vs async",
            "target",
            "got",
            "pass",
        ];
        let mut cells: Vec<Vec<String>> = Vec::new();
        for pairs in self.pingpong_pairs() {
            let stat = |f| self.pingpong_stat(pairs, f).unwrap_or((f64::NAN, f64::NAN));
            let (rate, p50, p99) = (
                stat(Sample::ops_per_sec),
                stat(|s| s.p50_us),
                stat(|s| s.p99_us),
            );
            let mut line = vec![PINGPONG.into(), pairs.to_string(), "round trip".into()];
            line.extend([int(rate.0), int(rate.1), us(p50.0), us(p50.1), us(p99.0)]);
            cells.push(line);
            if pairs == 1 {
                let wake = stat(|s| s.p50_us / 2.0);
                let mut line = vec![PINGPONG.into(), "1".into(), "one-way wake-up".into()];
                line.extend([String::new(), String::new(), us(wake.0), us(wake.1)]);
                cells.push(line);
            }
        }
        let checks = self.checks();
        for (op, n, mode) in self.cells() {
            let (Some(rate), Some(p50), Some(p99)) = (
                self.rate(op, n, mode),
                self.stat(op, n, mode, |s| s.p50_us),
                self.stat(op, n, mode, |s| s.p99_us),
            ) else {
                continue;
            };
            let ratio = self
                .rate(op, n, Mode::BASELINE)
                .map(|base| format!("{:.2}x", rate.0 / base.0))
                .unwrap_or_default();
            let mine: Vec<&Check> = checks
                .iter()
                .filter(|c| c.mode == mode && c.inflight == n && c.row.case == case(op, n))
                .collect();
            let join =
                |f: fn(&Check) -> String| mine.iter().map(|c| f(c)).collect::<Vec<_>>().join("; ");
            cells.push(vec![
                op.name().into(),
                n.to_string(),
                mode.name().into(),
                int(rate.0),
                int(rate.1),
                us(p50.0),
                us(p50.1),
                us(p99.0),
                ratio,
                join(|c| c.target.clone()),
                join(|c| c.got.clone()),
                join(|c| if c.pass { "pass" } else { "FAIL" }.into()),
            ]);
        }
        aligned(&header, &cells, |i| (1..=8).contains(&i) && i != 2)
    }
}

fn int(v: f64) -> String {
    format!("{v:.0}")
}

fn us(v: f64) -> String {
    format!("{v:.1}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn sample(ops: u64, p50_us: f64) -> Sample {
        Sample {
            ops,
            elapsed: Duration::from_secs(1),
            p50_us,
            p99_us: p50_us * 2.0,
        }
    }

    #[test]
    fn ratios_and_targets_reach_rows_and_table() {
        let modes = [Mode::Async, Mode::Blocking, Mode::Callback];
        let mut r = Results::new(&[Op::Health], &[1, 64], &modes);
        r.add_pingpong(1, sample(10_000, 40.0));
        r.add_pingpong(64, sample(90_000, 1000.0));
        r.add(Op::Health, 1, Mode::Async, sample(20_000, 50.0));
        r.add(Op::Health, 1, Mode::Blocking, sample(10_000, 80.0));
        r.add(Op::Health, 64, Mode::Async, sample(100_000, 600.0));
        r.add(Op::Health, 64, Mode::Blocking, sample(95_000, 640.0));
        r.add(Op::Health, 64, Mode::Callback, sample(80_000, 700.0));
        let rows = r.rows();
        let find = |variant: &str, case: &str, metric: &str| {
            rows.iter()
                .find(|x| x.variant == variant && x.case == case && x.metric == metric)
                .unwrap_or_else(|| panic!("no {variant} {case} {metric}"))
        };
        let b = find("blocking", "health x64", "ops/s");
        assert_eq!((b.ratio, b.pass), (Some(0.95), Some(true)));
        assert_eq!(find("callback", "health x64", "ops/s").pass, Some(false));
        // 80 - 50 = 30 us over async, against one wake-up (20) + 5.
        let lat = find("blocking", "health x1", "p50_us_over_async");
        assert_eq!((lat.value, lat.baseline_value), (30.0, Some(25.0)));
        assert_eq!(lat.pass, Some(false));
        assert_eq!(
            find("one-way wake-up", "condvar ping-pong x1", "p50_us").value,
            20.0
        );
        assert_eq!(
            find("round-trip", "condvar ping-pong x64", "ops/s").value,
            90_000.0
        );
        // Five cells and two ping-pongs; the targets' rows replaced the plain ones.
        assert_eq!(rows.iter().filter(|x| x.metric == "ops/s").count(), 7);
        let t = r.table();
        assert!(
            t.contains("0.95x") && t.contains("+30.0 us") && t.contains("FAIL"),
            "{t}"
        );
        assert_eq!(t.lines().count(), 1 + 3 + 5, "{t}");
    }
}
