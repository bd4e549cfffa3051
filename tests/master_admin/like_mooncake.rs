//! `/get_all_segments` and `/query_key` answer as the stock Mooncake master does. The stock
//! master's answers for a few cluster shapes are checked in (`tests/fixtures/mooncake_admin/
//! answers.json`, captured by `scripts/capture_mooncake_admin.sh` from the wheel
//! `mooncake-transfer-engine-non-cuda` with two Python clients); this test builds the same
//! shapes with a `yuebing master` and two clients, asks the same paths in the same order, and
//! compares status, content type and body with the run-to-run parts named: segment names by
//! the client they belong to, replica addresses and transport endpoints by their form.

use std::time::Duration;

use serde_json::Value;
use yuebing::rpc::Endpoint;
use yuebing::store::master::PutConfig;
use yuebing::store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;

use super::{get_typed, master};

/// Each client's store space, and the second range client A mounts: as the capture's.
const SEGMENT: u64 = 16 << 20;
/// Every key's value: as the capture's (10 bytes).
const VALUE: &[u8] = b"0123456789";
/// The shape whose answers came from a standby (checked by the elected masters' test in
/// `tests/master_admin.rs`, with the `etcd` feature).
const STANDBY: &str = "standby (of two masters with --enable_ha)";

/// The stock master's answers and the names its clients went by.
struct Stock {
    cases: Vec<Value>,
    clients: Vec<(String, String)>,
}

impl Stock {
    fn load() -> Stock {
        let all: Value =
            serde_json::from_str(include_str!("../fixtures/mooncake_admin/answers.json")).unwrap();
        assert_eq!(all["value_bytes"], VALUE.len());
        assert_eq!(all["segment_bytes"], SEGMENT);
        let clients = all["clients"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(label, name)| (name.as_str().unwrap().to_string(), label.clone()))
            .collect();
        Stock {
            cases: all["cases"].as_array().unwrap().clone(),
            clients,
        }
    }
}

/// `/get_all_segments`' body as the labels of its lines' clients, sorted (the stock master's
/// order is its hash map's); every line ends in a newline.
fn segment_labels(body: &str, clients: &[(String, String)]) -> Vec<String> {
    assert!(body.is_empty() || body.ends_with('\n'), "{body:?}");
    let mut labels: Vec<String> = body
        .lines()
        .map(|line| {
            let (_, label) = clients
                .iter()
                .find(|(name, _)| name == line)
                .unwrap_or_else(|| panic!("{line:?} is no client's segment in {body:?}"));
            label.clone()
        })
        .collect();
    labels.sort();
    labels
}

/// A `/query_key` body with each `"buffer_address_":N` written `"buffer_address_":ADDRESS` and
/// each `"transport_endpoint_":"127.0.0.1:PORT"` written `"transport_endpoint_":"HOST:PORT"`.
fn replicas_named(body: &str) -> String {
    let mut out = body.to_string();
    for (field, quoted) in [("buffer_address_", false), ("transport_endpoint_", true)] {
        let tag = format!("\"{field}\":");
        let mut done = String::new();
        while let Some(at) = out.find(&tag) {
            let (head, rest) = out.split_at(at + tag.len());
            done.push_str(head);
            let end = if quoted {
                let value = rest.strip_prefix('"').expect("a string");
                let len = value.find('"').expect("a closed string");
                let endpoint = &value[..len];
                let port = endpoint.strip_prefix("127.0.0.1:");
                assert!(
                    port.is_some_and(|p| p.parse::<u16>().is_ok()),
                    "{endpoint:?} in {body}"
                );
                done.push_str("\"HOST:PORT\"");
                len + 2
            } else {
                let len = rest.bytes().take_while(u8::is_ascii_digit).count();
                assert!(len > 0, "an address in {body}");
                done.push_str("ADDRESS");
                len
            };
            out = rest[end..].to_string();
        }
        done.push_str(&out);
        out = done;
    }
    out
}

/// Asks our master's admin server every path the stock master was asked in `shape`, and
/// compares the answers: the number of cases checked.
fn check_shape(stock: &Stock, admin: &str, ours: &[(String, String)], shape: &str) -> usize {
    let cases: Vec<&Value> = stock.cases.iter().filter(|c| c["shape"] == shape).collect();
    assert!(!cases.is_empty(), "no stock answers for {shape:?}");
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let path = case["path"].as_str().unwrap();
        let (status, content_type, body) = get_typed(admin, path);
        let want = case["body"].as_str().unwrap();
        assert_eq!(
            u64::from(status),
            case["status"],
            "{name}: {path} -> {body}"
        );
        assert_eq!(content_type, case["content_type"], "{name}: {path}");
        if path.starts_with("/get_all_segments") && status == 200 {
            assert_eq!(
                segment_labels(&body, ours),
                segment_labels(want, &stock.clients),
                "{name}: {body:?}, the stock master's {want:?}"
            );
        } else {
            assert_eq!(replicas_named(&body), replicas_named(want), "{name}");
        }
    }
    cases.len()
}

/// A client of `master` with `SEGMENT` of store space.
async fn client(master: &Endpoint) -> Client {
    Client::start(ClientConfig {
        masters: vec![master.clone()],
        store_size: SEGMENT,
        ..ClientConfig::default()
    })
    .await
    .unwrap()
}

/// Waits until `/get_all_segments` lists these clients' labels.
async fn listed(admin: &str, ours: &[(String, String)], labels: &[&str]) {
    eventually(
        &format!("segments {labels:?}"),
        Duration::from_secs(20),
        async || {
            let (_, _, body) = get_typed(admin, "/get_all_segments");
            (segment_labels(&body, ours) == labels).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_and_key_queries_answer_as_the_stock_master() {
    let stock = Stock::load();
    let (_master, rpc, admin) = master(&[]);
    let mut ours = Vec::new();
    let mut checked = check_shape(&stock, &admin, &ours, "no client");

    let a = client(&rpc).await;
    ours.push((a.hostname().to_string(), "A".to_string()));
    listed(&admin, &ours, &["A"]).await;
    a.put("mc/known", VALUE, Options::default()).await.unwrap();
    a.put("mc/c+d", VALUE, Options::default()).await.unwrap();
    checked += check_shape(&stock, &admin, &ours, "client A, one segment");

    let b = client(&rpc).await;
    ours.push((b.hostname().to_string(), "B".to_string()));
    listed(&admin, &ours, &["A", "B"]).await;
    let two = PutConfig {
        replica_num: 2,
        ..PutConfig::default()
    };
    b.put("mc/two", VALUE, Options::put(two)).await.unwrap();
    checked += check_shape(&stock, &admin, &ours, "clients A and B, one segment each");

    a.mount_space(SEGMENT, Options::default()).await.unwrap();
    listed(&admin, &ours, &["A", "A", "B"]).await;
    checked += check_shape(
        &stock,
        &admin,
        &ours,
        "clients A (two segments) and B (one)",
    );
    let standby = stock.cases.iter().filter(|c| c["shape"] == STANDBY).count();
    assert_eq!(
        checked + standby,
        stock.cases.len(),
        "every stock answer compared"
    );
}

/// The standby master whose admin server is on `admin` answers as the stock standby did.
#[cfg(feature = "etcd")]
pub(super) fn standby_answers_as_the_stock_master(admin: &str) {
    check_shape(&Stock::load(), admin, &[], STANDBY);
}
