//! The store client through the bridge, from plain threads: the blocking forms and the
//! callback forms of the same calls, against a master on the bridge's runtime; and a client
//! sharing an engine that outlives it.

use std::time::Duration;

use yuebing_bridge::{BlockingClient, BlockingEngine, BlockingMaster, Bridge, BridgeConfig};
use yuebing_engine::{EngineConfig, RemoteAccess};
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{ClientConfig, ClientHealth, Fetched, Options, Write};

#[test]
fn a_store_client_is_used_from_plain_threads_and_callbacks() {
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let handle = bridge.handle().clone();
    let bind: yuebing_rpc::Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = bridge
        .block_on(async move {
            RunningMaster::start_on(MasterServerConfig::default(), &bind, handle).await
        })
        .unwrap();
    let cfg = ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 16 << 20,
        ..ClientConfig::default()
    };
    let client = BlockingClient::start(&bridge, cfg).unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let upsert = opts.clone().with_write(Write::Upsert);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, opts) = (&client, &opts);
            s.spawn(move || {
                for i in 0..10 {
                    let key = format!("t{t}/k{i}");
                    let value = vec![(t * 10 + i) as u8; 4096 + i];
                    client.put(&key, &value, opts).unwrap();
                    assert!(client.exist(&key, opts).unwrap());
                    assert_eq!(client.get(&key, opts).unwrap(), value);
                }
            });
        }
    });
    // An existing key keeps its typed error and code through the bridge.
    let e = client.put("t0/k0", b"again", &opts).unwrap_err();
    assert_eq!(e.code(), -705, "{e}");
    // The callback form of the same calls.
    let (tx, rx) = std::sync::mpsc::channel();
    client
        .call(|c| c.get("t1/k1", &opts))
        .then(move |r| tx.send(r).unwrap());
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(got, vec![11u8; 4097]);
    let (tx, rx) = std::sync::mpsc::channel();
    client
        .call(|c| c.get("missing", &opts))
        .then(move |r| tx.send(r).unwrap());
    let e = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), -704, "{e}");
    // Read leases from the gets above are still held: a forced remove.
    client.remove("t0/k0", true, &opts).unwrap();
    assert!(!client.exist("t0/k0", &opts).unwrap());

    // The rest of the store's calls, blocking.
    client.put("t1/k1", b"new", upsert.clone()).unwrap();
    assert_eq!(client.get_size("t1/k1", &opts).unwrap(), 3);
    let puts = client
        .batch_put(&[("b/0", b"zero"), ("b/1", b"one"), ("t1/k2", b"x")], &opts)
        .unwrap();
    assert!(puts[0].is_ok() && puts[1].is_ok());
    assert_eq!(puts[2].as_ref().unwrap_err().code(), -705);
    let got = client.batch_get(&["b/0", "b/1", "b/none"], &opts).unwrap();
    assert_eq!(got[0].as_deref().unwrap(), b"zero");
    assert_eq!(got[1].as_deref().unwrap(), b"one");
    assert_eq!(got[2].as_ref().unwrap_err().code(), -704);
    let exist = client.batch_exist(&["b/0", "b/none"], &opts).unwrap();
    assert!(*exist[0].as_ref().unwrap() && !*exist[1].as_ref().unwrap());
    let listed = client.list("b/", 10, &opts).unwrap();
    let names: Vec<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(names, ["b/0", "b/1"]);
    let stats = client.stats(&opts).unwrap();
    assert_eq!(stats.objects, 81, "{stats:?}");
    let admin = BlockingMaster::connect(&bridge, master.local_endpoint().clone(), None).unwrap();
    assert!(admin.health().unwrap().ready);
    assert_eq!(admin.stats().unwrap().objects, 81);

    // Registered memory: put_from and get_into, single and batch.
    let buf = client.client().engine().allocate(1 << 16, true).unwrap();
    // SAFETY: no transfer from or into `buf` is under way.
    unsafe { buf.write_at(0, &[9u8; 4096]) }.unwrap();
    client.put_from("r/0", buf.addr(), 4096, &opts).unwrap();
    let each = client
        .batch_put_from(&[("r/1", buf.addr(), 100), ("r/2", buf.addr(), 200)], &opts)
        .unwrap();
    assert!(each.iter().all(|r| r.is_ok()), "{each:?}");
    assert_eq!(
        client
            .get_into("r/0", buf.addr() + 8192, 8192, &opts)
            .unwrap(),
        4096
    );
    let sizes = client
        .batch_get_into(
            &[
                ("r/1", buf.addr() + 20000, 100),
                ("r/2", buf.addr() + 30000, 100),
            ],
            &opts,
        )
        .unwrap();
    assert_eq!(*sizes[0].as_ref().unwrap(), 100);
    // A buffer smaller than its object is that key's error; nothing is written there.
    assert!(sizes[1].is_err());
    let mut back = vec![0u8; 4096];
    // SAFETY: the get_into above returned, so its transfer is final.
    unsafe { buf.read_at(8192, &mut back) }.unwrap();
    assert_eq!(back, vec![9u8; 4096]);
    // In two steps: small values come at once, larger ones are located, then read.
    match client.get_or_locate("r/0", 4096, &opts).unwrap() {
        Fetched::Value(v) => assert_eq!(v, vec![9u8; 4096]),
        other => panic!("4096 bytes come inline at 4096: {other:?}"),
    }
    let Fetched::Located(found) = client.get_or_locate("r/0", 100, &opts).unwrap() else {
        panic!("4096 bytes are located at 100");
    };
    assert_eq!(found.size(), 4096);
    assert_eq!(
        client
            .read_located(&found, buf.addr() + 40000, 4096, &opts)
            .unwrap(),
        4096
    );
    // SAFETY: the read above returned, so its transfer is final.
    unsafe { buf.read_at(40000, &mut back) }.unwrap();
    assert_eq!(back, vec![9u8; 4096]);
    // Mooncake's extra calls: a put from parts, batch and pattern removal, health, hostname.
    client
        .put_parts("p/0", &[b"ab", b"cd", b"ef"], &opts)
        .unwrap();
    assert_eq!(client.get("p/0", &opts).unwrap(), b"abcdef");
    client
        .put_parts("p/0", &[b"x", b"y"], upsert.clone())
        .unwrap();
    assert_eq!(client.get("p/0", &opts).unwrap(), b"xy");
    let upserted = client
        .batch_put(&[("p/0", b"one"), ("p/1", b"two")], upsert.clone())
        .unwrap();
    assert!(upserted.iter().all(|r| r.is_ok()), "{upserted:?}");
    assert_eq!(client.get("p/0", &opts).unwrap(), b"one");
    let each = client
        .batch_put_from(&[("p/1", buf.addr(), 5)], upsert.clone())
        .unwrap();
    assert!(each[0].is_ok());
    assert_eq!(client.get("p/1", &opts).unwrap(), [9u8; 5]);
    let removed = client
        .batch_remove(&["p/0", "p/none", "p/1"], true, &opts)
        .unwrap();
    assert!(removed[0].is_ok() && removed[2].is_ok());
    assert_eq!(removed[1].as_ref().unwrap_err().code(), -704);
    assert_eq!(client.remove_by_regex("^r/[12]$", true, &opts).unwrap(), 2);
    assert_eq!(
        client.remove_by_regex("(", true, &opts).unwrap_err().code(),
        -600
    );
    assert_eq!(client.hostname(), client.client().engine().name());
    let where_ = client.replicas("t1/k1", &opts).unwrap();
    assert_eq!((where_.size, where_.replicas.len()), (3, 1));
    assert_eq!(where_.replicas[0].node, client.hostname());
    let each = client.batch_replicas(&["t1/k1", "p/none"], &opts).unwrap();
    assert_eq!(each[0].as_ref().unwrap().size, 3);
    assert_eq!(each[1].as_ref().unwrap_err().code(), -704);
    let health = client.health_check(&opts).unwrap();
    assert_eq!((health, health.code()), (ClientHealth::Healthy, 0));
    assert_eq!(client.remove_all(true, &opts).unwrap(), 82);
    client.close(&opts).unwrap();
    assert_eq!(client.health_check(&opts).unwrap(), ClientHealth::Closed);
    drop(client);
    let report = bridge
        .block_on(async move {
            Ok::<_, yuebing_bridge::Error>(master.shutdown(Duration::from_secs(1)).await)
        })
        .unwrap();
    assert_eq!(report.cut, 0);
    bridge.shutdown().unwrap();
}

