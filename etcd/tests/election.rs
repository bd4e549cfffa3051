//! The master election against a real etcd: one candidate wins and leads; a standby waits and
//! wins after the leader goes, with a larger epoch; `observe` follows; a leader cut off from
//! etcd stops serving before the other candidate wins; a candidate whose lease dies while it
//! waits never reports leadership; a dropped campaign revokes its lease; a leader keeps its
//! lease while etcd's own raft leader is killed (three members).
//!
//! Each test starts its own etcd (about a second; default timing, so a lease lasts at least
//! 2 s) and removes it when it ends. Failover times are printed (`--nocapture`), not asserted.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::Settings;
use etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use futures::StreamExt;
use tokio::runtime::Handle;
use yuebing_etcd::{Election, EtcdConfig, LeaderInfo, Leadership};
use yuebing_testkit::etcd::{EtcdServer, TcpProxy};
use yuebing_testkit::eventually;

/// etcd 3.4's shortest lease with its default election timeout.
const TTL: Duration = Duration::from_secs(2);
/// Ceiling of every wait for an expiry or a win: many times the TTL.
const CEILING: Duration = Duration::from_secs(30);
/// The cluster name of every test.
const CLUSTER: &str = "election";

async fn server() -> EtcdServer {
    EtcdServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start etcd for the tests: {e}"))
}

/// Settings through `endpoint`, with short timeouts.
fn config(endpoint: &str) -> EtcdConfig {
    let mut config = EtcdConfig::new(endpoint).unwrap().with_cluster(CLUSTER);
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(1);
    config
}

async fn election(endpoint: &str) -> Election {
    Election::connect_on(&config(endpoint), TTL, Handle::current())
        .await
        .unwrap()
}

/// A plain client, to look at etcd behind the election's back.
async fn client(server: &EtcdServer) -> Client {
    config(&server.endpoint())
        .connect_on(&Handle::current())
        .await
        .unwrap()
}

/// The candidates' keys under the election, oldest first.
async fn candidates(client: &Client, election: &Election) -> Vec<String> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let prefix = format!("{}/", election.name());
    let resp = client.kv_client().get(prefix, Some(options)).await.unwrap();
    resp.kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap().to_string())
        .collect()
}

/// Awaits `f` within the ceiling.
async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(CEILING, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {CEILING:?}"))
}

/// Starts a campaign of `election` with `address` in a task of its own.
fn spawn_campaign(
    election: &Election,
    address: &str,
) -> tokio::task::JoinHandle<yuebing_etcd::Result<Leadership>> {
    let (election, address) = (election.clone(), address.to_string());
    tokio::spawn(async move { election.campaign(address).await })
}

/// Waits until `n` candidates have keys.
async fn until_candidates(client: &Client, election: &Election, n: usize) {
    eventually(&format!("{n} candidates"), CEILING, || async {
        candidates(client, election).await.len() == n
    })
    .await;
}

