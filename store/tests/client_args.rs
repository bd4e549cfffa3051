//! The client checks its arguments where they enter, before any round trip: an empty key, a
//! buffer at address 0, of length 0 or past the address space, an empty value, a put config of
//! no replicas are `InvalidParams` (-600) naming the argument, as the master would answer;
//! in a batch, for that item only.

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, PutConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Error, Options};

mod common;
use common::master_and_client;

/// `InvalidParams` whose message names `what`.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(e) => assert!(
            e.code() == -600 && e.to_string().contains(what),
            "want InvalidParams naming {what:?}, got {e} ({})",
            e.code()
        ),
        Ok(v) => panic!("want InvalidParams naming {what:?}, got Ok({v:?})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_buffers_are_invalid_params_not_a_transfer_error() {
    let (_master, c) = master_and_client().await;
    let opts = Options::deadline(Duration::from_secs(10));
    let buf = c.engine().allocate(1 << 16, true).unwrap();
    c.put("k", b"value", &opts).await.unwrap();

    refused(c.put_from("new", 0, 10, &opts).await, "addr");
    refused(c.put_from("new", 0, 10, Options::upsert()).await, "addr");
    refused(c.put_from("new", buf.addr(), 0, &opts).await, "len");
    refused(
        c.put_from("new", u64::MAX - 4, 16, &opts).await,
        "overflows",
    );
    refused(c.get_into("k", 0, 10, &opts).await, "addr");
    refused(c.get_into("k", buf.addr(), 0, &opts).await, "len");
    refused(c.get_into("k", u64::MAX - 4, 16, &opts).await, "overflows");
    let found = c.locate("k", &opts).await.unwrap();
    refused(c.read_located(&found, 0, 10, &opts).await, "addr");
    // Nothing was started for the refused puts.
    assert!(!c.exist("new", &opts).await.unwrap());
    assert_eq!(c.stats(&opts).await.unwrap().pending_writes, 0);

    // In a batch, only the bad item is refused.
    let r = c
        .batch_put_from(&[("a", 0, 10), ("b", buf.addr(), 10)], &opts)
        .await
        .unwrap();
    refused(r[0].clone(), "addr");
    r[1].as_ref().unwrap();
    let r = c
        .batch_get_into(&[("b", buf.addr(), 0), ("b", buf.addr(), 64)], &opts)
        .await
        .unwrap();
    refused(r[0].clone(), "len");
    assert_eq!(r[1].as_ref().unwrap(), &10);
    let r = c
        .batch_put(&[("", &b"v"[..]), ("c", b"")], &opts)
        .await
        .unwrap();
    refused(r[0].clone(), "key");
    refused(r[1].clone(), "size");
    let r = c.batch_exist(&["", "b"], &opts).await.unwrap();
    refused(r[0].clone(), "key");
    assert!(r[1].as_ref().unwrap());
    // An empty batch has an empty answer.
    assert!(c.batch_get(&[] as &[&str], &opts).await.unwrap().is_empty());
    assert!(c
        .batch_put_from(&[] as &[(&str, u64, u64)], &opts)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_refused_before_any_round_trip() {
    let (master, c) = master_and_client().await;
    let buf = c.engine().allocate(1 << 16, true).unwrap();
    master.shutdown(Duration::from_secs(1)).await;
    // No master answers now: a call that went out would be an rpc error or a timeout.
    let opts = Options::deadline(Duration::from_secs(2));
    refused(c.get("", &opts).await, "key");
    refused(c.exist("", &opts).await, "key");
    refused(c.get_size("", &opts).await, "key");
    refused(c.remove("", false, &opts).await, "key");
    refused(c.locate("", &opts).await, "key");
    refused(c.replicas("", &opts).await, "key");
    refused(c.get_or_locate("", 10, &opts).await, "key");
    refused(c.put("", b"v", &opts).await, "key");
    refused(c.put("", b"v", Options::upsert()).await, "key");
    refused(c.put("k", b"", &opts).await, "size");
    refused(c.put_parts("k", &[b"", b""], &opts).await, "size");
    refused(c.put_from("", buf.addr(), 10, &opts).await, "key");
    refused(c.get_into("", buf.addr(), 10, &opts).await, "key");
    refused(c.remove_by_regex("", false, &opts).await, "pattern");
    let none = Options {
        put: Some(PutConfig {
            replica_num: 0,
            ..PutConfig::default()
        }),
        ..opts.clone()
    };
    refused(c.put("k", b"v", &none).await, "replica_num");
    let nameless = Options::put(PutConfig {
        preferred: vec!["n1".into(), String::new()],
        ..PutConfig::default()
    });
    refused(c.put("k", b"v", &nameless).await, "preferred[1]");
    let r = c.batch_put(&[("k", b"v")], &none).await.unwrap();
    refused(r[0].clone(), "replica_num");
    let r = c.batch_get(&["", ""], &opts).await.unwrap();
    refused(r[0].clone(), "key");
    refused(r[1].clone(), "key");
    let r = c.batch_remove(&[""], false, &opts).await.unwrap();
    refused(r[0].clone(), "key");
    let r = c.batch_replicas(&[""], &opts).await.unwrap();
    refused(r[0].clone(), "key");
    assert!(c
        .batch_exist(&[] as &[&str], &opts)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_configured_to_spin_or_to_time_out_at_once_does_not_start() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let cfg = ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        ..ClientConfig::default()
    };
    let zero = ClientConfig {
        heartbeat: Duration::ZERO,
        ..cfg.clone()
    };
    refused(Client::start(zero).await, "heartbeat");
    let zero = ClientConfig {
        deadline: Duration::ZERO,
        ..cfg.clone()
    };
    refused(Client::start(zero).await, "deadline");
    // A lease cache whose table would not fit in memory is refused, not allocated.
    let huge = ClientConfig {
        lease_cache: usize::MAX,
        ..cfg
    };
    refused(Client::start(huge).await, "lease_cache");
}
