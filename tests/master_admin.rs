//! The master's admin HTTP server (`yuebing master --metrics-port`), as a process: Mooncake's
//! paths answer what the master holds, as an operator's probe (and SGLang's `check_server`,
//! which reads `/get_all_segments`) would read them.

mod common;

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
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
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

/// A master with its admin server on any free port: the process and the two addresses.
fn master() -> (Guard, Endpoint, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args([
            "master",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-port",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let rpc = ready
        .strip_prefix("yuebing master ready on ")
        .unwrap()
        .parse()
        .unwrap();
    let admin = lines.next().unwrap().unwrap();
    let admin = admin
        .strip_prefix("yuebing master admin on ")
        .unwrap()
        .to_string();
    let guard = Guard {
        child,
        _stdout: lines,
    };
    (guard, rpc, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncakes_admin_paths_answer_what_the_master_holds() {
    let (_master, rpc, admin) = master();
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
    assert_eq!(found["data"][0]["size"], 10);
    assert_eq!(found["data"][0]["transport_endpoint"], node.ready());
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

    let (status, metrics) = get(&admin, "/metrics");
    assert_eq!(status, 200);
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
