//! The store client through the bridge, from plain threads: the blocking forms and the
//! callback forms of the same calls, against a master on the bridge's runtime.

use std::time::Duration;

use yuebing_bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{ClientConfig, Options};

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
        .get_call("t1/k1", &opts)
        .then(move |r| tx.send(r).unwrap());
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(got, vec![11u8; 4097]);
    let (tx, rx) = std::sync::mpsc::channel();
    client
        .get_call("missing", &opts)
        .then(move |r| tx.send(r).unwrap());
    let e = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), -704, "{e}");
    // Read leases from the gets above are still held: a forced remove.
    client.remove("t0/k0", true, &opts).unwrap();
    assert!(!client.exist("t0/k0", &opts).unwrap());
    client.close(&opts).unwrap();
    drop(client);
    let report = bridge
        .block_on(async move {
            Ok::<_, yuebing_bridge::Error>(master.shutdown(Duration::from_secs(1)).await)
        })
        .unwrap();
    assert_eq!(report.cut, 0);
    bridge.shutdown().unwrap();
}
