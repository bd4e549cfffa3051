//! The waiter under background load (`yuebing bench bridge --loops 0,1,2`): the sequential
//! blocking 4 KiB `get` and 1 MiB `get_into` (one plain thread, one call in flight) with each
//! [`Waiter`] in turn, interleaved, while N `nice -n 19` busy loops run — processes this bench
//! starts before each group of measurements and kills after it, the ordinary batch work of a
//! shared host. Reported: medians over the repetitions of p50 and p99, each waiter against the
//! first (today's) at the same load, and the targets for the second (the new one): its
//! median under the heaviest load at most 2x its median without load, and without load within
//! 10 % of the first's.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use yuebing_bridge::Waiter;

use super::load::Window;
use super::mode::Mode;
use super::ops::Op;
use super::rig::Rig;
use crate::bench::harness::{median_spread, Sample};
use crate::bench::report::{aligned, format_value, Row};

/// What the study measures.
#[derive(Debug, Clone)]
pub struct WaiterStudy {
    /// Numbers of busy loops, one group of measurements each.
    pub loops: Vec<usize>,
    /// The waiters compared: the first is the baseline of the others' ratios.
    pub waiters: Vec<Waiter>,
}

/// A statistic of a sample, by its metric's name.
type Stat = (&'static str, fn(&Sample) -> f64);

/// The operations of the study.
const OPS: [Op; 2] = [Op::Get, Op::GetInto];

impl WaiterStudy {
    /// Measurements per repetition.
    pub fn measurements(&self) -> usize {
        self.loops.len() * OPS.len() * self.waiters.len()
    }
}

/// A waiter's name in tables, JSON and `--waiters`: `legacy` (today's: yields for 300 µs),
/// `spin:N` (spins N µs with a spin-loop hint), `yield:N`.
pub fn waiter_name(w: Waiter) -> String {
    match w {
        Waiter::LEGACY => "legacy".into(),
        Waiter::Spin(d) => format!("spin:{}", d.as_micros()),
        Waiter::Yield(d) => format!("yield:{}", d.as_micros()),
    }
}

/// Parses `--waiters`: names as [`waiter_name`] writes them, and `default` (the bridge's).
pub fn parse_waiters(list: &str) -> Result<Vec<Waiter>, String> {
    let micros = |n: &str, whole: &str| {
        n.parse::<u64>()
            .map(Duration::from_micros)
            .map_err(|_| format!("--waiters {whole:?}: expected a number of microseconds"))
    };
    list.split(',')
        .map(|w| match w.split_once(':') {
            None if w == "legacy" => Ok(Waiter::LEGACY),
            None if w == "default" => Ok(Waiter::default()),
            Some(("spin", n)) => micros(n, w).map(Waiter::Spin),
            Some(("yield", n)) => micros(n, w).map(Waiter::Yield),
            _ => Err(format!(
                "--waiters {w:?}: expected legacy, default, spin:MICROS or yield:MICROS"
            )),
        })
        .collect()
}

/// `n` busy loops at the lowest priority, killed when dropped.
struct Background(Vec<Child>);

impl Background {
    fn start(n: usize) -> Result<Background, String> {
        let mut loops = Background(Vec::with_capacity(n));
        for _ in 0..n {
            let child = Command::new("nice")
                .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a busy loop (nice, sh): {e}"))?;
            loops.0.push(child);
        }
        Ok(loops)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The study's samples: per (loops, op, waiter index), one per repetition.
#[derive(Debug, Default)]
pub(super) struct Study {
    cfg: Option<WaiterStudy>,
    samples: std::collections::HashMap<(usize, Op, usize), Vec<Sample>>,
}

impl Study {
    /// Runs `repeat` repetitions; `window` makes each measurement's window.
    pub(super) fn run(
        cfg: &WaiterStudy,
        rig: &Arc<Rig>,
        repeat: u32,
        window: impl Fn() -> Arc<Window>,
        tick: &mut impl FnMut(&str),
    ) -> Result<Study, String> {
        let mut study = Study {
            cfg: Some(cfg.clone()),
            ..Study::default()
        };
        let before = rig.bridge.waiter();
        let measured = (|| {
            for rep in 0..repeat as usize {
                for &loops in &cfg.loops {
                    let _background = Background::start(loops)?;
                    for op in OPS {
                        // Rotated, so that no waiter always runs first after the loops start.
                        for k in 0..cfg.waiters.len() {
                            let w = (k + rep) % cfg.waiters.len();
                            rig.bridge.set_waiter(cfg.waiters[w]);
                            let sample = Mode::Blocking.measure(rig, op, 1, window())?;
                            study
                                .samples
                                .entry((loops, op, w))
                                .or_default()
                                .push(sample);
                            let name = waiter_name(cfg.waiters[w]);
                            tick(&format!("{} x1 {name}, {loops} loop(s)", op.name()));
                        }
                    }
                }
            }
            Ok::<_, String>(())
        })();
        rig.bridge.set_waiter(before);
        measured.map(|()| study)
    }

    fn stat(&self, key: (usize, Op, usize), f: fn(&Sample) -> f64) -> (f64, f64) {
        let values: Vec<f64> = self
            .samples
            .get(&key)
            .into_iter()
            .flatten()
            .map(f)
            .collect();
        median_spread(&values)
    }

    /// The JSON rows and the table.
    pub(super) fn report(&self) -> (Vec<Row>, String) {
        let Some(cfg) = &self.cfg else {
            return (Vec::new(), String::new());
        };
        let (mut rows, mut cells) = (Vec::new(), Vec::new());
        let stats: [Stat; 2] = [("p50_us", |s| s.p50_us), ("p99_us", |s| s.p99_us)];
        let (lightest, heaviest) = (cfg.loops.iter().min(), cfg.loops.iter().max());
        for op in OPS {
            for &loops in &cfg.loops {
                let case = format!("{} x1 blocking, {loops} busy loop(s)", op.name());
                for (w, &waiter) in cfg.waiters.iter().enumerate() {
                    let name = waiter_name(waiter);
                    let mut line = vec![case.clone(), name.clone()];
                    for (metric, f) in stats {
                        let value = self.stat((loops, op, w), f);
                        let mut row = Row::new(&case, &name, metric, value);
                        if w > 0 {
                            let base = self.stat((loops, op, 0), f).0;
                            row = row.against(&waiter_name(cfg.waiters[0]), base);
                        }
                        if w == 1 && metric == "p50_us" {
                            row = self.target(row, op, loops, (lightest, heaviest));
                        }
                        line.push(format!(
                            "{} ±{}",
                            format_value(value.0),
                            format_value(value.1)
                        ));
                        line.push(row.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")));
                        line.push(match (&row.target, row.pass) {
                            (Some(t), Some(p)) => {
                                format!("{t}: {}", if p { "pass" } else { "FAIL" })
                            }
                            _ => String::new(),
                        });
                        rows.push(row);
                    }
                    cells.push(line);
                }
            }
        }
        let header = [
            "case", "waiter", "p50 µs", "ratio", "target", "p99 µs", "ratio", "target",
        ];
        (
            rows,
            aligned(&header, &cells, |c| {
                (2..4).contains(&c) || (5..7).contains(&c)
            }),
        )
    }

    /// The targets for the new waiter's (the second's) median.
    fn target(
        &self,
        row: Row,
        op: Op,
        loops: usize,
        (lightest, heaviest): (Option<&usize>, Option<&usize>),
    ) -> Row {
        let (Some(&lightest), Some(&heaviest)) = (lightest, heaviest) else {
            return row;
        };
        let unloaded = self.stat((lightest, op, 1), |s| s.p50_us).0;
        if loops == heaviest && loops > lightest {
            let pass = row.value <= 2.0 * unloaded;
            row.target(&format!("<= 2x its median at {lightest} loops"), pass)
        } else if loops == lightest {
            let pass = row.ratio.is_some_and(|r| r <= 1.10);
            row.target("ratio <= 1.10", pass)
        } else {
            row
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_parse_and_name_back() {
        let ws = parse_waiters("legacy,default,spin:20,yield:5").unwrap();
        assert_eq!(ws[0], Waiter::LEGACY);
        assert_eq!(ws[1], Waiter::default());
        assert_eq!(ws[2], Waiter::Spin(Duration::from_micros(20)));
        let names: Vec<String> = ws.iter().map(|&w| waiter_name(w)).collect();
        assert_eq!(names[0], "legacy");
        assert_eq!(names[2], "spin:20");
        assert_eq!(names[3], "yield:5");
        assert!(parse_waiters("spin:x").is_err());
        assert!(parse_waiters("sleep").is_err());
    }
}
