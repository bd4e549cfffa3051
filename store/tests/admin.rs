//! The master's admin server in process: what it holds of the master, and where its metrics go.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use yuebing_store::master::{
    ClientId, MasterClient, MasterServerConfig, MountSpec, PutConfig, RunningMaster,
};
use yuebing_store::MetricsRegistry;

/// `GET path` on `addr`: the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

async fn master(metrics: MetricsRegistry) -> RunningMaster {
    let cfg = MasterServerConfig {
        metrics,
        ..MasterServerConfig::default()
    };
    RunningMaster::start(cfg, &"127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_dropped_under_its_admin_server_is_gone() {
    let m = master(MetricsRegistry::prometheus()).await;
    let admin = m.serve_admin("127.0.0.1:0").await.unwrap();
    let at = admin.local_addr();
    assert_eq!(get(at, "/ready").await, (200, "ready\n".into()));
    drop(m);
    // The admin server held the master weakly: it says so rather than answer for it (once
    // the master's own tasks, which the drop stops, let go of it).
    let what = "/ready to say the master is gone";
    yuebing_testkit::eventually(what, std::time::Duration::from_secs(5), async || {
        get(at, "/ready").await == (503, "the master is gone\n".to_string())
    })
    .await;
    assert_eq!(get(at, "/metrics").await.0, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_go_where_the_master_is_told() {
    // An application's own recorder: the master registers on it, and /metrics has nothing
    // to render.
    let recorder = Arc::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    let theirs = recorder.handle();
    let m = master(MetricsRegistry::from_recorder(recorder)).await;
    let admin = m.serve_admin("127.0.0.1:0").await.unwrap();
    let (status, body) = get(admin.local_addr(), "/metrics").await;
    assert_eq!(status, 404, "{body}");
    assert!(theirs
        .render()
        .contains("# TYPE yuebing_master_puts_total counter"));
    drop((admin, m));

    // Off: nothing is registered anywhere.
    let m = master(MetricsRegistry::off()).await;
    let admin = m.serve_admin("127.0.0.1:0").await.unwrap();
    assert_eq!(get(admin.local_addr(), "/metrics").await.0, 404);
    assert_eq!(get(admin.local_addr(), "/ready").await.0, 200);
}

/// The value of the sample `name` (without labels) in Prometheus text.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_a_log_counts_what_it_does() {
    let m = master(MetricsRegistry::prometheus()).await;
    let admin = m.serve_admin("127.0.0.1:0").await.unwrap();
    let c = MasterClient::new(m.local_endpoint().clone(), ClientId(1));
    c.mount(vec![MountSpec {
        node: "node-a".into(),
        base: 0x10_0000,
        len: 64 << 20,
    }])
    .await
    .unwrap();
    for key in ["a", "b"] {
        c.put_start(key, 1000, &PutConfig::default(), yuebing_store::Write::Put)
            .await
            .unwrap();
        c.put_end(key).await.unwrap();
    }
    c.get_replica_list("a").await.unwrap();
    c.remove("b", false).await.unwrap();
    let (status, text) = get(admin.local_addr(), "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(sample(&text, "yuebing_master_puts_total"), 2.0);
    assert_eq!(sample(&text, "yuebing_master_gets_total"), 1.0);
    assert_eq!(sample(&text, "yuebing_master_removals_total"), 1.0);
    assert_eq!(sample(&text, "yuebing_master_leases_held"), 1.0);
    assert_eq!(sample(&text, "yuebing_master_objects"), 1.0);
    // The client's pool holds a connection open.
    let open = r#"yuebing_rpc_server_connections{service="master"} "#;
    let n: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(open)?.parse().ok())
        .unwrap_or_else(|| panic!("{open} not in\n{text}"));
    assert!(n >= 1.0, "{n}");
    assert!(
        text.contains("yuebing_master_segment_capacity_bytes{segment=\"node-a\"} 67108864\n"),
        "{text}"
    );
}