#[test]
fn a_store_client_shares_an_engine_that_outlives_it() {
    let bridge = Bridge::new(BridgeConfig::default()).unwrap();
    let handle = bridge.handle().clone();
    let bind: yuebing_rpc::Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = bridge
        .block_on(async move {
            RunningMaster::start_on(MasterServerConfig::default(), &bind, handle).await
        })
        .unwrap();
    let engine = BlockingEngine::start(&bridge, EngineConfig::default()).unwrap();
    let cfg = ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    };
    // Another cluster token than the engine's is refused before anything is mounted.
    let other = ClientConfig {
        token: Some(yuebing_rpc::Token::new("secret".to_string()).unwrap()),
        ..cfg.clone()
    };
    let e = BlockingClient::with_engine(&bridge, other, engine.engine().clone()).unwrap_err();
    assert_eq!(e.code(), -600, "{e}");

    let client = BlockingClient::with_engine(&bridge, cfg, engine.engine().clone()).unwrap();
    assert_eq!(client.hostname(), engine.name());
    let opts = Options::deadline(Duration::from_secs(10));
    client.put("k", b"value", &opts).unwrap();
    assert_eq!(client.get("k", &opts).unwrap(), b"value");
    // Memory the caller registers with the shared engine serves the client's zero-copy calls.
    let buf = engine.allocate(1 << 16, true).unwrap();
    // SAFETY: no transfer from or into `buf` is under way.
    unsafe { buf.write_at(0, &[5u8; 100]) }.unwrap();
    client
        .put_from("k", buf.addr(), 100, opts.clone().with_write(Write::Upsert))
        .unwrap();
    assert_eq!(client.get("k", &opts).unwrap(), [5u8; 100]);
    let where_ = client.replicas("k", &opts).unwrap();
    assert_eq!(where_.replicas[0].node, engine.name());
    client.close(&opts).unwrap();
    drop(client);

    // The engine still serves: a transfer into its own exported memory and back.
    let target = engine
        .allocate_exported(4096, true, RemoteAccess::READ_WRITE)
        .unwrap();
    let own = engine.open_segment(engine.name()).unwrap();
    engine.write(buf.addr(), own, target.addr(), 100).unwrap();
    engine
        .read(buf.addr() + 4096, own, target.addr(), 100)
        .unwrap();
    let mut back = vec![0u8; 100];
    // SAFETY: the read returned, so its transfer is final.
    unsafe { buf.read_at(4096, &mut back) }.unwrap();
    assert_eq!(back, [5u8; 100]);
    bridge
        .block_on(async move {
            Ok::<_, yuebing_bridge::Error>(master.shutdown(Duration::from_secs(1)).await)
        })
        .unwrap();
    bridge.shutdown().unwrap();
}
