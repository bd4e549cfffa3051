//! The master's admin HTTP server (`yuebing master --metrics-port`), as a process: Mooncake's
//! paths answer what the master holds, as an operator's probe (and SGLang's `check_server`,
//! which reads `/get_all_segments`) would read them.

mod common;
/// `/get_all_segments` and `/query_key` against the stock Mooncake master's answers.
#[path = "master_admin/like_mooncake.rs"]
mod like_mooncake;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Process;
use yuebing::rpc::Endpoint;
use yuebing::store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;

/// `GET path` on `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    try_get(addr, path).unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// `GET path` on `addr`, or why it could not be made (nothing listens there yet, say).
fn try_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    try_get_typed(addr, path).map(|(status, _, body)| (status, body))
}

/// `GET path` on `addr`: the status code, the content type (empty if none) and the body.
fn get_typed(addr: &str, path: &str) -> (u16, String, String) {
    try_get_typed(addr, path).unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// `GET path` on `addr` ([`get_typed`]), or why it could not be made.
fn try_get_typed(addr: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    Ok((status, content_type, body.to_string()))
}

/// A child process, killed and reaped when dropped (also when the test panics); its stdout is
/// kept open.
struct Guard {
    child: std::process::Child,
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `yuebing ARGS`, read until its ready line (`ready` and its value) and then its admin line
/// (`admin` and the admin server's address): the process and the two values.
fn spawn(args: &[&str], ready: &str, admin: &str) -> (Guard, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let value = first.strip_prefix(ready).unwrap().to_string();
    let second = lines.next().unwrap().unwrap();
    let addr = second.strip_prefix(admin).unwrap().to_string();
    let guard = Guard {
        child,
        _stdout: lines,
    };
    (guard, value, addr)
}

/// A master (with `extra` arguments) with its admin server on any free port: the process and
/// the two addresses.
fn master(extra: &[&str]) -> (Guard, Endpoint, String) {
    master_on("0", extra)
}

/// As [`master`], on rpc port `port`.
fn master_on(port: &str, extra: &[&str]) -> (Guard, Endpoint, String) {
    let mut args = vec![
        "master",
        "--bind",
        "127.0.0.1",
        "--port",
        port,
        "--metrics-port",
        "0",
    ];
    args.extend_from_slice(extra);
    let (guard, rpc, admin) = spawn(
        &args,
        "yuebing master ready on ",
        "yuebing master admin on ",
    );
    (guard, rpc.parse().unwrap(), admin)
}

/// A node of `master` (16 MiB of store space, pinging every 100 ms) with its admin server on
/// any free port: the process and the admin address.
fn node_with_admin(master: &str) -> (Guard, String) {
    let args = [
        "node",
        "--master",
        master,
        "--store-size",
        "16M",
        "--transport",
        "tcp",
        "--heartbeat-ms",
        "100",
        "--metrics-port",
        "0",
    ];
    let (guard, _, admin) = spawn(&args, "yuebing node ready ", "yuebing node admin on ");
    (guard, admin)
}

/// Prometheus's own check of an exposition (`promtool check metrics`, Debian's `prometheus`
/// package, which the test command installs): its format and its naming conventions.
fn promtool_check(exposition: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncakes_admin_paths_answer_what_the_master_holds() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let (_master, rpc, admin) = master(&["--data-dir", dir]);
    let (status, body) = get(&admin, "/health");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["role"], "leader");
    assert_eq!(health["service_ready"], true);
    assert_eq!(get(&admin, "/ready"), (200, "ready\n".into()));
    assert_eq!(get(&admin, "/role"), (200, "leader".into()));
    assert_eq!(get(&admin, "/ha_status"), (200, "serving".into()));
    assert_eq!(
        get(&admin, "/get_all_segments"),
        (200, String::new()),
        "no node yet"
    );

    let node = Process::node(&rpc, "16M");
    let segments = eventually(
        "the node's segment listed",
        Duration::from_secs(20),
        async || {
            let (_, body) = get(&admin, "/get_all_segments");
            (body == format!("{}\n", node.ready())).then_some(body)
        },
    )
    .await;
    assert!(segments.contains(':'));
    let client = Client::start(ClientConfig {
        masters: vec![rpc.clone()],
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    client
        .put("admin/k", b"0123456789", Options::default())
        .await
        .unwrap();
    let (status, body) = get(&admin, "/query_key?key=admin/k");
    assert_eq!(status, 200, "{body}");
    let found: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(found["success"], true);
    assert_eq!(found["data"][0]["size_"], 10);
    assert_eq!(found["data"][0]["transport_endpoint_"], node.ready());
    // No lease was granted: a plain remove goes through at once.
    client
        .remove("admin/k", false, Options::default())
        .await
        .unwrap();
    let (status, body) = get(&admin, "/query_key?key=admin/k");
    assert_eq!(status, 404);
    let missing: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (missing["success"].clone(), missing["error_code"].clone()),
        (false.into(), (-704).into())
    );
    assert_eq!(get(&admin, "/query_key").0, 404, "an empty key");

    // A store error inside a successful reply counts as the call's error, by its code.
    assert_eq!(
        client
            .get("admin/missing", Options::default())
            .await
            .unwrap_err()
            .code(),
        -704
    );
    let (status, metrics) = get(&admin, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("yuebing_rpc_server_errors_total{")
                && l.contains("code=\"-704\"")),
        "{metrics}"
    );
    for line in [
        "# TYPE yuebing_master_objects gauge",
        "yuebing_master_objects 0",
        "yuebing_master_capacity_bytes 16777216",
        "yuebing_master_serving 1",
        "# TYPE yuebing_master_evictions_total counter",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} not in\n{metrics}"
        );
    }
    let put_calls = "yuebing_rpc_server_calls_total{service=\"master\",method=\"put_start\"} 1";
    assert!(
        metrics.lines().any(|l| l == put_calls),
        "{put_calls:?} not in\n{metrics}"
    );
    assert!(metrics.contains("yuebing_rpc_server_latency_seconds_bucket{service=\"master\",method=\"put_start\",le=\"+Inf\"} 1"));
    // The operation log: entries appended and the group commits' fsync latency.
    let sample = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
    };
    assert!(
        sample("yuebing_master_log_appends_total") >= 2.0,
        "a put starts and ends"
    );
    assert!(sample("yuebing_master_log_fsync_seconds_count") >= 1.0);
    // What the master did, as domain counts, and what it holds and is.
    assert_eq!(sample("yuebing_master_puts_total"), 1.0);
    assert_eq!(sample("yuebing_master_removals_total"), 1.0);
    assert_eq!(
        sample("yuebing_master_gets_total"),
        0.0,
        "the get found nothing"
    );
    assert_eq!(sample("yuebing_master_leases_held"), 0.0);
    assert!(sample("yuebing_process_resident_memory_bytes") > 1e6);
    assert!(sample("yuebing_process_open_fds") > 3.0);
    for line in [
        "yuebing_master_role{role=\"single\"} 1",
        "yuebing_master_role{role=\"standby\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
    assert!(
        metrics.lines().any(
            |l| l.starts_with("yuebing_master_segment_capacity_bytes{segment=")
                && l.ends_with("} 16777216")
        ),
        "{metrics}"
    );
    promtool_check(&metrics);
    let (status, summary) = get(&admin, "/metrics/summary");
    assert_eq!(status, 200);
    assert!(
        summary.starts_with("role=leader, state=serving, service_ready=true"),
        "{summary}"
    );
    assert!(
        summary.contains("master_total_capacity_bytes=16777216"),
        "{summary}"
    );
    assert_eq!(get(&admin, "/nope").0, 404);
}

