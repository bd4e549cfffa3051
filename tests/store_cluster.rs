//! The store with real processes on 127.0.0.1: a `yuebing master`, `yuebing node`s (tcp forced
//! between nodes), and clients in this process. Short TTLs and leases per test; outcomes are
//! asserted, deadlines with generous ceilings, waits by polling.

mod common;

use std::time::{Duration, Instant};

use common::{Process, TestBytes};
use yuebing::engine::{EngineConfig, TransportKind};
use yuebing::rpc::Endpoint;
use yuebing::store::master::{ClientId, MasterClient, PutConfig};
use yuebing::store::{Client, ClientConfig, Error, Options, Write};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;
use yuebing_testkit::ports::free_port;

/// A pure client (tcp forced) of the master at `master`.
async fn client(master: &Endpoint) -> Client {
    Client::start(ClientConfig {
        masters: vec![master.clone()],
        engine: EngineConfig {
            transport: Some(TransportKind::Tcp),
            ..EngineConfig::default()
        },
        staging_size: 16 << 20,
        heartbeat: Duration::from_millis(200),
        ..ClientConfig::default()
    })
    .await
    .expect("client starts")
}

fn on(nodes: &[&str], n: u32) -> Options {
    Options::put(PutConfig {
        replica_num: n,
        preferred: nodes.iter().map(|s| s.to_string()).collect(),
        ..PutConfig::default()
    })
}

