//! Store space granted ahead of puts: a small put writes into the client's grant and needs
//! one master round trip; a grant that is gone at the master falls back to placing the put
//! there; a client that dies with grants has them reclaimed at the end of its lease.

mod common;

use std::time::Duration;

use common::calls;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

async fn master(cfg: MasterServerConfig, at: &Endpoint) -> RunningMaster {
    RunningMaster::start(cfg, at).await.unwrap()
}

fn config(m: &RunningMaster, store_size: u64, grant_size: u64) -> ClientConfig {
    ClientConfig {
        masters: vec![m.local_endpoint().clone()],
        store_size,
        grant_size,
        heartbeat: Duration::from_millis(100),
        ..ClientConfig::default()
    }
}

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_puts_write_into_a_grant_and_are_published_in_one_call() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let m = master(MasterServerConfig::default(), &bind).await;
    let node = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(&m, 0, 1 << 20)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    for i in 0..40 {
        writer
            .put(format!("k{i}"), &value(i, 4096), &opts)
            .await
            .unwrap();
    }
    // Larger than a sixteenth of a grant: placed at the master.
    writer.put("big", &value(99, 100_000), &opts).await.unwrap();
    let served = calls(&m).await;
    let n = |name: &str| served.get(name).copied().unwrap_or(0);
    assert_eq!(n("put_granted"), 40, "{served:?}");
    assert_eq!((n("put_start"), n("put_end")), (1, 1), "{served:?}");
    assert!(n("grant") >= 1 && n("grant") <= 2, "{served:?}");
    for i in 0..40 {
        let got = node.get(format!("k{i}"), &opts).await.unwrap();
        assert_eq!(got, value(i, 4096), "k{i}");
    }
    assert_eq!(writer.get("big", &opts).await.unwrap(), value(99, 100_000));
    // The grant is used space until the writer drops.
    let used = node.stats(&opts).await.unwrap().bytes_used;
    assert!(used >= (1 << 20), "{used}");
    drop(writer);
    let objects = 40 * 4096 + 100_032;
    yuebing_testkit::eventually::eventually(
        "the dropped writer's grant is freed",
        Duration::from_secs(5),
        || async { (node.stats(&opts).await.unwrap().bytes_used == objects).then_some(()) },
    )
    .await;
}

/// A batch of small puts writes into a grant and is published in one call; its larger items
/// are placed at the master alongside, with one start and one end for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_small_puts_is_published_in_one_call() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let m = master(MasterServerConfig::default(), &bind).await;
    let node = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(&m, 0, 1 << 20)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let sizes = |i: usize| if i % 8 == 7 { 100_000 } else { 4096 };
    let values: Vec<(String, Vec<u8>)> = (0..32)
        .map(|i| (format!("b{i}"), value(i, sizes(i))))
        .collect();
    let items: Vec<(&str, &[u8])> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let results = writer.batch_put(&items, &opts).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let served = calls(&m).await;
    let n = |name: &str| served.get(name).copied().unwrap_or(0);
    assert_eq!(n("batch_put_granted"), 1, "{served:?}");
    assert_eq!(n("put_granted"), 0, "{served:?}");
    assert_eq!(
        (
            n("batch_put_start"),
            n("batch_put_end"),
            n("batch_put_revoke")
        ),
        (1, 1, 0),
        "the four large ones: {served:?}"
    );
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    let got = node.batch_get(&keys, &opts).await.unwrap();
    for ((k, v), got) in values.iter().zip(got) {
        assert_eq!(&got.unwrap(), v, "{k}");
    }
    // Again: the keys exist now, each refused in its place, the batch still one call.
    let again = writer.batch_put(&items, &opts).await.unwrap();
    assert!(
        again
            .iter()
            .all(|r| r.as_ref().is_err_and(|e| e.code() == -705)),
        "{again:?}"
    );
}

