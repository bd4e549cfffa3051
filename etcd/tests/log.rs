//! `EtcdLog` against a real etcd: appends guarded by the leader's epoch (a stale epoch is
//! deposed and writes nothing, two appenders racing for one sequence number: one wins),
//! contiguity checked before sending, reads in pages, damage refused, watches (in order, and
//! from a compacted revision), truncation keeping a straddling group, the standbys'
//! published sequence numbers, and a leader and a standby cut off from etcd by a proxy.
//!
//! Each test starts its own etcd (about a second) and removes it when it ends.

mod common;

use std::time::{Duration, Instant};

use common::Settings;
use etcd_client::{Client, GetOptions, PutOptions};
use futures::StreamExt;
use tokio::runtime::Handle;
use yuebing_etcd::{Election, Epoch, Error, EtcdConfig, EtcdLog};
use yuebing_store::master::ha::LogGroup;
use yuebing_store::master::{LogEntry, Record};
use yuebing_testkit::etcd::{EtcdServer, TcpProxy};
use yuebing_testkit::eventually;

/// Ceiling of every wait (a watch event, a lease revoked): far above what etcd needs.
const CEILING: Duration = Duration::from_secs(30);

/// One etcd, a client on it, and its settings.
struct Etcd {
    config: EtcdConfig,
    client: Client,
    server: EtcdServer,
}

impl Etcd {
    async fn start() -> Etcd {
        let server = EtcdServer::start()
            .await
            .unwrap_or_else(|e| panic!("cannot start etcd for the tests: {e}"));
        let config = server.config().with_cluster("log");
        let client = config.connect_on(&Handle::current()).await.unwrap();
        Etcd {
            config,
            client,
            server,
        }
    }

    /// A log on its own client (as another master would have).
    async fn log(&self) -> EtcdLog {
        EtcdLog::connect_on(&self.config, &Handle::current())
            .await
            .unwrap()
    }

    async fn lease(&self) -> i64 {
        self.client
            .clone()
            .lease_grant(30, None)
            .await
            .unwrap()
            .id()
    }

    /// An election key on a new lease, as a campaign's winner holds: its epoch and lease.
    async fn leader(&self) -> (Epoch, i64) {
        let lease = self.lease().await;
        let key = format!("{}/{lease:x}", self.config.keys().unwrap().election());
        (self.elect(&key, lease).await, lease)
    }

    /// Puts the election key `key` on `lease`: the epoch is its create revision.
    async fn elect(&self, key: &str, lease: i64) -> Epoch {
        let mut client = self.client.clone();
        let options = PutOptions::new().with_lease(lease);
        client.put(key, "", Some(options)).await.unwrap();
        let resp = client.get(key, None).await.unwrap();
        Epoch {
            election_key: key.to_string(),
            create_revision: resp.kvs()[0].create_revision(),
        }
    }

    /// etcd's current revision.
    async fn revision(&self) -> i64 {
        let resp = self.client.clone().get("/", None).await.unwrap();
        resp.header().unwrap().revision()
    }

    /// How many keys lie under the log.
    async fn log_keys(&self) -> usize {
        let prefix = format!("{}/log/", self.config.keys().unwrap().master());
        let options = GetOptions::new().with_prefix().with_keys_only();
        let resp = self.client.clone().get(prefix, Some(options)).await;
        resp.unwrap().kvs().len()
    }
}

/// Calls `f` until it succeeds, while it fails with a retryable error, within the ceiling.
async fn retry<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = yuebing_etcd::Result<T>>,
{
    let deadline = Instant::now() + CEILING;
    loop {
        match f().await {
            Ok(t) => return t,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("failed for good: {e}"),
        }
    }
}

/// A group of `n` entries from `first`; `tag` makes two groups of the same numbers differ.
fn group(first: u64, n: u64, tag: &str) -> LogGroup {
    LogGroup::new(entries(first, n, tag)).unwrap()
}

fn entries(first: u64, n: u64, tag: &str) -> Vec<LogEntry> {
    (first..first + n)
        .map(|seq| LogEntry {
            seq,
            epoch: 1,
            now: 1000 + seq,
            record: Record::Remove {
                key: format!("{tag}-{seq}").into(),
                evicted: false,
                hold_until: 0,
            },
        })
        .collect()
}

fn seqs(groups: &[LogGroup]) -> Vec<(u64, u64)> {
    groups.iter().map(|g| (g.first(), g.last())).collect()
}

