//! Benchmark results: a human table and the `--json` file of `shared/notes/conventions.md`.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

/// One measured value, with its baseline when it has one.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The workload.
    pub case: String,
    /// The thing measured.
    pub variant: String,
    /// The unit (`ops/s`, `GB/s`, `p50_us`, …).
    pub metric: String,
    /// Median over the repetitions.
    pub value: f64,
    /// Max − min over the repetitions.
    pub spread: f64,
    /// The variant compared against, measured in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// The baseline's median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_value: Option<f64>,
    /// `value / baseline_value`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The target for this value, in words (e.g. `ratio >= 0.90`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Whether the value meets `target`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<bool>,
}

impl Row {
    /// A row without a baseline.
    pub fn new(case: &str, variant: &str, metric: &str, (value, spread): (f64, f64)) -> Row {
        Row {
            case: case.into(),
            variant: variant.into(),
            metric: metric.into(),
            value,
            spread,
            baseline: None,
            baseline_value: None,
            ratio: None,
            target: None,
            pass: None,
        }
    }

    /// The same row compared against `baseline`'s median.
    pub fn against(mut self, baseline: &str, baseline_value: f64) -> Row {
        self.baseline = Some(baseline.into());
        self.baseline_value = Some(baseline_value);
        self.ratio = Some(self.value / baseline_value);
        self
    }

    /// The same row with the target it is held to and whether it meets it.
    pub fn target(mut self, target: &str, pass: bool) -> Row {
        self.target = Some(target.into());
        self.pass = Some(pass);
        self
    }
}

#[derive(Serialize)]
struct Host {
    cpus: usize,
    loadavg_1m: f64,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    bench: &'a str,
    version: &'a str,
    host: Host,
    rows: &'a [Row],
}

/// How a variant of a bench that measures the cost of metrics records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metering {
    /// Metrics recorded.
    On,
    /// No metrics.
    Off,
    /// No metrics, a second time on a cluster (or engine) of its own: the A/A twin of `Off`,
    /// whose difference from it is the noise of the run.
    OffAgain,
}

impl Metering {
    /// Whether metrics are recorded.
    pub fn on(self) -> bool {
        self == Metering::On
    }

    fn suffix(self) -> &'static str {
        match self {
            Metering::On => " metrics=on",
            Metering::Off => " metrics=off",
            Metering::OffAgain => " metrics=off again",
        }
    }
}

/// A switch a bench measures one way or both ways, interleaved (`flag`, say `--metrics`,
/// naming the `what`): `on`, `off`, or both (`on,off`, in the order given).
pub fn on_off_modes(list: &str, what: &str, flag: &str) -> Result<Vec<bool>, String> {
    let modes = list
        .split(',')
        .map(|m| match m.trim() {
            "on" => Ok(true),
            "off" => Ok(false),
            other => Err(format!("unknown {what} mode {other:?} (on, off)")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match modes.as_slice() {
        [_] => Ok(modes),
        [a, b] if a != b => Ok(modes),
        _ => Err(format!("{flag} {list:?}: on, off, or on,off")),
    }
}

/// The variants of `--metrics`: `on`, `off`, or both (`on,off`, in the order given, with an
/// A/A twin of off after them), interleaved in one run.
pub fn metrics_modes(list: &str) -> Result<Vec<Metering>, String> {
    let modes = on_off_modes(list, "metrics", "--metrics")?;
    let mut out: Vec<Metering> = modes
        .iter()
        .map(|&on| if on { Metering::On } else { Metering::Off })
        .collect();
    if out.len() == 2 {
        out.push(Metering::OffAgain);
    }
    Ok(out)
}

/// The row of `variant` measured in the same cell (case and metric) as `row`.
pub fn same_cell<'a>(rows: &'a [Row], row: &Row, variant: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|o| o.case == row.case && o.metric == row.metric && o.variant == variant)
}

/// The variant `name` measured with `metering`: the bare name when only one mode is
/// measured, else `NAME metrics=on` / `metrics=off` / `metrics=off again`.
pub fn with_metrics(name: &str, metering: Metering, modes: &[Metering]) -> String {
    match modes.len() {
        1 => name.to_string(),
        _ => format!("{name}{}", metering.suffix()),
    }
}

/// Compares each `… metrics=on` row, and its A/A twin `… metrics=off again`, with the
/// `… metrics=off` row of the same case, variant and metric (all measured interleaved in the
/// same run): the off row is their baseline, and the on row's rates (`GB/s`, `ops/s`) are held
/// to issue 28's target: within 3 % of it, or within the run's A/A spread (the twin's distance
/// from it, or the off variant's own spread over the repetitions), whichever is largest.
pub fn metrics_overhead(rows: Vec<Row>) -> Vec<Row> {
    let all = rows.clone();
    let find =
        |row: &Row, variant: &str| same_cell(&all, row, variant).map(|o| (o.value, o.spread));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|row| {
            let (name, twin) = match (
                row.variant.strip_suffix(Metering::On.suffix()),
                row.variant.strip_suffix(Metering::OffAgain.suffix()),
            ) {
                (Some(name), _) => (name.to_string(), false),
                (None, Some(name)) => (name.to_string(), true),
                (None, None) => return row,
            };
            let baseline = format!("{name}{}", Metering::Off.suffix());
            let Some((b_value, b_spread)) = find(&row, &baseline) else {
                return row;
            };
            let again = find(&row, &format!("{name}{}", Metering::OffAgain.suffix()));
            let row = row.against(&baseline, b_value);
            match (twin, row.metric.as_str()) {
                (false, "GB/s" | "ops/s") if b_value > 0.0 => {
                    let a_a = again.map_or(0.0, |(v, _)| (v / b_value - 1.0).abs());
                    let allowed = 0.03f64.max(b_spread / b_value).max(a_a);
                    let pass = row.value >= b_value * (1.0 - allowed);
                    let target = format!("ratio >= {:.3} (3 % or the A/A spread)", 1.0 - allowed);
                    row.target(&target, pass)
                }
                _ => row,
            }
        })
        .collect();
    let overall = overall_overhead(&rows);
    rows.into_iter().chain(overall).collect()
}

