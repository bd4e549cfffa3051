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
}
