//! The `yuebing` binary as a user runs it: a real process on 127.0.0.1.

use std::process::Command;

fn yuebing() -> Command {
    Command::new(env!("CARGO_BIN_EXE_yuebing"))
}

/// Runs `yuebing ARGS --json FILE`, asserts success, and returns its stdout and the JSON.
fn bench_json(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = yuebing()
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (stdout, doc)
}

#[test]
fn bench_rpc_writes_the_table_and_json() {
    let (stdout, doc) = bench_json(&[
        "bench",
        "rpc",
        "--repeat",
        "1",
        "--duration-ms",
        "30",
        "--warmup-ms",
        "0",
    ]);
    assert!(stdout.contains("yuebing-pool(1)+attachment"), "{stdout}");
    assert_eq!(doc["bench"], "rpc");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 22, "every case and variant, attachments twice");
    for row in rows {
        assert!(row["value"].as_f64().unwrap() > 0.0, "{row}");
        if let Some(base) = row.get("baseline_value") {
            let ratio = row["value"].as_f64().unwrap() / base.as_f64().unwrap();
            assert!(
                (ratio - row["ratio"].as_f64().unwrap()).abs() < 1e-9,
                "{row}"
            );
        }
    }
}

#[test]
fn settings_come_from_the_config_file_and_bad_files_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("y.toml");
    std::fs::write(&cfg, "[bench]\nrepeat = \"three\"\n").unwrap();
    let out = yuebing()
        .arg("--config")
        .arg(&cfg)
        .args(["bench", "rpc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ConfigError") && stderr.contains("bench.repeat"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

#[test]
fn bench_transfer_runs_both_transports_against_their_baselines() {
    let (stdout, doc) = bench_json(&[
        "bench",
        "transfer",
        "--repeat",
        "1",
        "--duration-ms",
        "40",
        "--warmup-ms",
        "0",
        "--blocks",
        "4K,64K",
        "--batches",
        "1,4",
    ]);
    let rows = doc["rows"].as_array().unwrap();
    let has = |variant: &str, baseline: &str| {
        rows.iter().any(|r| {
            r["variant"] == variant
                && r["metric"] == "GB/s"
                && r["baseline"] == baseline
                && r["value"].as_f64().unwrap() > 0.0
        })
    };
    assert!(has("yuebing-tcp", "raw-tcp-pingpong"), "{stdout}");
    assert!(has("yuebing-tcp", "raw-tcp-stream"), "{stdout}");
    assert!(has("yuebing-shm", "memcpy-1thread"), "{stdout}");
    assert!(rows
        .iter()
        .any(|r| r["metric"] == "cpu_s_per_GB" && r["baseline"] == "raw-tcp-stream"));
}

#[test]
fn bad_bench_arguments_are_usage_errors() {
    let out = yuebing()
        .args(["bench", "transfer", "--blocks", "4Q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("UsageError"), "{stderr}");
}

#[test]
fn bench_master_reports_rates_memory_and_ratios() {
    let (_, doc) = bench_json(&[
        "bench",
        "master",
        "--objects",
        "20000",
        "--repeat",
        "1",
        "--duration-ms",
        "50",
        "--warmup-ms",
        "0",
        "--inflight",
        "4",
    ]);
    assert_eq!(doc["bench"], "master");
    let rows = doc["rows"].as_array().unwrap();
    let find = |variant: &str, metric: &str| {
        rows.iter()
            .find(|r| r["variant"] == variant && r["metric"] == metric)
            .unwrap_or_else(|| panic!("no {variant} {metric} row"))
    };
    assert!(find("core (1 thread)", "ops/s")["ratio"].as_f64().unwrap() > 0.0);
    assert!(find("rpc+data-dir", "ops/s")["baseline"] == "rpc-in-memory");
    assert!(find("core", "bytes/object")["value"].as_f64().unwrap() > 0.0);
    assert!(rows.iter().all(|r| r["value"].as_f64().unwrap() > 0.0));
}

#[test]
fn bench_store_runs_a_node_and_reports_every_operation() {
    let (_, doc) = bench_json(&[
        "bench",
        "store",
        "--sizes",
        "4K,64K",
        "--batch",
        "4",
        "--segment",
        "16M",
        "--max-calls",
        "16",
        "--repeat",
        "1",
        "--transport",
        "tcp",
        "--multi",
        "4x16K",
    ]);
    let rows = doc["rows"].as_array().unwrap();
    for case in [
        "batch_put_from_buffers 4x16KiB x4",
        "batch_get_into_buffers 4x16KiB x4",
        "put_from 4KiB",
        "get_into 64KiB",
        "batch_get_into 64KiB x4",
        "batch_put_from 4KiB x4",
        "exist(miss) 1KiB",
        "batch_exist 1KiB x4",
    ] {
        assert!(
            rows.iter()
                .any(|r| r["case"] == case && r["variant"] == "yuebing-tcp"),
            "no row for {case}"
        );
    }
    assert!(rows.iter().all(|r| r["value"].as_f64().unwrap() > 0.0));
}

#[test]
fn bench_bridge_measures_every_mode_against_async_and_shows_the_targets() {
    let (stdout, doc) = bench_json(&[
        "bench",
        "bridge",
        "--repeat",
        "1",
        "--duration-ms",
        "30",
        "--warmup-ms",
        "0",
        "--store-size",
        "64M",
    ]);
    assert!(stdout.contains("2 callback thread(s)"), "{stdout}");
    assert_eq!(doc["bench"], "bridge");
    let rows = doc["rows"].as_array().unwrap();
    let find = |case: &str, variant: &str, metric: &str| {
        rows.iter()
            .find(|r| r["case"] == case && r["variant"] == variant && r["metric"] == metric)
            .unwrap_or_else(|| panic!("no {case} / {variant} / {metric} row:\n{stdout}"))
    };
    for op in ["health", "put 4KiB", "get 4KiB", "get_into 1MiB"] {
        for n in [1, 64] {
            for mode in ["async", "blocking", "callback", "c-abi", "c-abi-callback"] {
                let rate = find(&format!("{op} x{n}"), mode, "ops/s");
                assert!(rate["value"].as_f64().unwrap() > 0.0, "{rate}");
                if mode != "async" {
                    assert_eq!(rate["baseline"], "async", "{rate}");
                }
            }
        }
        // The targets are verdicts in the output, not assertions.
        for mode in ["blocking", "callback"] {
            assert!(find(&format!("{op} x64"), mode, "ops/s")["pass"].is_boolean());
        }
        let over = find(&format!("{op} x1"), "blocking", "p50_us_over_async");
        assert!(over["pass"].is_boolean(), "{over}");
        // The C ABI is held to blocking Rust.
        for n in [1, 64] {
            let case = format!("{op} x{n}");
            let c_vs_rust = rows.iter().find(|r| {
                r["case"] == case.as_str() && r["variant"] == "c-abi" && r["baseline"] == "blocking"
            });
            let row = c_vs_rust.unwrap_or_else(|| panic!("no c-abi target row for {case}"));
            assert!(row["pass"].is_boolean(), "{row}");
        }
    }
    let wake = find("condvar ping-pong x1", "one-way wake-up", "p50_us");
    assert!(wake["value"].as_f64().unwrap() > 0.0);
    let many = find("condvar ping-pong x64", "round-trip", "ops/s");
    assert!(many["value"].as_f64().unwrap() > 0.0);
}

/// The demo starts its nodes while its own runtime serves their master: on a runtime with one
/// worker (a one-core machine) starting a node must not block that worker, or the node's
/// mount times out.
#[test]
fn the_demo_runs_on_a_one_worker_runtime() {
    let out = yuebing()
        .env("TOKIO_WORKER_THREADS", "1")
        .args(["demo", "--nodes", "2", "--store-size", "32M"])
        .args(["--objects", "20", "--min", "4K", "--max", "64K"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("every object still readable"), "{stdout}");
}

/// The runtime size of the master, a node and the transfer bench is a setting like the
/// others; zero workers is refused before anything starts.
#[test]
fn zero_worker_threads_is_a_config_error() {
    let commands: [(&[&str], &str); 3] = [
        (&["master", "--port", "0"], "master.worker_threads"),
        (&["node", "--master", "127.0.0.1:9"], "node.worker_threads"),
        (&["bench", "transfer"], "bench.worker_threads"),
    ];
    for (args, key) in commands {
        let out = yuebing()
            .args(args)
            .args(["--worker-threads", "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("ConfigError") && stderr.contains(key),
            "{args:?}: {stderr}"
        );
    }
}

/// An empty key, a put of no replicas, a demo of no nodes or no replicas, a node of no store
/// space are usage errors naming the argument, before the command starts anything (the master
/// address here answers nothing: a command that went on would fail there instead).
#[test]
fn nonsense_arguments_are_usage_errors_naming_them() {
    const NOWHERE: &str = "--master=127.0.0.1:9";
    let commands: [(&[&str], &str); 8] = [
        (&["store", NOWHERE, "put", "", "-"], "<KEY>"),
        (&["store", NOWHERE, "get", ""], "<KEY>"),
        (&["store", NOWHERE, "exist", ""], "<KEY>"),
        (&["store", NOWHERE, "remove", ""], "<KEY>"),
        (
            &["store", NOWHERE, "put", "k", "-", "--replicas", "0"],
            "--replicas",
        ),
        (&["demo", "--objects", "1", "--nodes", "0"], "--nodes"),
        (
            &[
                "demo",
                "--store-size",
                "32M",
                "--objects",
                "1",
                "--replicas",
                "0",
            ],
            "--replicas",
        ),
        (&["node", NOWHERE, "--store-size", "0"], "store_size"),
    ];
    for (args, name) in commands {
        let (code, stderr) = run_refused(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(name), "{args:?}: {stderr}");
    }
    // Object sizes the demo cannot draw from (it panicked on --min above --max): refused
    // before anything starts, naming both.
    let args = ["demo", "--objects", "1", "--min", "16M", "--max", "4K"];
    let (code, stderr) = run_refused(&args);
    assert!(code.is_some_and(|c| c != 0), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        stderr.contains("--min") && stderr.contains("--max"),
        "{args:?}: {stderr}"
    );
}

/// Runs `yuebing ARGS` with no input; its exit code and its stderr.
fn run_refused(args: &[&str]) -> (Option<i32>, String) {
    let out = yuebing()
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The children (nodes) of a demo killed with SIGKILL, which cannot stop them, stop by
/// themselves: they see their stdin closed by the kernel and stop as on Ctrl-C.
#[test]
fn a_killed_demos_nodes_stop_by_themselves() {
    use std::time::{Duration, Instant};
    let mut demo = yuebing()
        .args(["demo", "--nodes", "2", "--store-size", "32M"])
        .args(["--objects", "1000000", "--min", "4K", "--max", "8K"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let demo_pid = demo.id();
    // Its children (id and start time: an id alone may be reused), once both nodes run.
    let deadline = Instant::now() + Duration::from_secs(60);
    let nodes = loop {
        let nodes = children_of(demo_pid);
        if nodes.len() >= 2 {
            break nodes;
        }
        if Instant::now() >= deadline {
            let _ = demo.kill();
            panic!("the demo did not start its two nodes: {nodes:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    demo.kill().unwrap();
    demo.wait().unwrap();
    // Stopped: gone, or a zombie nobody reaps (a container's init may not).
    let running = |&(pid, started): &(u32, u64)| {
        stat_of(pid).is_some_and(|s| s.started == started && s.state != 'Z')
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<(u32, u64)> = nodes.iter().copied().filter(running).collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for (pid, _) in &left {
                // SAFETY: kill(2) touches no memory; the id is one of the demo's nodes,
                // checked by its start time just above.
                unsafe {
                    libc::kill(*pid as i32, libc::SIGKILL);
                }
            }
            panic!("the killed demo's nodes {left:?} still run");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What `/proc/PID/stat` says of a process.
struct Stat {
    state: char,
    parent: u32,
    /// In clock ticks since boot.
    started: u64,
}

fn stat_of(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name in parentheses: state (field 3), parent (4), ..., start time (22).
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// The children of `pid`: their ids and start times.
fn children_of(pid: u32) -> Vec<(u32, u64)> {
    let Ok(all) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| {
            let stat = stat_of(child)?;
            (stat.parent == pid).then_some((child, stat.started))
        })
        .collect()
}