/// The next item of `stream`, within the ceiling.
async fn next<S: futures::Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(CEILING, stream.next())
        .await
        .expect("nothing within the ceiling")
        .expect("the stream ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_round_trip_in_order_over_several_pages() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    assert_eq!(log.last_seq().await.unwrap(), 0);
    assert_eq!(log.read_from(1).await.unwrap().0, vec![]);
    // 300 groups of 2: more than one page of 256 keys.
    let mut written = Vec::new();
    let mut last_revision = 0;
    for i in 0..300u64 {
        let g = group(1 + 2 * i, 2, "a");
        let revision = log.append(&g, &epoch).await.unwrap();
        assert!(revision > last_revision, "revisions grow");
        last_revision = revision;
        written.push(g);
    }
    // Then 5000 entries: two groups (GroupLimits::default holds 4096 entries).
    let revision = log
        .append_entries(entries(601, 5000, "b"), &epoch)
        .await
        .unwrap();
    assert!(revision > last_revision);
    assert_eq!(log.last_seq().await.unwrap(), 5600);

    let (groups, at) = log.read_from(1).await.unwrap();
    assert!(
        at >= revision,
        "read at {at}, after the last append at {revision}"
    );
    assert_eq!(groups.len(), 302);
    assert_eq!(&groups[..300], &written[..]);
    assert_eq!(seqs(&groups[300..]), vec![(601, 4696), (4697, 5600)]);
    let flat: Vec<LogEntry> = groups[300..]
        .iter()
        .flat_map(|g| g.entries().to_vec())
        .collect();
    assert_eq!(flat, entries(601, 5000, "b"));

    // From the group that holds seq on: 6 is in (5, 6); 0 counts as 1.
    let (from_six, _) = log.read_from(6).await.unwrap();
    assert_eq!(seqs(&from_six)[0], (5, 6));
    assert_eq!(from_six.len(), 300);
    assert_eq!(log.read_from(0).await.unwrap().0.len(), 302);
    assert_eq!(
        seqs(&log.read_from(5000).await.unwrap().0),
        vec![(4697, 5600)]
    );
    assert!(
        log.read_from(5601).await.unwrap().0.is_empty(),
        "after the end"
    );
    let far = log.read_from(1_000_000).await.unwrap().0;
    assert!(far.is_empty(), "far after the end");
    assert!(log.read_from(u64::MAX).await.unwrap().0.is_empty());

    // A group over the limits is refused before sending: etcd would refuse it.
    let before = etcd.revision().await;
    let huge = log
        .append(&group(5601, 4097, "h"), &epoch)
        .await
        .unwrap_err();
    assert_eq!(
        (huge.code(), huge.name()),
        (-600, "InvalidParams"),
        "{huge}"
    );
    assert_eq!(etcd.revision().await, before);

    // Another master's log learns where the log ends at its first append.
    let other = etcd.log().await;
    other.append(&group(5601, 1, "c"), &epoch).await.unwrap();
    assert_eq!(log.last_seq().await.unwrap(), 5601);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_epoch_is_deposed_and_writes_nothing() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (old, lease) = etcd.leader().await;
    log.append(&group(1, 2, "old"), &old).await.unwrap();

    // The election key is deleted and created again: a new create revision, a new epoch.
    let mut client = etcd.client.clone();
    client
        .delete(old.election_key.as_str(), None)
        .await
        .unwrap();
    let new = etcd.elect(&old.election_key, lease).await;
    assert!(new.create_revision > old.create_revision);

    let before = etcd.revision().await;
    let stale = log.append(&group(3, 1, "old"), &old).await.unwrap_err();
    assert_eq!(
        stale,
        Error::Deposed {
            key: old.election_key.clone(),
            epoch: old.create_revision,
            current: Some(new.create_revision),
        }
    );
    assert_eq!((stale.code(), stale.is_retryable()), (-5012, false));
    assert_eq!(etcd.revision().await, before, "nothing was written");
    assert_eq!(log.last_seq().await.unwrap(), 2);

    // The new epoch appends; once its key is gone (lease revoked), it is deposed too.
    let other = etcd.log().await;
    other.append(&group(3, 1, "new"), &new).await.unwrap();
    client.lease_revoke(lease).await.unwrap();
    let gone = other.append(&group(4, 1, "new"), &new).await.unwrap_err();
    assert!(
        matches!(gone, Error::Deposed { current: None, .. }),
        "{gone}"
    );
    assert_eq!(log.last_seq().await.unwrap(), 3);
    assert_eq!(etcd.log_keys().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_appenders_racing_for_one_seq_exactly_one_wins() {
    let etcd = Etcd::start().await;
    let (epoch, _) = etcd.leader().await;
    let (a, b) = (etcd.log().await, etcd.log().await);
    a.append(&group(1, 1, "first"), &epoch).await.unwrap();
    for round in 0..5u64 {
        let seq = 2 + round;
        // Both know where the log ends (the loser forgot after its conflict).
        assert_eq!(a.resume(&epoch).await.unwrap(), seq - 1);
        assert_eq!(b.resume(&epoch).await.unwrap(), seq - 1);
        let (ga, gb) = (group(seq, 1, "a"), group(seq, 1, "b"));
        let (ra, rb) = tokio::join!(a.append(&ga, &epoch), b.append(&gb, &epoch));
        let (winner, loser) = match (ra, rb) {
            (Ok(_), Err(e)) => (ga, e),
            (Err(e), Ok(_)) => (gb, e),
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        };
        assert_eq!(loser, Error::LogConflict { seq }, "round {round}");
        let (groups, _) = a.read_from(seq).await.unwrap();
        assert_eq!(groups, vec![winner], "round {round}: the winner's group");
    }
    assert_eq!(etcd.log_keys().await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_leaves_a_gap_is_refused_before_sending() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    let gap = log.append(&group(2, 1, "x"), &epoch).await.unwrap_err();
    assert_eq!(
        gap,
        Error::LogGap {
            expected: 1,
            found: 2
        }
    );
    log.append(&group(1, 3, "x"), &epoch).await.unwrap();
    let before = etcd.revision().await;
    for (first, expected) in [(5, 4), (3, 4), (1, 4)] {
        let e = log.append(&group(first, 1, "x"), &epoch).await.unwrap_err();
        assert_eq!(
            e,
            Error::LogGap {
                expected,
                found: first
            }
        );
        assert_eq!(e.code(), -5014);
    }
    assert_eq!(etcd.revision().await, before, "nothing was sent");
    // An append whose outcome its sender did not learn (here: `other` still believes the log
    // ends at 3) is sent again: the retry finds the same value and succeeds, writing nothing.
    let other = etcd.log().await;
    assert_eq!(other.resume(&epoch).await.unwrap(), 3);
    let same = group(4, 2, "x");
    let at = log.append(&same, &epoch).await.unwrap();
    assert_eq!(other.append(&same, &epoch).await.unwrap(), at);
    assert_eq!(etcd.revision().await, at, "the retry wrote nothing");
    // A different group there is a conflict.
    assert_eq!(other.resume(&epoch).await.unwrap(), 5);
    let mut stale = etcd.log().await;
    assert_eq!(stale.resume(&epoch).await.unwrap(), 5);
    log.append(&group(6, 1, "x"), &epoch).await.unwrap();
    let e = stale.append(&group(6, 1, "y"), &epoch).await.unwrap_err();
    assert_eq!(e, Error::LogConflict { seq: 6 });
    assert_eq!(e.code(), -5013);
    stale = etcd.log().await;
    stale.append(&group(7, 1, "y"), &epoch).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_group_fails_the_read_and_returns_nothing() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    log.append(&group(1, 2, "x"), &epoch).await.unwrap();
    let (_, at) = log.read_from(1).await.unwrap();
    let mut watch = log.watch_from(at);
    let mut value = group(3, 2, "x").encode().unwrap();
    let middle = value.len() / 2;
    value[middle] ^= 0x40;
    let mut client = etcd.client.clone();
    client.put(log.group_key(3), value, None).await.unwrap();
    let e = log.read_from(1).await.unwrap_err();
    assert_eq!((e.code(), e.name()), (-1500, "Corrupt"), "{e}");
    assert!(!e.is_retryable());
    let e = next(&mut watch).await.unwrap_err();
    assert_eq!(e.code(), -1500, "{e}");
    assert!(
        tokio::time::timeout(CEILING, watch.next())
            .await
            .unwrap()
            .is_none(),
        "the watch ends after the damage"
    );
    // A value under a log key that names another first seq is damage too.
    client
        .put(log.group_key(3), group(4, 1, "x").encode().unwrap(), None)
        .await
        .unwrap();
    assert_eq!(log.read_from(1).await.unwrap_err().code(), -1500);
    assert_eq!(log.last_seq().await.unwrap_err().code(), -1500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_new_groups_in_order_and_not_the_deletions() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    log.append(&group(1, 1, "x"), &epoch).await.unwrap();
    let (groups, at) = log.read_from(1).await.unwrap();
    assert_eq!(groups.len(), 1);
    let mut watch = log.watch_from(at);
    let appended: Vec<LogGroup> = (0..5).map(|i| group(2 + 3 * i, 3, "w")).collect();
    for g in &appended {
        log.append(g, &epoch).await.unwrap();
    }
    assert_eq!(
        log.truncate(10).await.unwrap(),
        4,
        "(1), (2..=4), (5..=7), (8..=10)"
    );
    let last = group(17, 1, "w");
    log.append(&last, &epoch).await.unwrap();
    for g in appended.iter().chain([&last]) {
        assert_eq!(&next(&mut watch).await.unwrap(), g);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_fails_typed() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    let early = log.append(&group(1, 1, "x"), &epoch).await.unwrap();
    let late = log.append(&group(2, 1, "x"), &epoch).await.unwrap();
    log.compact(late).await.unwrap();
    log.compact(late).await.unwrap();
    let mut watch = log.watch_from(early - 1);
    let e = next(&mut watch).await.unwrap_err();
    assert!(matches!(e, Error::Compacted { .. }), "{e}");
    assert!(e.is_retryable());
    // The standby falls back to reading, and watches from there.
    let (groups, at) = log.read_from(1).await.unwrap();
    assert_eq!(seqs(&groups), vec![(1, 1), (2, 2)]);
    let mut watch = log.watch_from(at);
    log.append(&group(3, 1, "x"), &epoch).await.unwrap();
    assert_eq!(next(&mut watch).await.unwrap().first(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncation_keeps_a_straddling_group_and_the_newest() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    for first in [1, 4, 7, 10] {
        log.append(&group(first, 3, "t"), &epoch).await.unwrap();
    }
    assert_eq!(log.truncate(0).await.unwrap(), 0);
    assert_eq!(log.truncate(2).await.unwrap(), 0, "(1..=3) also holds 3");
    // upto 4: (1..=3) goes; (4..=6) holds 5 and stays.
    assert_eq!(log.truncate(4).await.unwrap(), 1);
    let (groups, _) = log.read_from(4).await.unwrap();
    assert_eq!(seqs(&groups), vec![(4, 6), (7, 9), (10, 12)]);
    let e = log.read_from(3).await.unwrap_err();
    assert_eq!(e, Error::LogTruncated { seq: 3, first: 4 });
    assert_eq!(e.code(), -5015);
    // Beyond the end: everything but the newest group, so the log's end stays known.
    assert_eq!(log.truncate(100).await.unwrap(), 2);
    assert_eq!(seqs(&log.read_from(10).await.unwrap().0), vec![(10, 12)]);
    assert_eq!(log.last_seq().await.unwrap(), 12);
    let after = log.append(&group(13, 1, "t"), &epoch).await.unwrap();
    let other = etcd.log().await;
    other.append(&group(14, 1, "t"), &epoch).await.unwrap();
    assert_eq!(etcd.log_keys().await, 3);
    log.compact(after).await.unwrap();
    assert_eq!(
        seqs(&log.read_from(11).await.unwrap().0),
        vec![(10, 12), (13, 13), (14, 14)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lowest_applied_seq_counts_live_standbys_only() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    assert_eq!(log.lowest_applied().await.unwrap(), None);
    let (a, b) = (etcd.lease().await, etcd.lease().await);
    log.publish_applied("a", 50, a).await.unwrap();
    log.publish_applied("b", 30, b).await.unwrap();
    assert_eq!(log.lowest_applied().await.unwrap(), Some(30));
    log.publish_applied("b", 70, b).await.unwrap();
    assert_eq!(log.lowest_applied().await.unwrap(), Some(50));
    log.publish_applied("b", 20, b).await.unwrap();

    // b's lease revoked: its entry goes, and only a counts.
    etcd.client.clone().lease_revoke(b).await.unwrap();
    eventually("only a counts", CEILING, async || {
        match log.lowest_applied().await.unwrap() {
            Some(50) => Ok(()),
            other => Err(format!("b still counts: {other:?}")),
        }
    })
    .await;
    let e = log.publish_applied("b", 1, b).await.unwrap_err();
    assert_eq!(e, Error::LeaseNotFound { lease: b });
    for bad in ["", "x/y"] {
        assert_eq!(
            log.publish_applied(bad, 1, a).await.unwrap_err().code(),
            -5001
        );
    }
    let key = format!("{}c", etcd.config.keys().unwrap().standbys());
    etcd.client.clone().put(key, "-1", None).await.unwrap();
    // A value that is no position is ignored (with a warning): it must not stop truncation.
    let before = log.lowest_applied().await.unwrap();
    assert!(before.is_some_and(|l| l != u64::MAX), "{before:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_retries_the_same_group_and_a_watcher_reads_again() {
    let etcd = Etcd::start().await;
    let proxy = TcpProxy::start(&etcd.server.endpoint()).await.unwrap();
    let mut via_proxy = EtcdConfig::new(&proxy.endpoint())
        .unwrap()
        .with_cluster("log");
    via_proxy.connect_timeout = Duration::from_secs(1);
    via_proxy.request_timeout = Duration::from_secs(1);
    let leader = EtcdLog::connect_on(&via_proxy, &Handle::current())
        .await
        .unwrap();
    let standby = EtcdLog::connect_on(&via_proxy, &Handle::current())
        .await
        .unwrap();
    let direct = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    leader.append(&group(1, 1, "x"), &epoch).await.unwrap();
    let (_, at) = standby.read_from(1).await.unwrap();
    let mut watch = standby.watch_from(at);

    proxy.cut();
    let lost = next(&mut watch).await.unwrap_err();
    assert!(lost.is_retryable(), "{lost}");
    // Not sent: the retry after the cut commits it.
    let two = group(2, 1, "x");
    let e = leader.append(&two, &epoch).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(direct.last_seq().await.unwrap(), 1);
    // Committed, but its sender could not learn it (here another client wrote the same
    // value): the retry succeeds and writes nothing.
    let three = group(3, 1, "x");
    proxy.restore();
    let at_two = retry(|| leader.append(&two, &epoch)).await;
    proxy.cut();
    let at_three = direct.append(&three, &epoch).await.unwrap();
    assert!(leader.append(&three, &epoch).await.is_err());
    proxy.restore();
    assert_eq!(retry(|| leader.append(&three, &epoch)).await, at_three);
    assert!(at_two < at_three);

    // The standby reads again from where it was, and watches from there.
    let (groups, at) = retry(|| standby.read_from(2)).await;
    assert_eq!(seqs(&groups), vec![(2, 2), (3, 3)]);
    let mut watch = standby.watch_from(at);
    leader.append(&group(4, 1, "x"), &epoch).await.unwrap();
    assert_eq!(next(&mut watch).await.unwrap().first(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_winner_of_an_election_appends_until_it_resigns() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let ttl = Duration::from_secs(2);
    let election = Election::connect_on(&etcd.config, ttl, Handle::current())
        .await
        .unwrap();
    let first = election.campaign("127.0.0.1:1".into()).await.unwrap();
    let epoch = Epoch::from(&first);
    assert_eq!(epoch.election_key, first.key());
    log.append(&group(1, 2, "first"), &epoch).await.unwrap();
    first.resign().await.unwrap();
    let e = log.append(&group(3, 1, "first"), &epoch).await.unwrap_err();
    assert!(matches!(e, Error::Deposed { current: None, .. }), "{e}");

    let second = election.campaign("127.0.0.1:2".into()).await.unwrap();
    let next_epoch = Epoch::from(&second);
    assert!(next_epoch.create_revision > epoch.create_revision);
    assert_eq!(log.resume(&next_epoch).await.unwrap(), 2);
    log.append(&group(3, 1, "second"), &next_epoch)
        .await
        .unwrap();
    assert_eq!(log.last_seq().await.unwrap(), 3);
    second.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_truncation_is_refused_when_deposed_or_a_standby_registered_since() {
    let etcd = Etcd::start().await;
    let log = etcd.log().await;
    let (epoch, _) = etcd.leader().await;
    for first in [1, 4, 7, 10] {
        log.append(&group(first, 3, "t"), &epoch).await.unwrap();
    }
    let lease = etcd.lease().await;
    log.publish_applied("s1", 9, lease).await.unwrap();
    let (positions, read_at) = log.applied_positions_at().await.unwrap();
    assert_eq!(positions, vec![("s1".to_string(), 9)]);
    // A standby that registers after the read holds the truncation back.
    log.publish_applied("s2", 2, lease).await.unwrap();
    assert_eq!(
        log.truncate_as_leader(6, &epoch, read_at).await.unwrap(),
        None
    );
    assert_eq!(etcd.log_keys().await, 4, "nothing deleted");
    // An existing standby publishing again (same key) does not.
    let (_, read_at) = log.applied_positions_at().await.unwrap();
    log.publish_applied("s1", 10, lease).await.unwrap();
    assert_eq!(
        log.truncate_as_leader(3, &epoch, read_at).await.unwrap(),
        Some(1)
    );
    // A deposed leader deletes nothing.
    let stale = Epoch {
        create_revision: epoch.create_revision - 1,
        ..epoch.clone()
    };
    assert_eq!(
        log.truncate_as_leader(6, &stale, read_at).await.unwrap(),
        None
    );
    assert_eq!(etcd.log_keys().await, 3);
}