/// A master restarted without its state knows no grants: the writer's publication is
/// refused, its grants are retired, and puts go on through a new grant (or placed at the
/// master), every value read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_go_on_when_the_master_restarts_without_the_grants() {
    let port = yuebing_testkit::ports::free_port();
    let at: Endpoint = format!("127.0.0.1:{port}").parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.lease_ttl_ms = 300;
    cfg.core.client_ttl_ms = 2_000;
    let m = master(cfg.clone(), &at).await;
    let node = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(&m, 0, 1 << 20)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    writer.put("before", &value(1, 4096), &opts).await.unwrap();
    m.shutdown(Duration::ZERO).await;
    let m = master(cfg, &at).await;
    let puts = async {
        for i in 0..20 {
            loop {
                match writer
                    .put(format!("after{i}"), &value(i, 4096), &opts)
                    .await
                {
                    Ok(()) => break,
                    // Until the node remounted, and one lease TTL after the restart
                    // (NoAvailableHandle); a connection to the old master that breaks.
                    Err(e) if e.is_retryable() => {
                        tokio::time::sleep(Duration::from_millis(50)).await
                    }
                    Err(e) => panic!("after{i}: {e}"),
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), puts)
        .await
        .expect("puts resume");
    for i in 0..20 {
        assert_eq!(
            node.get(format!("after{i}"), &opts).await.unwrap(),
            value(i, 4096)
        );
    }
    drop(m);
}

/// A client that stops without a word (its runtime gone: no leave, no pings) keeps its grant
/// until the master expires it; then the grant's space is held until the write release time
/// and freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_clients_grant_is_reclaimed_after_its_lease() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let mut cfg = MasterServerConfig::default();
    cfg.core.client_ttl_ms = 500;
    cfg.core.put_discard_ms = 300;
    cfg.core.put_release_ms = 500;
    let m = master(cfg, &bind).await;
    let node = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    let writer_cfg = config(&m, 0, 1 << 20);
    // The writer runs on a runtime of its own, on a thread of its own, and dies there:
    // nothing it spawned runs again, and its handle is never dropped (no leave).
    let died = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let writer = rt.block_on(async {
            let w = Client::start(writer_cfg).await.unwrap();
            w.put("k", &value(3, 4096), &Options::default())
                .await
                .unwrap();
            w
        });
        std::mem::forget(writer);
        rt.shutdown_background();
    });
    tokio::task::block_in_place(|| died.join().unwrap());
    assert!(node.stats(&opts).await.unwrap().bytes_used >= 1 << 20);
    yuebing_testkit::eventually::eventually(
        "the grant reclaimed",
        Duration::from_secs(10),
        || async { (node.stats(&opts).await.unwrap().bytes_used == 4096).then_some(()) },
    )
    .await;
    assert_eq!(node.get("k", &opts).await.unwrap(), value(3, 4096));
}

/// A grant whose end the master did not hear (it was down) is ended again once the master
/// answers: its space does not stay granted for the rest of the client's life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_the_master_missed_is_made_again_when_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let port = yuebing_testkit::ports::free_port();
    let at: Endpoint = format!("127.0.0.1:{port}").parse().unwrap();
    let cfg = MasterServerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..MasterServerConfig::default()
    };
    let m = master(cfg.clone(), &at).await;
    let node = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(&m, 0, 64 << 10)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    // 21 puts of 3000 bytes (3008 with the master's alignment) leave 2368 bytes of the grant,
    // less than its largest put: the next put retires it.
    for i in 0..21 {
        writer
            .put(format!("k{i}"), &value(i, 3000), &opts)
            .await
            .unwrap();
    }
    let objects = 21 * 3008;
    assert_eq!(node.stats(&opts).await.unwrap().bytes_used, 64 << 10);
    m.shutdown(Duration::ZERO).await;
    let short = Options::deadline(Duration::from_millis(500));
    assert!(writer.put("extra", &value(99, 3000), &short).await.is_err());
    // The retired grant's end is tried for 5 s, then owed.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let m = master(cfg, &at).await;
    yuebing_testkit::eventually::eventually(
        "the missed end made again",
        Duration::from_secs(15),
        || async { (node.stats(&opts).await.ok()?.bytes_used == objects).then_some(()) },
    )
    .await;
    // Every value reads back once the node has remounted.
    for i in 0..21 {
        let got = yuebing_testkit::eventually::eventually(
            "a read after the restart",
            Duration::from_secs(15),
            || async { node.get(format!("k{i}"), &opts).await.ok() },
        )
        .await;
        assert_eq!(got, value(i, 3000));
    }
    drop(m);
}

/// A write into a grant whose node is gone retires the grant and places the put at the master
/// instead: the put succeeds on another node, and so do the next ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_grant_node_is_gone_is_placed_elsewhere() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let m = master(MasterServerConfig::default(), &bind).await;
    let first = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let second = Client::start(config(&m, 16 << 20, 0)).await.unwrap();
    let writer = Client::start(config(&m, 0, 1 << 20)).await.unwrap();
    let opts = Options::deadline(Duration::from_secs(10));
    writer.put("k0", &value(0, 4096), &opts).await.unwrap();
    let holder = writer.replicas("k0", &opts).await.unwrap().replicas[0]
        .node
        .clone();
    let (gone, stays) = match holder == first.hostname() {
        true => (first, second),
        false => (second, first),
    };
    drop(gone);
    // Once the master has heard it leave (its objects and its grants there went with it).
    yuebing_testkit::eventually::eventually("the node left", Duration::from_secs(10), || async {
        (stays.stats(&opts).await.ok()?.nodes == 1).then_some(())
    })
    .await;
    for i in 1..10 {
        writer
            .put(format!("k{i}"), &value(i, 4096), &opts)
            .await
            .unwrap();
        assert_eq!(
            stays.get(format!("k{i}"), &opts).await.unwrap(),
            value(i, 4096)
        );
    }
}
