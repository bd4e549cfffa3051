//! The master through real RPC on 127.0.0.1: calls, error codes across the wire, durability
//! and recovery from a data directory.

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{
    ClientId, MasterClient, MasterConfig, MasterServerConfig, MountSpec, PingResult, PutConfig,
    RunningMaster,
};
use yuebing_store::Error;

fn endpoint() -> Endpoint {
    "127.0.0.1:0".parse().unwrap()
}

fn config(dir: Option<&std::path::Path>) -> MasterServerConfig {
    MasterServerConfig {
        core: MasterConfig {
            client_ttl_ms: 60_000,
            ..MasterConfig::default()
        },
        data_dir: dir.map(|d| d.to_path_buf()),
        snapshot_every: 50,
        ..MasterServerConfig::default()
    }
}

fn space(node: &str) -> Vec<MountSpec> {
    vec![MountSpec {
        node: node.into(),
        base: 0x10_0000,
        len: 64 << 20,
    }]
}

async fn put(c: &MasterClient, key: &str, size: u64) -> yuebing_store::Result<()> {
    c.put_start(key, size, &PutConfig::default(), yuebing_store::Write::Put)
        .await?;
    c.put_end(key).await
}

#[tokio::test]
async fn calls_and_typed_errors_cross_the_wire() {
    let master = RunningMaster::start(config(None), &endpoint())
        .await
        .unwrap();
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(1));
    assert!(c.health().await.unwrap().ready);
    assert_eq!(c.ping().await.unwrap(), PingResult::NeedRemount);
    c.mount(space("node-a")).await.unwrap();
    assert_eq!(c.ping().await.unwrap(), PingResult::Ok);
    let r = c
        .put_start("k", 1000, &PutConfig::default(), yuebing_store::Write::Put)
        .await
        .unwrap();
    assert_eq!((r[0].node.as_str(), r[0].len), ("node-a", 1000));
    assert_eq!(
        c.get_replica_list("k").await.unwrap_err(),
        Error::ReplicaNotReady { key: "k".into() }
    );
    c.put_end("k").await.unwrap();
    let l = c.get_replica_list("k").await.unwrap();
    assert_eq!(l.replicas, r);
    assert_eq!(
        put(&c, "k", 5).await.unwrap_err(),
        Error::ObjectAlreadyExists { key: "k".into() }
    );
    assert_eq!(c.remove("k", false).await.unwrap_err().code(), -706);
    assert_eq!(c.get_size("nope").await.unwrap_err().code(), -704);
    let e = c
        .put_start("", 1, &PutConfig::default(), yuebing_store::Write::Put)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidParams { .. }), "{e:?}");
    let e = c
        .put_start(
            "huge",
            u64::MAX - 1,
            &PutConfig::default(),
            yuebing_store::Write::Put,
        )
        .await;
    assert!(matches!(e, Err(Error::InvalidParams { .. })), "{e:?}");
    assert!(master.health().ready, "the master keeps serving");
    let items = vec![("a".to_string(), 10), ("k".to_string(), 10)];
    let r = c
        .batch_put_start(items, &PutConfig::default(), yuebing_store::Write::Put)
        .await
        .unwrap();
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), -705);
    let r = c.batch_exist(vec!["k".into(), "a".into()]).await.unwrap();
    assert_eq!(
        (r[0].clone().unwrap(), r[1].clone().unwrap()),
        (true, false)
    );
    c.batch_put_end(vec!["a".into()]).await.unwrap()[0]
        .clone()
        .unwrap();
    let s = c.stats().await.unwrap();
    assert_eq!((s.objects, s.nodes, s.clients), (2, 1, 1));
    assert_eq!(c.list("", 10).await.unwrap().len(), 2);
    assert_eq!(c.remove_all(true).await.unwrap(), 2);
    let report = master.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.cut, 0);
}

#[tokio::test]
async fn batch_and_pattern_removals_cross_the_wire_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(3));
    c.mount(space("node-a")).await.unwrap();
    for k in ["layer0/a", "layer0/b", "layer1/a", "keep"] {
        put(&c, k, 64).await.unwrap();
    }
    let e = c.remove_by_regex("[", false).await.unwrap_err();
    assert!(matches!(e, Error::InvalidParams { .. }), "{e:?}");
    assert_eq!(c.remove_by_regex("^layer0/", false).await.unwrap(), 2);
    let r = c
        .batch_remove(vec!["layer1/a".into(), "gone".into()], false)
        .await
        .unwrap();
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().code(), -704);
    master.shutdown(Duration::from_secs(1)).await;

    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(3));
    let left: Vec<String> = c
        .list("", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, ["keep"], "the removals were durable");
    master.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn committed_objects_survive_a_restart_from_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    assert!(master.health().persistent);
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(7));
    c.mount(space("node-a")).await.unwrap();
    // More than `snapshot_every` entries: recovery uses a snapshot and the log after it.
    for i in 0..120 {
        put(&c, &format!("obj{i}"), 4096 + i).await.unwrap();
    }
    c.put_start(
        "unfinished",
        10,
        &PutConfig::default(),
        yuebing_store::Write::Put,
    )
    .await
    .unwrap();
    let before = c.get_replica_list("obj5").await.unwrap();
    let h = master.health();
    assert_eq!(h.durable_seq, h.last_seq);
    master.shutdown(Duration::from_secs(1)).await;

    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    let r = master.recovery().clone();
    assert!(r.snapshot_seq > 0, "{r:?}");
    assert!(r.replayed > 0, "{r:?}");
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(7));
    assert!(c.exist("obj119").await.unwrap());
    assert_eq!(c.get_size("obj5").await.unwrap(), 4101);
    assert_eq!(
        c.get_replica_list("obj5").await.unwrap_err().code(),
        -703,
        "node not back yet"
    );
    assert_eq!(c.ping().await.unwrap(), PingResult::NeedRemount);
    c.remount(space("node-a")).await.unwrap();
    assert_eq!(
        c.get_replica_list("obj5").await.unwrap().replicas,
        before.replicas
    );
    assert_eq!(c.stats().await.unwrap().objects, 120);
    // The unfinished put is still its writer's to end.
    c.put_end("unfinished").await.unwrap();
    put(&c, "after-restart", 100).await.unwrap();
    master.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_torn_log_tail_is_cut_and_a_second_master_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(9));
    c.mount(space("n")).await.unwrap();
    put(&c, "x", 10).await.unwrap();
    let e = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .err()
        .expect("the directory is locked");
    assert_eq!(e.name(), "Io");
    master.shutdown(Duration::from_secs(1)).await;
    // A crash in the middle of an append leaves half an entry at the end.
    let mut logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ylog"))
        .collect();
    logs.sort();
    let last = logs.last().unwrap();
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(last).unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5]).unwrap();
    drop(f);
    let master = RunningMaster::start(config(Some(dir.path())), &endpoint())
        .await
        .unwrap();
    assert_eq!(master.recovery().truncated_bytes, 9);
    let c = MasterClient::new(master.local_endpoint().clone(), ClientId(9));
    assert!(c.exist("x").await.unwrap());
    master.shutdown(Duration::from_secs(1)).await;
}
