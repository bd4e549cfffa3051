//! Snapshots bound the etcd log: the leader truncates it (no further than its standbys have
//! applied) and compacts etcd's history, and a master started after the truncation bootstraps
//! from the leader's snapshot, fetched over rpc in chunks, then tails the log and can lead.

mod common;

use std::time::Duration;

use common::*;
use tokio::runtime::Handle;
use yuebing_etcd::ha::{HaConfig, HaMaster, Role};
use yuebing_etcd::{Error, EtcdConfig, EtcdLog};
use yuebing_store::Options;
use yuebing_testkit::etcd::EtcdServer;
use yuebing_testkit::{eventually, patterns::pattern};

/// A test master of the cluster `snap` that snapshots every 100 entries.
fn snapshotting(etcd: EtcdConfig) -> HaConfig {
    let mut cfg = ha_config(etcd, "snap");
    cfg.master.snapshot_every = 100;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_started_after_truncation_bootstraps_from_the_leaders_snapshot() {
    let etcd = EtcdServer::start().await.unwrap();
    let handle = Handle::current();
    let config = etcd.config().with_cluster("snap");
    let first = leader(snapshotting(etcd.config())).await;
    let second = start(snapshotting(etcd.config())).await;
    assert_eq!(second.status().role, Role::Standby);

    let (client, _leader) = follower(&config, 32 << 20, Duration::from_millis(100)).await;
    let opts = Options::deadline(Duration::from_secs(20));
    put_objects(&client, 0..300, 1024, &opts).await;

    // The leader snapshots every 100 entries and truncates the log behind the standby.
    let log = EtcdLog::connect_on(&config, &handle).await.unwrap();
    let first_kept = eventually(
        "the log is truncated",
        Duration::from_secs(20),
        async || match log.read_from(1).await {
            Err(Error::LogTruncated { first, .. }) => Some(first),
            _ => None,
        },
    )
    .await;
    let lowest = log.lowest_applied().await.unwrap();
    assert!(
        lowest.is_some_and(|l| l + 1 >= first_kept),
        "truncated to {first_kept} past the standby's published {lowest:?}"
    );
    // etcd's history was compacted too: a watch from its first revision fails.
    let mut old = log.watch_from(1);
    let e = futures::StreamExt::next(&mut old)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, Error::Compacted { .. }), "{e:?}");

    // A master started now cannot read the log from its start: it bootstraps.
    let third = start(snapshotting(etcd.config())).await;
    let durable = first.status().applied;
    assert!(
        third.status().applied >= first_kept.saturating_sub(1),
        "{:?}",
        third.status()
    );
    eventually(
        "the new standby catches up",
        Duration::from_secs(20),
        async || (third.status().applied >= durable).then_some(()),
    )
    .await;

    // The old leader and the first standby go; the bootstrapped master leads and has it all.
    first.shutdown(Duration::from_secs(1)).await;
    second.shutdown(Duration::from_secs(1)).await;
    eventually(
        "the bootstrapped master leads",
        Duration::from_secs(20),
        async || third.serving().then_some(()),
    )
    .await;
    for i in 0..300 {
        reads_back(&client, &format!("k{i}"), &pattern(1024, i)).await;
    }
    client.put("after", b"bootstrap", &opts).await.unwrap();
    third.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_cut_off_past_the_truncation_bootstraps_again_when_back() {
    let etcd = EtcdServer::start().await.unwrap();
    let proxy = yuebing_testkit::etcd::TcpProxy::start(&etcd.endpoint())
        .await
        .unwrap();
    let mut behind_proxy = etcd.config();
    behind_proxy.endpoints = vec![proxy.endpoint()];
    let handle = Handle::current();
    let config = etcd.config().with_cluster("snap");
    let leader = leader(snapshotting(etcd.config())).await;
    let standby = start(snapshotting(behind_proxy)).await;
    let log = EtcdLog::connect_on(&config, &handle).await.unwrap();
    eventually(
        "the standby publishes",
        Duration::from_secs(20),
        async || log.lowest_applied().await.unwrap(),
    )
    .await;

    // Cut off for longer than its publication's TTL, the standby stops holding the log back.
    proxy.cut();
    eventually(
        "its publication expires",
        Duration::from_secs(20),
        async || log.lowest_applied().await.unwrap().is_none().then_some(()),
    )
    .await;
    let (client, _follow) = follower(&config, 32 << 20, Duration::from_millis(100)).await;
    let opts = Options::deadline(Duration::from_secs(20));
    put_objects(&client, 0..300, 1024, &opts).await;
    let behind = standby.status().applied;
    let first_kept = eventually(
        "the log is truncated",
        Duration::from_secs(20),
        async || match log.read_from(1).await {
            Err(Error::LogTruncated { first, .. }) if first > behind + 1 => Some(first),
            _ => None,
        },
    )
    .await;

    // Back, it finds its position gone, bootstraps from the leader, and tails again.
    proxy.restore();
    let durable = leader.status().applied;
    eventually(
        "the standby catches up",
        Duration::from_secs(30),
        async || (standby.status().applied >= durable).then_some(()),
    )
    .await;
    assert_eq!(standby.status().role, Role::Standby, "{first_kept}");
    leader.shutdown(Duration::from_secs(1)).await;
    eventually("the standby leads", Duration::from_secs(20), async || {
        standby.serving().then_some(())
    })
    .await;
    for i in (0..300).step_by(7) {
        reads_back(&client, &format!("k{i}"), &pattern(1024, i)).await;
    }
    standby.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_wedged_behind_the_snapshot_stops_holding_the_log_back() {
    // The shortest limit allowed with the tests' 2 s election TTL.
    const STALL: Duration = Duration::from_secs(6);
    let etcd = EtcdServer::start().await.unwrap();
    let handle = Handle::current();
    let config = etcd.config().with_cluster("snap");
    let stalling = || {
        let mut cfg = snapshotting(etcd.config());
        cfg.standby_stall = STALL;
        cfg
    };
    let leader = leader(stalling()).await;
    let healthy = start(stalling()).await;

    // A standby that is alive (its lease outlives the test) but applies nothing: its published
    // position stays at 1, as a wedged standby's publication task would keep it.
    let log = EtcdLog::connect_on(&config, &handle).await.unwrap();
    let mut etcd_client = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .unwrap();
    let lease = etcd_client.lease_grant(600, None).await.unwrap().id();
    log.publish_applied("wedged#1", 1, lease).await.unwrap();
    let published = std::time::Instant::now();

    let (client, _follow) = follower(&config, 32 << 20, Duration::from_millis(100)).await;
    let opts = Options::deadline(Duration::from_secs(20));
    let put = async |range: std::ops::Range<u64>| {
        put_objects(&client, range, 1024, &opts).await;
    };
    // 300 records (a put is two), so snapshot rounds at 100, 200 and 300: within the limit
    // (counted from the first round that saw the wedged position behind, after `published`),
    // the wedged standby holds the log back: nothing after its position is deleted.
    put(0..150).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (groups, _) = log.read_from(2).await.unwrap();
    assert!(!groups.is_empty());
    let checked = published.elapsed();
    assert!(
        checked < STALL,
        "150 puts and a second took {checked:?}: too slow to see the log held back"
    );

    // Once its position stood still for the limit, the next rounds truncate past it (no
    // further than the previous snapshot), though its publication is still there.
    tokio::time::sleep(STALL + Duration::from_secs(1)).await;
    put(150..450).await;
    let first_kept = eventually(
        "the log is truncated past the wedged standby",
        Duration::from_secs(20),
        async || match log.read_from(2).await {
            Err(Error::LogTruncated { first, .. }) if first > 100 => Some(first),
            _ => None,
        },
    )
    .await;
    assert_eq!(log.lowest_applied().await.unwrap(), Some(1), "{first_kept}");

    // The healthy standby kept up and takes over with everything.
    leader.shutdown(Duration::from_secs(1)).await;
    eventually(
        "the healthy standby leads",
        Duration::from_secs(20),
        async || healthy.serving().then_some(()),
    )
    .await;
    for i in (0..450).step_by(13) {
        reads_back(&client, &format!("k{i}"), &pattern(1024, i)).await;
    }
    healthy.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_standby_stall_shorter_than_three_election_ttls_is_refused() {
    // Refused before etcd is reached: nothing listens at this address.
    let etcd = yuebing_etcd::EtcdConfig::new("127.0.0.1:9").unwrap();
    let mut cfg = ha_config(etcd, "snap");
    cfg.standby_stall = cfg.ttl * 3 - Duration::from_millis(1);
    let bind = "127.0.0.1:0".parse().unwrap();
    let refused = HaMaster::start(cfg, &bind, Handle::current()).await;
    let e = refused.err().expect("refused");
    assert!(e.to_string().contains("standby_stall"), "{e}");
    assert_eq!(e.code(), -5001, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_lost_after_truncation_restarts_from_the_leaders_disk() {
    let etcd = EtcdServer::start().await.unwrap();
    let handle = Handle::current();
    let config = etcd.config().with_cluster("snap");
    let disk = tempfile::tempdir().unwrap();
    let with_dir = |dir: &std::path::Path| {
        let mut cfg = snapshotting(etcd.config());
        cfg.master.data_dir = Some(dir.to_path_buf());
        cfg
    };
    let leader = leader(with_dir(disk.path())).await;
    let (client, _follow) = follower(&config, 32 << 20, Duration::from_millis(100)).await;
    let opts = Options::deadline(Duration::from_secs(20));
    put_objects(&client, 0..300, 1024, &opts).await;
    let log = EtcdLog::connect_on(&config, &handle).await.unwrap();
    eventually(
        "the log is truncated",
        Duration::from_secs(20),
        async || matches!(log.read_from(1).await, Err(Error::LogTruncated { .. })).then_some(()),
    )
    .await;

    // Every master goes; one restarts on the same directory, with no leader to ask.
    leader.shutdown(Duration::from_secs(1)).await;
    let back = tokio::time::timeout(Duration::from_secs(20), start(with_dir(disk.path())))
        .await
        .expect("it starts from its own snapshot, not waiting for a leader");
    eventually("it leads again", Duration::from_secs(20), async || {
        back.serving().then_some(())
    })
    .await;
    for i in (0..300).step_by(11) {
        reads_back(&client, &format!("k{i}"), &pattern(1024, i)).await;
    }
    back.shutdown(Duration::from_secs(1)).await;

    // The same directory under another cluster: its snapshots are set aside, not applied.
    let mut other = with_dir(disk.path());
    other.etcd = etcd.config().with_cluster("other");
    let master = start(other.clone()).await;
    assert_eq!(master.status().applied, 0);
    let discarded = std::fs::read_dir(disk.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".discarded")
        })
        .count();
    assert!(
        discarded >= 1,
        "the other cluster's snapshot was not set aside"
    );
    master.shutdown(Duration::from_secs(1)).await;

    // A snapshot of this cluster beyond the end of its log (etcd restored from an older
    // backup) is set aside too.
    {
        let dir = yuebing_store::master::ha::SnapshotDir::open(disk.path()).unwrap();
        let mut snapshot = yuebing_store::master::Master::new(Default::default(), true).snapshot();
        snapshot.seq = 1_000_000;
        let offered = yuebing_store::master::ha::Offered::encode(&snapshot).unwrap();
        dir.keep(&offered).unwrap();
    }
    let master = start(other).await;
    assert!(master.status().applied < 1_000_000);
    assert!(disk
        .path()
        .join("snapshot-00000000000001000000.ysnap.discarded")
        .exists());
    master.shutdown(Duration::from_secs(1)).await;
}