/// `/role`, `/ha_status` and `/ready` of elected masters follow the election: one leader that
/// serves, a standby that answers 503, and the standby leads once the leader is killed.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_role_of_elected_masters_follows_a_failover() {
    let etcd = yuebing_testkit::etcd::EtcdServer::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let elected = || {
        master(&[
            "--etcd",
            &endpoint,
            "--cluster",
            "admin",
            "--election-ttl-ms",
            "2000",
        ])
    };
    let mut masters = vec![elected(), elected()];
    let roles = |masters: &[(Guard, Endpoint, String)]| {
        masters
            .iter()
            .map(|(_, _, admin)| get(admin, "/role").1)
            .collect::<Vec<_>>()
    };
    let leader = eventually(
        "a leader and a standby",
        Duration::from_secs(30),
        async || {
            let now = roles(&masters);
            let leader = now.iter().position(|r| r == "leader")?;
            (now.iter().filter(|r| *r == "standby").count() == 1).then_some(leader)
        },
    )
    .await;
    let standby = 1 - leader;
    let (leading, waiting) = (&masters[leader].2, &masters[standby].2);
    eventually("the leader serves", Duration::from_secs(30), async || {
        (get(leading, "/ready").0 == 200).then_some(())
    })
    .await;
    assert_eq!(get(leading, "/ha_status"), (200, "serving".into()));
    assert_eq!(get(waiting, "/ready").0, 503);
    assert_eq!(get(waiting, "/ha_status"), (200, "standby".into()));
    like_mooncake::standby_answers_as_the_stock_master(waiting);
    let health: serde_json::Value = serde_json::from_str(&get(waiting, "/health").1).unwrap();
    assert_eq!(health["role"], "standby");

    // The leader is killed: the standby leads, serves, and says so.
    let waiting = waiting.clone();
    drop(masters.remove(leader));
    eventually("the standby leads", Duration::from_secs(30), async || {
        (get(&waiting, "/role").1 == "leader" && get(&waiting, "/ready").0 == 200).then_some(())
    })
    .await;
    assert_eq!(get(&waiting, "/ha_status"), (200, "serving".into()));
}

