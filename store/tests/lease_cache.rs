//! Leased locations: a read of a key this client read before, while the lease lasts, goes
//! straight to a replica. What it may return, and how it falls back.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::calls;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, PutConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

async fn master(lease_ttl_ms: u64) -> RunningMaster {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.lease_ttl_ms = lease_ttl_ms;
    RunningMaster::start(cfg, &bind).await.unwrap()
}

async fn client(master: &RunningMaster, store_size: u64) -> Client {
    Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size,
        lease_cache: 1024,
        ..ClientConfig::default()
    })
    .await
    .unwrap()
}

fn on(node: &Client) -> Options {
    Options::put(PutConfig {
        replica_num: 1,
        preferred: vec![node.engine().name().to_string()],
        ..PutConfig::default()
    })
}

fn within(d: Duration) -> Options {
    Options::deadline(d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_read_goes_to_the_replica_without_the_master() {
    let m = master(10_000).await;
    let node = client(&m, 8 << 20).await;
    let reader = client(&m, 0).await;
    node.put("k", &[7u8; 4096], &Options::default())
        .await
        .unwrap();
    node.put("j", &[8u8; 4096], &Options::default())
        .await
        .unwrap();
    let opts = within(Duration::from_secs(5));
    assert_eq!(reader.get("k", &opts).await.unwrap(), [7u8; 4096]);
    let got = reader.batch_get(&["k", "j"], &opts).await.unwrap();
    assert_eq!(got[0].as_ref().unwrap(), &[7u8; 4096]);
    assert_eq!(got[1].as_ref().unwrap(), &[8u8; 4096]);
    // The master is gone: reads of the keys read before still succeed, from their replicas.
    m.shutdown(Duration::ZERO).await;
    let short = within(Duration::from_millis(500));
    assert_eq!(reader.get("k", &short).await.unwrap(), [7u8; 4096]);
    let got = reader.batch_get(&["j", "k"], &short).await.unwrap();
    assert_eq!(got[0].as_ref().unwrap(), &[8u8; 4096]);
    assert_eq!(got[1].as_ref().unwrap(), &[7u8; 4096]);
    let buf = reader.engine().allocate(4096, true).unwrap();
    assert_eq!(
        reader
            .get_into("j", buf.addr(), 4096, &short)
            .await
            .unwrap(),
        4096
    );
    // Asked not to use the cache, or for a key never read, the read needs the master.
    assert!(reader.get("k", short.clone().uncached()).await.is_err());
    assert!(reader.get("never-read", &short).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_own_writes_and_removals() {
    let m = master(10_000).await;
    let c = client(&m, 8 << 20).await;
    let opts = within(Duration::from_secs(5));
    c.put("k", &[1u8; 1000], &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), [1u8; 1000]);
    c.put("k", &[2u8; 2000], Options::upsert()).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), [2u8; 2000]);
    c.batch_put(&[("k", &[3u8; 1000][..])], Options::upsert())
        .await
        .unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(
        c.batch_get(&["k"], &opts).await.unwrap()[0],
        Ok(vec![3u8; 1000])
    );
    c.remove("k", true, &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap_err().code(), -704);
    c.put("k", &[4u8; 10], &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap(), [4u8; 10]);
    c.remove_all(true, &opts).await.unwrap();
    assert_eq!(c.get("k", &opts).await.unwrap_err().code(), -704);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_under_a_writer_sees_whole_values_no_older_than_its_lease() {
    // A long lease: the reader's cached location outlives many upserts.
    const TTL: Duration = Duration::from_millis(1500);
    const SIZE: usize = 64 << 10;
    let m = master(TTL.as_millis() as u64).await;
    let node = client(&m, 32 << 20).await;
    let writer = client(&m, 0).await;
    let reader = client(&m, 0).await;
    let opts = within(Duration::from_secs(10));
    writer.put("k", &vec![0u8; SIZE], &opts).await.unwrap();
    // Read once before the writer starts: from then on the reader's lease (renewed in the
    // background as it reads) keeps every upsert out of the space it reads.
    assert_eq!(reader.get("k", &opts).await.unwrap(), vec![0u8; SIZE]);
    // (version, when its upsert returned): version v is current from its return until v+1's.
    let done = Arc::new(Mutex::new(vec![(0u32, Instant::now())]));
    let latest = Arc::new(AtomicU32::new(0));
    let stop = Instant::now() + Duration::from_secs(5);
    let writing = {
        let (done, latest, writer) = (done.clone(), latest.clone(), writer.clone());
        tokio::spawn(async move {
            let mut v = 0u32;
            while Instant::now() < stop {
                v += 1;
                let value = vec![v as u8; SIZE];
                writer.put("k", &value, Options::upsert()).await.unwrap();
                done.lock().unwrap().push((v, Instant::now()));
                latest.store(v, Ordering::Release);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut reads = 0;
    let mut newest_seen = 0u32;
    while Instant::now() < stop {
        let asked = Instant::now();
        // A read that asks the master may find the value being upserted in place (when no
        // lease was known): ReplicaNotReady, which a reader tries again.
        let value = loop {
            match reader.get("k", &opts).await {
                Err(yuebing_store::Error::ReplicaNotReady { .. }) => continue,
                other => break other.unwrap(),
            }
        };
        reads += 1;
        assert_eq!(value.len(), SIZE);
        let v = value[0];
        assert!(
            value.iter().all(|&b| b == v),
            "torn: a value mixing versions"
        );
        // The version read was still current at some moment of a lease that covered the
        // read: its successor (if any) returned no earlier than one lease before the read.
        let successor = done
            .lock()
            .unwrap()
            .iter()
            .find(|(w, _)| *w as u8 == v.wrapping_add(1) && *w > newest_seen.saturating_sub(250))
            .map(|&(_, at)| at);
        if let Some(at) = successor {
            assert!(
                at + TTL >= asked,
                "version {v} was replaced {:?} before a read that returned it",
                asked - at
            );
        }
        newest_seen = newest_seen.max(latest.load(Ordering::Acquire));
        // Once, a pause past the lease with no read (so no renewal): the next read must not
        // use the location it kept.
        let pause = match reads == 30 {
            true => TTL + Duration::from_millis(200),
            false => Duration::from_millis(5),
        };
        tokio::time::sleep(pause).await;
    }
    writing.await.unwrap();
    assert!(reads > 20, "{reads} reads");
    // After the writer stopped and a lease passed, the reader sees the last version.
    tokio::time::sleep(TTL).await;
    let last = latest.load(Ordering::Acquire) as u8;
    assert_eq!(reader.get("k", &opts).await.unwrap(), vec![last; SIZE]);
    drop(node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_replica_whose_node_died_falls_back_to_the_master_in_time() {
    let m = master(10_000).await;
    let first = client(&m, 8 << 20).await;
    let second = client(&m, 8 << 20).await;
    let reader = client(&m, 0).await;
    let opts = within(Duration::from_secs(5));
    first.put("k", &[1u8; 4096], on(&first)).await.unwrap();
    assert_eq!(reader.get("k", &opts).await.unwrap(), [1u8; 4096]);
    // The node holding the cached replica goes (its space with it); the key is written again
    // on another.
    drop(first);
    yuebing_testkit::eventually(
        "the key written again",
        Duration::from_secs(10),
        async || {
            second
                .put(
                    "k",
                    &[2u8; 4096],
                    on(&second).with_write(yuebing_store::Write::Upsert),
                )
                .await
                .is_ok()
        },
    )
    .await;
    // Within one deadline: the cached replica fails, the master names the new one.
    let deadline = within(Duration::from_secs(3));
    assert_eq!(reader.get("k", deadline).await.unwrap(), [2u8; 4096]);
}

/// A batch whose cached replicas all failed asks the master for every one of them in one
/// call, within the batch's deadline; so does a ranged batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_cached_replicas_died_asks_the_master_once() {
    let m = master(10_000).await;
    let first = client(&m, 8 << 20).await;
    let second = client(&m, 8 << 20).await;
    let reader = client(&m, 0).await;
    let opts = within(Duration::from_secs(5));
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        first.put(k, &[i as u8; 4096], on(&first)).await.unwrap();
    }
    let got = reader.batch_get(&keys, &opts).await.unwrap();
    assert!(got.iter().all(Result::is_ok), "{got:?}");
    drop(first);
    let upsert = on(&second).with_write(yuebing_store::Write::Upsert);
    for (i, k) in keys.iter().enumerate() {
        let value = [100 + i as u8; 4096];
        yuebing_testkit::eventually(
            "the key written again",
            Duration::from_secs(10),
            async || second.put(k, &value, &upsert).await.is_ok(),
        )
        .await;
    }
    let before = calls(&m).await;
    let got = reader
        .batch_get(&keys, within(Duration::from_secs(3)))
        .await
        .unwrap();
    for (i, got) in got.into_iter().enumerate() {
        assert_eq!(got.unwrap(), [100 + i as u8; 4096], "k{i}");
    }
    let after = calls(&m).await;
    let asked = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    assert_eq!(asked("batch_get_replica_list"), 1, "{after:?}");
    assert_eq!(asked("get_replica_list"), 0, "{after:?}");

    // A ranged batch of keys whose cached locations are fresh needs no master call.
    let buf = reader.engine().allocate(8 * 16, true).unwrap();
    let items: Vec<(&str, Vec<yuebing_store::Fragment>)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let f = yuebing_store::Fragment {
                addr: buf.addr() + 16 * i as u64,
                offset: 100,
                len: 16,
            };
            (k.as_str(), vec![f])
        })
        .collect();
    let ranged = reader.batch_get_ranges(&items, &opts).await.unwrap();
    assert!(
        ranged.iter().flatten().all(|r| r.as_ref() == Ok(&16)),
        "{ranged:?}"
    );
    let last = calls(&m).await;
    let total = |c: &std::collections::BTreeMap<String, u64>| -> u64 {
        ["batch_get_replica_list", "get_replica_list"]
            .iter()
            .map(|n| c.get(*n).unwrap_or(&0))
            .sum()
    };
    assert_eq!(total(&last), total(&after), "{last:?}");
}

/// A cached batch read past half its leases renews them all in one call, off its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_renews_its_leases_in_one_call() {
    let m = master(2_000).await;
    let node = client(&m, 8 << 20).await;
    let reader = client(&m, 0).await;
    let keys: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    for k in &keys {
        node.put(k, &[5u8; 512], &Options::default()).await.unwrap();
    }
    let opts = within(Duration::from_secs(5));
    assert!(reader
        .batch_get(&keys, &opts)
        .await
        .unwrap()
        .iter()
        .all(Result::is_ok));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = calls(&m).await;
    assert!(reader
        .batch_get(&keys, &opts)
        .await
        .unwrap()
        .iter()
        .all(Result::is_ok));
    let renewed = yuebing_testkit::eventually("the renewal", Duration::from_secs(5), async || {
        let now = calls(&m).await;
        let asked = |n: &str| now.get(n).unwrap_or(&0) - before.get(n).unwrap_or(&0);
        (asked("batch_get_replica_list") > 0).then_some(now)
    })
    .await;
    let asked = |n: &str| renewed.get(n).unwrap_or(&0) - before.get(n).unwrap_or(&0);
    assert_eq!(
        (asked("batch_get_replica_list"), asked("get_replica_list")),
        (1, 0),
        "{renewed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_location_is_not_used_past_its_lease() {
    let m = master(3000).await;
    let node = client(&m, 8 << 20).await;
    let reader = client(&m, 0).await;
    node.put("k", &[3u8; 100], &Options::default())
        .await
        .unwrap();
    let short = within(Duration::from_millis(1000));
    assert_eq!(reader.get("k", &short).await.unwrap(), [3u8; 100]);
    m.shutdown(Duration::ZERO).await;
    assert_eq!(reader.get("k", &short).await.unwrap(), [3u8; 100]);
    // Past the lease (less the margin) the location is not used: the read needs the master.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(reader.get("k", &short).await.is_err());
}
