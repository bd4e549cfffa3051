//! Failover on a three-member etcd, in one process (issue 16, "What it must show"):
//! - a leader cut off from etcd by a proxy, while the other masters still reach it, stops
//!   serving reads and writes; a standby takes over; and no two masters ever accepted writes in
//!   interleaving epochs, checked from each master's record and from the log itself;
//! - a read under the old leader's lease, across a failover, returns the object's bytes or a
//!   typed error, never bytes of a later object written into reused space.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tokio::runtime::Handle;
use yuebing_etcd::ha::{Accepted, HaMaster};
use yuebing_etcd::EtcdLog;
use yuebing_store::master::{ClientId, MasterClient};
use yuebing_store::{Fetched, Options};
use yuebing_testkit::etcd::{EtcdCluster, EtcdServer, TcpProxy};
use yuebing_testkit::{eventually, patterns::pattern};

/// How often the test clients ping the master (and so remount after a failover).
const HEARTBEAT: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_a_three_member_etcd_never_overlaps_the_next_epoch() {
    let etcd = EtcdCluster::start(3).await.unwrap();
    let proxy = TcpProxy::start(&etcd.endpoint(0)).await.unwrap();
    let mut cut_off = etcd.config();
    cut_off.endpoints = vec![proxy.endpoint()];
    let handle = Handle::current();
    let first = start(ha_config(cut_off, "fo1")).await;
    eventually(
        "the first master leads",
        Duration::from_secs(20),
        async || first.serving().then_some(()),
    )
    .await;
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(start(ha_config(etcd.config(), "fo1")).await);
    }
    let (client, _leader) = follower(&etcd.config().with_cluster("fo1"), 32 << 20, HEARTBEAT).await;
    let client = Arc::new(client);

    // Puts go on all along; each acknowledged one is remembered.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let opts = Options::deadline(Duration::from_secs(5));
            let (mut acked, mut failed) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                match client.put(&format!("k{i}"), &pattern(2048, i), &opts).await {
                    Ok(()) => acked.push(i),
                    Err(e) => failed.push(e),
                }
                i += 1;
            }
            (acked, failed)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.cut();
    let cut_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), first.stopped())
        .await
        .expect("the cut-off leader stops");
    // It serves neither reads nor writes now.
    let direct = MasterClient::new(first.local_endpoint().unwrap().clone(), ClientId(9));
    assert_eq!(direct.exist("k0").await.unwrap_err().code(), -1010);
    assert_eq!(direct.remove_all(true).await.unwrap_err().code(), -1010);
    let new = eventually(
        "a standby leads",
        Duration::from_secs(2 * 2 + 5),
        async || others.iter().position(HaMaster::serving),
    )
    .await;
    eprintln!("a standby serves {:?} after the cut", cut_at.elapsed());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Release);
    let (acked, failed) = writer.await.unwrap();
    for e in &failed {
        // A put cut by the failover fails typed: not the leader, unknown outcome, timeout.
        assert!(e.code() < 0, "{e}");
    }

    // Each master's record: distinct epochs whose appends never interleave in etcd.
    let mut records: Vec<Accepted> = std::iter::once(&first)
        .chain(&others)
        .filter_map(HaMaster::accepted)
        .collect();
    assert!(records.len() >= 2, "{records:?}");
    records.sort_by_key(|r| r.epoch);
    for pair in records.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        assert!(old.epoch < new.epoch, "{records:?}");
        assert!(old.revisions.1 < new.revisions.0, "{records:?}");
        assert!(old.seqs.1 < new.seqs.0, "{records:?}");
    }
    assert!(records.iter().all(|r| r.write_ends > 0), "{records:?}");
    assert_eq!(records.last().unwrap().epoch, others[new].status().epoch);
    // The log agrees: epochs never go back from entry to entry, every entry is of an epoch
    // some master led, and what each master made durable lies among its epoch's entries
    // (the log may hold a little more of an epoch: an append whose answer was lost in the cut).
    let log = EtcdLog::connect_on(&etcd.config().with_cluster("fo1"), &handle)
        .await
        .unwrap();
    let (groups, _) = log.read_from(1).await.unwrap();
    let entries: Vec<(u64, u64)> = groups
        .iter()
        .flat_map(|g| g.entries())
        .map(|e| (e.seq, e.epoch))
        .collect();
    assert_eq!(
        entries.len() as u64,
        entries.last().unwrap().0,
        "contiguous from 1"
    );
    assert!(
        entries.windows(2).all(|w| w[0].1 <= w[1].1),
        "an epoch went back"
    );
    for &(seq, epoch) in &entries {
        assert!(
            records.iter().any(|r| r.epoch as u64 == epoch),
            "entry {seq} of epoch {epoch}, which no master led: {records:?}"
        );
    }
    for r in &records {
        let of_epoch: Vec<u64> = entries
            .iter()
            .filter(|e| e.1 == r.epoch as u64)
            .map(|e| e.0)
            .collect();
        let (first, last) = (of_epoch[0], *of_epoch.last().unwrap());
        assert!(
            first <= r.seqs.0 && r.seqs.1 <= last,
            "{r:?} outside its epoch's entries {first}..={last}"
        );
    }

    // Every acknowledged put reads back.
    for &i in &acked {
        reads_back(&client, &format!("k{i}"), &pattern(2048, i)).await;
    }
    eprintln!(
        "{} puts acknowledged, {} failed typed",
        acked.len(),
        failed.len()
    );
    for m in others {
        m.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_under_the_old_leaders_lease_never_sees_reused_bytes() {
    const LEN: usize = 256 << 10;
    let etcd = EtcdServer::start().await.unwrap();
    let first = leader(ha_config(etcd.config(), "fo2")).await;
    let second = start(ha_config(etcd.config(), "fo2")).await;
    // The owner's space holds four such objects; the reader has none.
    let (owner, _w1) = follower(
        &etcd.config().with_cluster("fo2"),
        4 * LEN as u64,
        HEARTBEAT,
    )
    .await;
    let (reader, _w2) = follower(&etcd.config().with_cluster("fo2"), 0, HEARTBEAT).await;
    let opts = Options::deadline(Duration::from_secs(20));
    owner.put("victim", &pattern(LEN, 1), &opts).await.unwrap();
    let found = match reader.get_or_locate("victim", 0, &opts).await.unwrap() {
        Fetched::Located(found) => found,
        Fetched::Value(_) => panic!("located, not read"),
    };

    // The leader dies holding that lease; the next one does not know it.
    drop(first);
    eventually(
        "the standby leads",
        Duration::from_secs(2 * 2 + 5),
        async || second.serving().then_some(()),
    )
    .await;
    // The victim goes, and other objects would take its space if it were free.
    eventually(
        "the victim is removed",
        Duration::from_secs(10),
        async || owner.remove("victim", true, &opts).await.ok(),
    )
    .await;
    // Short deadlines: right after a failover the client retries a put that found no space
    // (the nodes may not have remounted), and here the space is held on purpose.
    let quick = Options::deadline(Duration::from_millis(500));
    let mut written = 0;
    for i in 2..8 {
        if owner
            .put(&format!("new{i}"), &pattern(LEN, i), &quick)
            .await
            .is_ok()
        {
            written += 1;
        }
    }
    assert!(
        written < 4,
        "the victim's space was not held: {written} objects fit"
    );

    // The reader, still inside the old lease, gets the victim's bytes or a typed error.
    let buf = reader.engine().allocate(LEN, true).unwrap();
    match reader
        .read_located(&found, buf.addr(), LEN as u64, &opts)
        .await
    {
        Ok(n) => {
            assert_eq!(n, LEN as u64);
            let mut back = vec![0u8; LEN];
            // SAFETY: the read into `buf` is final.
            unsafe { buf.read_at(0, &mut back) }.unwrap();
            assert!(back == pattern(LEN, 1), "the read returned other bytes");
        }
        Err(e) => assert!(e.code() < 0, "{e}"),
    }
    second.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_right_after_a_failover_wait_for_the_nodes_to_remount() {
    let etcd = EtcdServer::start().await.unwrap();
    let first = leader(ha_config(etcd.config(), "fo3")).await;
    let second = start(ha_config(etcd.config(), "fo3")).await;
    // The owner of the space remounts only at its heartbeat, 2 s apart.
    let (owner, _owner_watch) = follower(
        &etcd.config().with_cluster("fo3"),
        8 << 20,
        Duration::from_secs(2),
    )
    .await;
    let (reader, _w) = follower(&etcd.config().with_cluster("fo3"), 0, HEARTBEAT).await;
    let opts = Options::deadline(Duration::from_secs(15));
    put_objects(&owner, 0..10, 4096, &opts).await;
    drop(first);
    eventually(
        "the standby leads",
        Duration::from_secs(2 * 2 + 5),
        async || second.serving().then_some(()),
    )
    .await;
    // At once, without retrying here: the client waits for the owner to remount.
    let started = Instant::now();
    for i in 0..10 {
        let got = reader.get(&format!("k{i}"), &opts).await.unwrap();
        assert_eq!(got, pattern(4096, i));
    }
    reader.put("new", &pattern(4096, 99), &opts).await.unwrap();
    eprintln!(
        "reads and a put right after the failover took {:?}",
        started.elapsed()
    );
    second.shutdown(Duration::from_secs(1)).await;
}