/// One row per variant measured with metrics on: the median, over every rate cell, of its
/// ratio to metrics off, held to the same target against the median of the A/A twin's ratios
/// (per cell, a run on 2 shared cores spreads ±10 %; over all cells the noise mostly cancels).
fn overall_overhead(rows: &[Row]) -> Vec<Row> {
    // Each cell (case and variant) counts once: a size's GB/s and ops/s are one measurement
    // in two units, with the same ratio (its ops/s is taken where it has both).
    let rates = |suffix: &str| -> Vec<(String, f64)> {
        let mut cells: std::collections::BTreeMap<(String, &str), (bool, f64)> = Default::default();
        for r in rows {
            let ops = match r.metric.as_str() {
                "ops/s" => true,
                "GB/s" => false,
                _ => continue,
            };
            // A cell whose baseline measured 0 has no meaningful ratio.
            let Some(ratio) = r.ratio.filter(|x| x.is_finite()) else {
                continue;
            };
            let Some(name) = r.variant.strip_suffix(suffix) else {
                continue;
            };
            let cell = cells.entry((name.to_string(), r.case.as_str()));
            let kept = cell.or_insert((ops, ratio));
            if ops && !kept.0 {
                *kept = (ops, ratio);
            }
        }
        cells
            .into_iter()
            .map(|((name, _), (_, ratio))| (name, ratio))
            .collect()
    };
    let (on, again) = (
        rates(Metering::On.suffix()),
        rates(Metering::OffAgain.suffix()),
    );
    let median_of = |all: &[(String, f64)], name: &str| {
        let mut v: Vec<f64> = all.iter().filter(|(n, _)| n == name).map(|x| x.1).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (n > 0).then(|| (v[(n - 1) / 2] + v[n / 2]) / 2.0)
    };
    let mut names: Vec<&String> = on.iter().map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let ratio = median_of(&on, name)?;
            let a_a = median_of(&again, name).map_or(0.0, |r| (r - 1.0).abs());
            let allowed = 0.03f64.max(a_a);
            let target = format!("median >= {:.3} (3 % or the A/A median)", 1.0 - allowed);
            let variant = format!("{name}{}", Metering::On.suffix());
            let baseline = format!("{name}{}", Metering::Off.suffix());
            Some(
                Row::new("all rate cells", &variant, "ratio", (ratio, 0.0))
                    .against(&baseline, 1.0)
                    .target(&target, ratio >= 1.0 - allowed),
            )
        })
        .collect()
}

/// The 1-minute load average (NaN where `/proc/loadavg` cannot be read).
pub fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Prints `rows` as an aligned table.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "case", "variant", "metric", "median", "spread", "baseline", "ratio",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.case.clone(),
                r.variant.clone(),
                r.metric.clone(),
                format_value(r.value),
                format_value(r.spread),
                r.baseline.clone().unwrap_or_default(),
                r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_default(),
            ]
        })
        .collect();
    aligned(&header, &cells, |i| i >= 3 && i != 5)
}