const NONE: &Options = &Options {
    deadline: None,
    put: None,
    write: Write::Put,
    uncached: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_on_one_client_get_on_another_byte_exact_with_typed_errors() {
    let master = Process::master(0, &[]);
    let ep = master.endpoint();
    let a = Process::node(&ep, "64M");
    let b = Process::node(&ep, "64M");
    let (w, r) = (client(&ep).await, client(&ep).await);
    let both = on(&[a.ready(), b.ready()], 2);
    for (i, len) in [1usize, 4096 + 3, (1 << 20) + 7, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let v = pattern(len, i as u64);
        w.put(&format!("k{i}"), &v, &both).await.unwrap();
        assert_eq!(
            r.get(&format!("k{i}"), NONE).await.unwrap(),
            v,
            "{len} bytes"
        );
    }
    // Zero-copy into registered memory, and a buffer too small for the object.
    let buf = r.engine().allocate(2 << 20, true).unwrap();
    buf.put(0, &[0xee; 16]).unwrap();
    let e = r
        .get_into("k2", buf.addr(), 1 << 20, NONE)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidParams { .. }), "{e}");
    let mut head = [0u8; 16];
    buf.get(0, &mut head).unwrap();
    assert_eq!(head, [0xee; 16], "nothing written");
    assert_eq!(
        r.get_into("k2", buf.addr(), 2 << 20, NONE).await.unwrap(),
        (1 << 20) + 7
    );
    let mut got = vec![0u8; (1 << 20) + 7];
    buf.get(0, &mut got).unwrap();
    assert_eq!(got, pattern((1 << 20) + 7, 2));
    // An existing key: ObjectAlreadyExists, the value unchanged.
    let e = w.put("k1", b"other", NONE).await.unwrap_err();
    assert_eq!((e.name(), e.code()), ("ObjectAlreadyExists", -705));
    assert_eq!(r.get("k1", NONE).await.unwrap(), pattern(4096 + 3, 1));
    // Batches report a result per key.
    let items: Vec<(&str, &[u8])> =
        vec![("b1", b"one"), ("k0", b"dup"), ("", b"bad"), ("b2", b"two")];
    let res = w.batch_put(&items, NONE).await.unwrap();
    let codes: Vec<i32> = res
        .iter()
        .map(|x| x.as_ref().map_or_else(|e| e.code(), |_| 0))
        .collect();
    assert_eq!(codes, [0, -705, -600, 0]);
    let got = r.batch_get(&["b2", "nope", "b1"], NONE).await.unwrap();
    assert_eq!(got[0].as_deref().unwrap(), b"two");
    assert_eq!(got[1].as_ref().unwrap_err().code(), -704);
    assert_eq!(got[2].as_deref().unwrap(), b"one");
    let ex = r.batch_exist(&["b1", "nope"], NONE).await.unwrap();
    assert_eq!(
        (ex[0].clone().unwrap(), ex[1].clone().unwrap()),
        (true, false)
    );
    // The zero-copy batch forms, with per-key results too.
    let src = w.engine().allocate(3 * 4096, true).unwrap();
    let data = pattern(3 * 4096, 77);
    src.put(0, &data).unwrap();
    let a = src.addr();
    let items = [
        ("z0", a, 4096),
        ("k0", a + 4096, 4096),
        ("z2", a + 8192, 4096),
    ];
    let res = w.batch_put_from(&items, NONE).await.unwrap();
    let codes: Vec<i32> = res
        .iter()
        .map(|x| x.as_ref().map_or_else(|e| e.code(), |_| 0))
        .collect();
    assert_eq!(codes, [0, -705, 0]);
    let dst = r.engine().allocate(8192, true).unwrap();
    let d = dst.addr();
    let got = r
        .batch_get_into(&[("z2", d, 4096), ("z0", d + 4096, 100)], NONE)
        .await
        .unwrap();
    assert_eq!(*got[0].as_ref().unwrap(), 4096);
    assert_eq!(
        got[1].as_ref().unwrap_err().code(),
        -600,
        "buffer too small"
    );
    let mut back = vec![0u8; 4096];
    dst.get(0, &mut back).unwrap();
    assert_eq!(back, data[8192..]);
    assert_eq!(r.get_size("k3", NONE).await.unwrap(), 5 << 20);
    w.put("b1", b"ONE!", Options::upsert()).await.unwrap();
    assert_eq!(r.get("b1", NONE).await.unwrap(), b"ONE!");
    r.remove("b1", true, NONE).await.unwrap();
    assert_eq!(r.get("b1", NONE).await.unwrap_err().code(), -704);
    assert!(r.list("k", 10, NONE).await.unwrap().len() == 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_takes_only_its_unreplicated_objects() {
    let master = Process::master(0, &["--client-ttl-ms", "1000"]);
    let ep = master.endpoint();
    let mut a = Process::node(&ep, "32M");
    let b = Process::node(&ep, "32M");
    let c = client(&ep).await;
    c.put("solo", &pattern(1000, 1), &on(&[a.ready()], 1))
        .await
        .unwrap();
    c.put("pair", &pattern(3000, 2), &on(&[a.ready(), b.ready()], 2))
        .await
        .unwrap();
    a.kill();
    eventually(
        "solo gone after the client TTL",
        Duration::from_secs(15),
        || async {
            match c.get("solo", NONE).await {
                Err(e) if e.code() == -704 => Some(()),
                _ => None,
            }
        },
    )
    .await;
    assert_eq!(c.get("pair", NONE).await.unwrap(), pattern(3000, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_without_data_dir_gets_remounted_and_takes_new_puts() {
    let port = free_port();
    // The remounted range takes replicas one lease TTL after the restart.
    let flags = ["--client-ttl-ms", "2000", "--lease-ttl-ms", "2000"];
    let mut master = Process::master(port, &flags);
    let ep = master.endpoint();
    let _n = Process::node(&ep, "32M");
    let c = client(&ep).await;
    c.put("before", b"x", NONE).await.unwrap();
    master.kill();
    let _master = Process::master(port, &flags);
    let quick = Options::deadline(Duration::from_secs(1));
    eventually(
        "a put after the restart",
        Duration::from_secs(15),
        || async { c.put("after", b"y", &quick).await.ok() },
    )
    .await;
    assert_eq!(c.get("after", NONE).await.unwrap(), b"y");
    assert_eq!(
        c.get("before", NONE).await.unwrap_err().code(),
        -704,
        "memory only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_with_data_dir_serves_committed_objects_once_nodes_remount() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let port = free_port();
    let mut master = Process::master(port, &["--data-dir", d]);
    let ep = master.endpoint();
    let _n = Process::node(&ep, "32M");
    let c = client(&ep).await;
    let v = pattern(100_000, 9);
    c.put("kept", &v, NONE).await.unwrap();
    master.signal(libc::SIGKILL);
    master.kill();
    let _master = Process::master(port, &["--data-dir", d]);
    let got = eventually("kept readable again", Duration::from_secs(15), || async {
        c.get("kept", NONE).await.ok()
    })
    .await;
    assert_eq!(got, v);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_whose_transfer_outlives_the_lease_is_lease_expired() {
    let master = Process::master(0, &["--lease-ttl-ms", "1"]);
    let ep = master.endpoint();
    let _n = Process::node(&ep, "64M");
    let c = client(&ep).await;
    c.put("big", &pattern(16 << 20, 3), NONE).await.unwrap();
    let e = c.get("big", NONE).await.unwrap_err();
    assert_eq!((e.name(), e.code()), ("LeaseExpired", -707));
    let res = c.batch_get(&["big"], NONE).await.unwrap();
    assert_eq!(
        res[0].as_ref().unwrap_err().code(),
        -707,
        "batch get checks the lease too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_holder_costs_at_most_the_deadline_then_is_avoided() {
    let master = Process::master(0, &[]);
    let ep = master.endpoint();
    let a = Process::node(&ep, "32M");
    let b = Process::node(&ep, "32M");
    let c = client(&ep).await;
    let v = pattern(64 << 10, 5);
    c.put("twice", &v, &on(&[a.ready(), b.ready()], 2))
        .await
        .unwrap();
    // The reader tries replicas in the master's order: stop the first one's node.
    let list = MasterClient::new(ep.clone(), ClientId(1))
        .get_replica_list("twice")
        .await
        .unwrap();
    let first = if list.replicas[0].node == a.ready() {
        &a
    } else {
        &b
    };
    first.signal(libc::SIGSTOP);
    let started = Instant::now();
    match c
        .get("twice", &Options::deadline(Duration::from_millis(100)))
        .await
    {
        Ok(got) => assert_eq!(got, v, "served by the other replica"),
        Err(e) => assert_eq!((e.name(), e.code()), ("StoreTimeout", -1501), "{e}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let got = c
        .get("twice", &Options::deadline(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(got, v, "the next get goes to the other replica");
    first.signal(libc::SIGCONT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_costs_at_most_the_deadline_then_answers_again() {
    let master = Process::master(0, &[]);
    let ep = master.endpoint();
    let c = client(&ep).await;
    assert!(!c.exist("nothing", NONE).await.unwrap());
    master.signal(libc::SIGSTOP);
    let started = Instant::now();
    let err = c
        .exist("nothing", &Options::deadline(Duration::from_millis(150)))
        .await
        .unwrap_err();
    let took = started.elapsed();
    master.signal(libc::SIGCONT);
    assert_eq!((err.name(), err.code()), ("StoreTimeout", -1501), "{err}");
    assert!(
        took >= Duration::from_millis(150),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    let answered = c
        .exist("nothing", &Options::deadline(Duration::from_secs(5)))
        .await;
    assert!(!answered.unwrap(), "the master answers again");
}