/// A real Prometheus on 127.0.0.1 (a temporary TSDB, a 1 s scrape interval) scraping
/// `targets`; stopped and its files removed when dropped.
struct Prometheus {
    child: std::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[&str]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - \
                 job_name: yuebing\n    static_configs:\n      - targets: [{list}]\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", yuebing_testkit::ports::free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/test.sh installs it)");
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    /// The first sample's value of an instant `query`, if it has one.
    fn value(&self, query: &str) -> Option<f64> {
        let q: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = try_get(&self.addr, &format!("/api/v1/query?query={q}")).ok()?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes a master and a node: its query API sees the put calls counted
/// and the master's capacity, and every panel of the Grafana dashboard in `deploy/` has data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_cluster_and_every_panel_has_data() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let config = Command::new("promtool")
        .arg("check")
        .arg("config")
        .arg(deploy.join("prometheus.yml"))
        .output()
        .expect("promtool");
    assert!(config.status.success(), "{config:?}");
    let (_master, rpc, admin) = master(&[]);
    let (_node, node_admin) = node_with_admin(&rpc.to_string());
    let prometheus = Prometheus::start(&[&admin, &node_admin]);
    let client = Client::start(ClientConfig {
        masters: vec![rpc.clone()],
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let puts = r#"sum(yuebing_rpc_server_calls_total{service="master",method="put_start"})"#;
    eventually("both scraped", Duration::from_secs(60), async || {
        prometheus
            .value("sum(up{job=\"yuebing\"})")
            .filter(|&up| up == 2.0)
    })
    .await;
    let before = prometheus.value(puts).unwrap_or(0.0);
    for i in 0..20 {
        client
            .put(&format!("prom/{i}"), b"0123456789", Options::default())
            .await
            .unwrap();
    }
    // And a failing call, for the errors panel.
    assert!(client
        .get("prom/missing", Options::default())
        .await
        .is_err());
    let after = eventually("the puts scraped", Duration::from_secs(60), async || {
        prometheus.value(puts).filter(|&n| n >= before + 20.0)
    })
    .await;
    assert!(after >= 20.0, "{before} -> {after}");
    let capacity = eventually(
        "the capacity scraped",
        Duration::from_secs(60),
        async || prometheus.value("yuebing_master_capacity_bytes"),
    )
    .await;
    assert_eq!(capacity, 16.0 * 1024.0 * 1024.0);

    let dashboard: serde_json::Value =
        serde_json::from_slice(&std::fs::read(deploy.join("grafana/yuebing.json")).unwrap())
            .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    for expr in &exprs {
        eventually(expr, Duration::from_secs(60), async || {
            prometheus.value(expr)
        })
        .await;
    }
}

/// A node's own admin server: `/ready` turns 503 when its master is stopped and 200 again once
/// it remounted with the master started anew; `/health` says why; `/metrics` passes promtool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_ready_follows_its_master() {
    let port = yuebing_testkit::ports::free_port().to_string();
    let (master, rpc, _) = master_on(&port, &[]);
    let (_node, admin) = node_with_admin(&rpc.to_string());
    assert_eq!(get(&admin, "/ready"), (200, "ready\n".into()));
    let (status, health) = get(&admin, "/health");
    assert_eq!(status, 200, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(
        (health["status"].clone(), health["code"].clone()),
        ("healthy".into(), 0.into())
    );
    let (status, metrics) = get(&admin, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l == "yuebing_client_store_space_bytes 16777216"),
        "{metrics}"
    );
    assert!(
        metrics.contains("yuebing_rpc_client_calls_total{service=\"master\",method=\"mount\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("yuebing_engine_transfers_total{transport=\"tcp\",opcode=\"write\"} "),
        "{metrics}"
    );
    promtool_check(&metrics);

    drop(master);
    eventually(
        "not ready without its master",
        Duration::from_secs(10),
        async || (get(&admin, "/ready").0 == 503).then_some(()),
    )
    .await;
    let (status, health) = get(&admin, "/health");
    assert_eq!(status, 503);
    assert!(health.contains("master_unreachable"), "{health}");

    let (_master, _, _) = master_on(&port, &[]);
    eventually(
        "ready again once remounted",
        Duration::from_secs(20),
        async || (get(&admin, "/ready").0 == 200).then_some(()),
    )
    .await;
}