/// Lays `cells` out under `header` in columns as wide as their widest entry, two spaces apart;
/// columns for which `right(i)` holds are right-aligned (numbers), the others left-aligned.
pub fn aligned(header: &[&str], cells: &[Vec<String>], right: impl Fn(usize) -> bool) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |row: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (c, w)) in row.zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            if right(i) {
                let _ = write!(text, "{c:>w$}");
            } else {
                let _ = write!(text, "{c:<w$}");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in cells {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A value as the tables print it: no decimals from 100 up, three below.
pub fn format_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// Writes the rows as the conventions' JSON document.
pub fn write_json(path: &Path, bench: &str, rows: &[Row]) -> std::io::Result<()> {
    let doc = JsonReport {
        bench,
        version: env!("CARGO_PKG_VERSION"),
        host: Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            loadavg_1m: loadavg_1m(),
        },
        rows,
    };
    let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json_carry_the_ratio() {
        let rows = vec![
            Row::new("echo 16B x64", "tarpc-stock", "ops/s", (100_000.0, 5_000.0)),
            Row::new("echo 16B x64", "pool", "ops/s", (95_000.0, 1_000.0))
                .against("tarpc-stock", 100_000.0),
        ];
        let t = table(&rows);
        assert!(t.contains("0.95x"), "{t}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_json(&path, "rpc", &rows).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["bench"], "rpc");
        assert_eq!(v["rows"][1]["ratio"], 0.95);
        assert!(v["rows"][0].get("ratio").is_none());
        assert!(v["host"]["cpus"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn metrics_on_is_held_to_three_percent_or_the_a_a_spread() {
        use Metering::*;
        assert_eq!(metrics_modes("on,off"), Ok(vec![On, Off, OffAgain]));
        assert_eq!(metrics_modes("off"), Ok(vec![Off]));
        assert!(metrics_modes("on,on").is_err());
        assert!(metrics_modes("sometimes").is_err());
        assert_eq!(with_metrics("yuebing-tcp", On, &[On]), "yuebing-tcp");
        let modes = [On, Off, OffAgain];
        let [on, off, again] = modes.map(|m| with_metrics("yuebing-tcp", m, &modes));
        assert_eq!(again, "yuebing-tcp metrics=off again");
        let rows = metrics_overhead(vec![
            Row::new("put 4KiB", &on, "ops/s", (97.5, 1.0)),
            Row::new("put 4KiB", &off, "ops/s", (100.0, 2.0)),
            Row::new("get 4KiB", &on, "ops/s", (90.0, 1.0)),
            Row::new("get 4KiB", &off, "ops/s", (100.0, 20.0)),
            Row::new("get 1MiB", &on, "GB/s", (90.0, 1.0)),
            Row::new("get 1MiB", &off, "GB/s", (100.0, 2.0)),
            Row::new("get 1MiB", &again, "GB/s", (95.0, 2.0)),
            Row::new("get 16MiB", &on, "GB/s", (90.0, 1.0)),
            Row::new("get 16MiB", &off, "GB/s", (100.0, 2.0)),
            Row::new("get 16MiB", &again, "GB/s", (112.0, 2.0)),
            Row::new("get 1MiB", &on, "p50_us", (11.0, 1.0)),
            Row::new("get 1MiB", &off, "p50_us", (10.0, 1.0)),
        ]);
        let verdicts: Vec<_> = rows.iter().map(|r| (r.ratio, r.pass)).collect();
        assert_eq!(
            verdicts,
            [
                (Some(0.975), Some(true)),
                (None, None),
                // 10 % below, within the off variant's 20 % spread.
                (Some(0.9), Some(true)),
                (None, None),
                // 10 % below, the twin only 5 % from off.
                (Some(0.9), Some(false)),
                (None, None),
                (Some(0.95), None),
                // 10 % below, the twin 12 % from off: within the run's noise.
                (Some(0.9), Some(true)),
                (None, None),
                (Some(1.12), None),
                // Latencies get the ratio, not the target.
                (Some(1.1), None),
                (None, None),
                // Over all rate cells: the median of 0.975, 0.9, 0.9, 0.9 against the twin's
                // 0.95 and 1.12 (median 1.035: 3.5 % of noise).
                (Some(0.9), Some(false)),
            ]
        );
    }

    #[test]
    fn one_overall_row_per_variant_when_variants_alternate() {
        let modes = [Metering::On, Metering::Off];
        let [tcp_on, tcp_off] = modes.map(|m| with_metrics("yuebing-tcp", m, &modes));
        let [shm_on, shm_off] = modes.map(|m| with_metrics("yuebing-shm", m, &modes));
        let mut rows = Vec::new();
        for case in ["put 4KiB", "get 4KiB"] {
            rows.push(Row::new(case, &shm_on, "ops/s", (99.0, 1.0)));
            rows.push(Row::new(case, &shm_off, "ops/s", (100.0, 1.0)));
            rows.push(Row::new(case, &tcp_on, "ops/s", (90.0, 1.0)));
            rows.push(Row::new(case, &tcp_off, "ops/s", (100.0, 1.0)));
        }
        // One more shm cell at 0.9, in GB/s and ops/s: counted once, the median stays 0.99
        // (counted twice, it would be 0.945).
        for metric in ["GB/s", "ops/s"] {
            rows.push(Row::new("get 1MiB", &shm_on, metric, (0.9, 0.0)));
            rows.push(Row::new("get 1MiB", &shm_off, metric, (1.0, 0.0)));
        }
        let overall: Vec<_> = metrics_overhead(rows)
            .into_iter()
            .filter(|r| r.case == "all rate cells")
            .map(|r| (r.variant, r.pass))
            .collect();
        assert_eq!(
            overall,
            [(shm_on.clone(), Some(true)), (tcp_on.clone(), Some(false))]
        );
    }
}
