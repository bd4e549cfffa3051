//! `yuebing demo --ha` and `yuebing bench ha` as a user runs them, with small settings: the
//! demo reads every object back after its leader was killed and prints the failover time and
//! each master's role; the bench prints its table and writes its JSON with the ratios, the
//! standby lag and the failover time. (The etcd runs need the `etcd` feature and an etcd
//! binary: `scripts/test.sh` runs them.) Without the feature, both say how to build one.

use std::io::{Read, Seek, SeekFrom};
use std::process::{Command, Output};

/// Runs `yuebing ARGS` with `env` set and waits for it. Its stderr goes to a file, not a pipe:
/// a child it started and left behind (if it died without killing them) would hold a pipe
/// open and the wait would never end.
fn yuebing(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut stderr = tempfile::tempfile().expect("a temp file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_yuebing"));
    cmd.args(args)
        .stderr(stderr.try_clone().expect("a second handle"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut out = cmd.output().expect("yuebing runs");
    stderr.seek(SeekFrom::Start(0)).expect("seek");
    stderr.read_to_end(&mut out.stderr).expect("read stderr");
    out
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "etcd"))]
#[test]
fn without_the_etcd_feature_both_say_how_to_build_it() {
    for args in [&["demo", "--ha"][..], &["bench", "ha"][..]] {
        let out = yuebing(args, &[]);
        let (_, err) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("cargo build --release --features etcd"),
            "{args:?}: {err}"
        );
    }
}

#[cfg(feature = "etcd")]
mod with_etcd {
    use super::{text, yuebing};

    /// The numbers at the end of the summary-table row of `phase`: ops, errors, GB, GB/s,
    /// p50_ms, p99_ms.
    fn phase_row(table: &str, phase: &str) -> Vec<f64> {
        let line = table
            .lines()
            .find(|l| l.starts_with(phase) && l[phase.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no row {phase:?} in:\n{table}"));
        let numbers: Vec<f64> = line[phase.len()..]
            .split_whitespace()
            .map(|n| n.parse().unwrap_or_else(|_| panic!("{line}")))
            .collect();
        assert_eq!(numbers.len(), 6, "{line}");
        numbers
    }

    #[test]
    fn the_ha_demo_reads_every_object_back_after_its_leader_is_killed() {
        let out = yuebing(
            &[
                "demo",
                "--ha",
                "--objects",
                "50",
                "--max",
                "256K",
                "--store-size",
                "64M",
            ],
            &[],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        for phase in ["put", "get (second client)", "get after the failover"] {
            let row = phase_row(&stdout, phase);
            assert_eq!((row[0], row[1]), (50.0, 0.0), "{phase}: {stdout}");
        }
        assert!(
            stdout.contains("every object read back byte-exact after the failover"),
            "{stdout}"
        );
        let took: f64 = stdout
            .split_once("took a put ")
            .and_then(|(_, rest)| rest.split_once(" s later"))
            .and_then(|(secs, _)| secs.parse().ok())
            .unwrap_or_else(|| panic!("no failover time in:\n{stdout}"));
        assert!(took > 0.0, "{stdout}");
        // The killed master is back, as a standby of the new leader, all in one epoch.
        let masters: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("master "))
            .collect();
        assert_eq!(masters.len(), 3, "{stdout}");
        assert_eq!(
            masters.iter().filter(|l| l.contains(": leader, ")).count(),
            1,
            "{stdout}"
        );
        assert_eq!(
            masters.iter().filter(|l| l.contains(": standby, ")).count(),
            2,
            "{stdout}"
        );
    }

    #[test]
    fn the_ha_bench_prints_ratios_lag_and_failover_times() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("ha.json");
        let out = yuebing(
            &[
                "bench",
                "ha",
                "--sizes",
                "4K",
                "--repeat",
                "1",
                "--duration-ms",
                "1000",
                "--warmup-ms",
                "200",
                "--kills",
                "2",
                "--lag-ms",
                "500",
                "--store-size",
                "64M",
                "--json",
                json.to_str().unwrap(),
            ],
            &[],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("case") && stdout.contains("ratio"),
            "{stdout}"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["bench"], "ha");
        let rows = doc["rows"].as_array().unwrap();
        let find = |variant: &str, metric: &str| -> Vec<&serde_json::Value> {
            rows.iter()
                .filter(|r| {
                    r["variant"].as_str().unwrap().starts_with(variant) && r["metric"] == metric
                })
                .collect()
        };
        for variant in ["etcd-log", "local-log"] {
            let row = find(variant, "ops/s");
            assert_eq!(row.len(), 1, "{variant}: {rows:?}");
            assert_eq!(row[0]["baseline"], "none");
            assert!(row[0]["ratio"].as_f64().unwrap() > 0.0, "{row:?}");
        }
        assert!(find("none", "ops/s")[0]["value"].as_f64().unwrap() > 0.0);
        // Two standbys sampled; the lag is a count of records, never negative.
        let lag = find("standby ", "p50_records");
        assert_eq!(lag.len(), 2, "{rows:?}");
        assert!(lag.iter().all(|r| r["value"].as_f64().unwrap() >= 0.0));
        for variant in ["kill 1", "kill 2", "median of 2"] {
            for metric in ["serving_ms", "put_ms"] {
                let row = find(variant, metric);
                assert_eq!(row.len(), 1, "{variant} {metric}: {rows:?}");
                assert!(row[0]["value"].as_f64().unwrap() > 0.0, "{row:?}");
            }
        }
    }

    #[test]
    fn without_an_etcd_binary_the_demo_says_how_to_install_it() {
        let out = yuebing(
            &["demo", "--ha"],
            &[("YUEBING_ETCD_BIN", "/nonexistent/etcd")],
        );
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("apt-get install etcd-server"), "{stderr}");
    }
}