/// The lease id in a candidate key, `<election>/<lease id, hex>`.
fn lease_of(key: &str) -> i64 {
    let hex = key.rsplit('/').next().unwrap();
    i64::from_str_radix(hex, 16).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_wins_leads_and_serves_after_its_margin() {
    let server = server().await;
    let e = election(&server.endpoint()).await;
    assert_eq!(e.leader().await.unwrap(), None, "no leader yet");
    let a = within("campaign", e.campaign("127.0.0.1:7001".into()))
        .await
        .unwrap();
    assert!(a.epoch() > 0);
    assert!(
        a.key().starts_with(&format!("{}/", e.name())),
        "{}",
        a.key()
    );
    assert_eq!(lease_of(a.key()), a.lease_id());
    assert!(a.granted_ttl() >= TTL, "{:?}", a.granted_ttl());
    let info = LeaderInfo {
        address: "127.0.0.1:7001".into(),
        epoch: a.epoch(),
    };
    assert_eq!(e.leader().await.unwrap(), Some(info));

    // Not during its margin, then until the deadline.
    let margin = a.lease().margin();
    assert!(margin > Duration::ZERO);
    assert!(!a.may_serve(a.usable_at() - Duration::from_millis(1)));
    a.ready().await.unwrap();
    assert!(a.may_serve(Instant::now()));
    let deadline = a.deadline().unwrap();
    assert!(!a.may_serve(deadline));

    // The lease is kept alive well past its TTL.
    let later = Instant::now() + TTL * 2;
    eventually("two TTLs pass", CEILING, || async {
        Instant::now() >= later
    })
    .await;
    assert!(a.may_serve(Instant::now()), "kept alive");
    assert!(a.check().is_ok());

    // The epoch guards transactions.
    let c = client(&server).await;
    let txn = etcd_client::Txn::new().when([a.compare()]);
    assert!(c.kv_client().txn(txn).await.unwrap().succeeded());

    a.resign().await.unwrap();
    assert_eq!(e.leader().await.unwrap(), None, "resigned");
    assert!(candidates(&c, &e).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_waits_then_wins_when_the_leader_is_dropped() {
    let server = server().await;
    let e = election(&server.endpoint()).await;
    let c = client(&server).await;
    let mut last_epoch = 0;
    let mut leader = within("campaign", e.campaign("a".into())).await.unwrap();
    // Three handovers: each standby waits while another leads, then wins at once on a drop.
    for round in 0..3 {
        let standby = format!("s{round}");
        let mut waiting = spawn_campaign(&e, &standby);
        until_candidates(&c, &e, 2).await;
        // Waits while the leader leads (and keeps its lease alive).
        let waited = tokio::time::timeout(TTL * 2, &mut waiting).await;
        assert!(waited.is_err(), "won while another led: {waited:?}");
        assert!(leader.may_serve(Instant::now()));
        let old_epoch = leader.epoch();
        assert!(old_epoch > last_epoch);
        last_epoch = old_epoch;

        let dropped = Instant::now();
        drop(leader);
        leader = within("standby wins", &mut waiting).await.unwrap().unwrap();
        let failover = dropped.elapsed();
        eprintln!("failover after the leader was dropped (lease revoked): {failover:?}");
        assert!(leader.epoch() > old_epoch, "a larger epoch");
        let info = e.leader().await.unwrap().unwrap();
        assert_eq!(
            (info.address.as_str(), info.epoch),
            (standby.as_str(), leader.epoch())
        );
        leader.ready().await.unwrap();
    }
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_follows_the_leader_across_a_resignation() {
    let server = server().await;
    let e = election(&server.endpoint()).await;
    let c = client(&server).await;
    let mut observed = e.observe();
    let a = within("campaign", e.campaign("a:1".into())).await.unwrap();
    let first = within("observe a", observed.next()).await.unwrap().unwrap();
    assert_eq!(
        first,
        LeaderInfo {
            address: "a:1".into(),
            epoch: a.epoch()
        }
    );

    let waiting = spawn_campaign(&e, "b:2");
    until_candidates(&c, &e, 2).await;
    let a_epoch = a.epoch();
    a.resign().await.unwrap();
    let b = within("b wins", waiting).await.unwrap().unwrap();
    let next = within("observe b", observed.next()).await.unwrap().unwrap();
    assert_eq!(
        next,
        LeaderInfo {
            address: "b:2".into(),
            epoch: b.epoch()
        }
    );
    assert!(b.epoch() > a_epoch);

    // A second observer starts with the current leader.
    let now = within("observe now", e.observe().next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_serving_before_another_wins() {
    let server = server().await;
    let proxy = TcpProxy::start(&server.endpoint()).await.unwrap();
    let cut_off = election(&proxy.endpoint()).await;
    let direct = election(&server.endpoint()).await;
    let c = client(&server).await;
    let a = within("campaign", cut_off.campaign("a".into()))
        .await
        .unwrap();
    a.ready().await.unwrap();
    let waiting = spawn_campaign(&direct, "b");
    until_candidates(&c, &direct, 2).await;

    let cut = Instant::now();
    proxy.cut();
    let lost = within("a's leadership lost", a.lost()).await;
    let a_lost = cut.elapsed();
    assert_eq!(lost.code(), -5016, "{lost}");
    let b = within("b wins", waiting).await.unwrap().unwrap();
    let b_won = Instant::now();
    let a_until = a.deadline().expect("a had a deadline");
    eprintln!(
        "leader cut off: it stopped serving {a_lost:?} after the cut, the standby won {:?} \
         after it, {:?} after the old leader's deadline",
        b_won - cut,
        b_won.saturating_duration_since(a_until)
    );
    assert!(
        a_until < b_won,
        "the old leader could serve until after the new one won"
    );
    assert!(!a.may_serve(Instant::now()));
    assert!(a.check().is_err());
    assert!(b.epoch() > a.epoch());
    assert!(!b.may_serve(b.usable_at() - Duration::from_millis(1)));
    b.ready().await.unwrap();
    assert_eq!(direct.leader().await.unwrap().unwrap().address, "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_cut_off_while_waiting_never_reports_leadership() {
    let server = server().await;
    let proxy = TcpProxy::start(&server.endpoint()).await.unwrap();
    let direct = election(&server.endpoint()).await;
    let cut_off = election(&proxy.endpoint()).await;
    let c = client(&server).await;
    let a = within("campaign", direct.campaign("a".into()))
        .await
        .unwrap();
    a.ready().await.unwrap();
    let waiting = spawn_campaign(&cut_off, "b");
    until_candidates(&c, &direct, 2).await;

    proxy.cut();
    let failed = within("b's campaign ends", waiting).await.unwrap();
    let err = failed.expect_err("a cut-off candidate must not win");
    assert_eq!(err.code(), -5016, "{err}");
    // Its key goes with its lease; the leader stays.
    until_candidates(&c, &direct, 1).await;
    assert_eq!(candidates(&c, &direct).await, [a.key().to_string()]);
    assert!(a.may_serve(Instant::now()));

    // Back in touch, it campaigns from scratch and wins once the leader resigns.
    proxy.restore();
    eventually("b reaches etcd again", CEILING, || async {
        cut_off.leader().await.is_ok()
    })
    .await;
    let waiting = spawn_campaign(&cut_off, "b");
    eventually("b campaigns again", CEILING, || async {
        waiting.is_finished() || candidates(&c, &direct).await.len() == 2
    })
    .await;
    assert!(!waiting.is_finished(), "{:?}", waiting.await);
    let a_epoch = a.epoch();
    a.resign().await.unwrap();
    let b = within("b wins", waiting).await.unwrap().unwrap();
    assert!(b.epoch() > a_epoch);
    assert_eq!(direct.leader().await.unwrap().unwrap().address, "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_whose_lease_is_revoked_while_waiting_does_not_win() {
    let server = server().await;
    let e = election(&server.endpoint()).await;
    let c = client(&server).await;
    let a = within("campaign", e.campaign("a".into())).await.unwrap();
    let waiting = spawn_campaign(&e, "b");
    until_candidates(&c, &e, 2).await;
    let b_key = candidates(&c, &e).await.pop().unwrap();
    assert_ne!(b_key, a.key());
    c.lease_client().revoke(lease_of(&b_key)).await.unwrap();

    let err = within("b's campaign ends", waiting)
        .await
        .unwrap()
        .expect_err("a candidate on a revoked lease must not win");
    assert_eq!(err.code(), -5016, "{err}");
    assert_eq!(e.leader().await.unwrap().unwrap().address, "a");
    a.resign().await.unwrap();
    assert_eq!(e.leader().await.unwrap(), None, "nobody took over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_campaign_revokes_its_lease() {
    let server = server().await;
    let e = election(&server.endpoint()).await;
    let c = client(&server).await;
    let a = within("campaign", e.campaign("a".into())).await.unwrap();
    a.ready().await.unwrap();
    let waiting = spawn_campaign(&e, "b");
    until_candidates(&c, &e, 2).await;
    let b_lease = lease_of(&candidates(&c, &e).await.pop().unwrap());
    let dropped = Instant::now();
    waiting.abort();
    eventually("b's lease gone", CEILING, || async {
        let ttl = c.lease_client().time_to_live(b_lease, None).await.unwrap();
        ttl.ttl() < 0
    })
    .await;
    eprintln!(
        "a dropped campaign's lease was gone {:?} later",
        dropped.elapsed()
    );
    assert_eq!(candidates(&c, &e).await, [a.key().to_string()]);
    assert!(a.may_serve(Instant::now()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_keeps_its_lease_through_the_loss_of_etcds_raft_leader() {
    let mut cluster = yuebing_testkit::etcd::EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("cannot start etcd for the tests: {e}"));
    // A TTL of several etcd election timeouts (500 ms here): the lease must outlast one.
    let ttl = Duration::from_secs(5);
    let all = cluster.config().with_cluster(CLUSTER);
    let e = Election::connect_on(&all, ttl, Handle::current())
        .await
        .unwrap();
    let a = within("campaign", e.campaign("a".into())).await.unwrap();
    a.ready().await.unwrap();

    // Kill the member that leads etcd's raft group.
    let mut raft_leader = None;
    for i in 0..cluster.len() {
        let c = config(&cluster.endpoint(i))
            .connect_on(&Handle::current())
            .await
            .unwrap();
        let status = c.maintenance_client().status().await.unwrap();
        if status.header().map(|h| h.member_id()) == Some(status.leader()) {
            raft_leader = Some(i);
        }
    }
    let raft_leader = raft_leader.expect("etcd has a raft leader");
    let killed = Instant::now();
    cluster.kill(raft_leader);

    // Serving throughout several TTLs (polled), and renewed past the kill.
    let until_t = killed + ttl * 3;
    while Instant::now() < until_t {
        assert!(a.check().is_ok(), "lost: {:?}", a.check());
        assert!(a.may_serve(Instant::now()), "stopped serving");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(a.deadline().unwrap() > killed + ttl);
    let info = e.leader().await.unwrap().unwrap();
    assert_eq!((info.address.as_str(), info.epoch), ("a", a.epoch()));
    a.resign().await.unwrap();
}
