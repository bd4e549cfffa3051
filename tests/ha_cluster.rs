//! Issue 16 with real processes: etcd, three elected `yuebing master --etcd` and three nodes on
//! 127.0.0.1. 1000 objects are put with 2 replicas; the leader is SIGKILLed; a standby leads
//! within 2 × TTL + 5 s, every object reads back byte-exact and puts go on; the old leader,
//! restarted, rejoins as a standby. (Needs the `etcd` feature: `scripts/test.sh` runs it.)

#![cfg(feature = "etcd")]

mod common;

use std::time::{Duration, Instant};

use common::Process;
use yuebing::etcd::Election;
use yuebing::rpc::Endpoint;
use yuebing::store::master::{ClientId, MasterClient, PutConfig};
use yuebing::store::{Client, ClientConfig, Options};
use yuebing_testkit::etcd::EtcdServer;
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;
use yuebing_testkit::ports::free_port;

const TTL_MS: u64 = 2000;

fn elected_master(etcd: &str, port: u16) -> Process {
    let ttl = TTL_MS.to_string();
    Process::master(
        port,
        &[
            "--etcd",
            etcd,
            "--cluster",
            "it",
            "--election-ttl-ms",
            &ttl,
            "--client-ttl-ms",
            "60000",
        ],
    )
}

fn node(masters: &str) -> Process {
    let args = [
        "node",
        "--master",
        masters,
        "--store-size",
        "64M",
        "--transport",
        "tcp",
        "--heartbeat-ms",
        "100",
    ];
    Process::start(&args, "yuebing node ready ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_no_committed_object_is_lost() {
    let etcd = EtcdServer::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let mut masters: Vec<(u16, Process)> = (0..3)
        .map(|_| {
            let port = free_port();
            (port, elected_master(&endpoint, port))
        })
        .collect();
    let list: Vec<Endpoint> = masters.iter().map(|(_, m)| m.endpoint()).collect();
    let joined = list
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let election = Election::connect_on(
        &common::etcd_config(&etcd).with_cluster("it"),
        Duration::from_secs(2),
        tokio::runtime::Handle::current(),
    )
    .await
    .unwrap();
    let leader = eventually("a leader", Duration::from_secs(30), || async {
        election.leader().await.ok().flatten()
    })
    .await;
    let _nodes: Vec<Process> = (0..3).map(|_| node(&joined)).collect();
    let client = Client::start(ClientConfig {
        masters: list.clone(),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options {
        deadline: Some(Duration::from_secs(30)),
        put: Some(PutConfig {
            replica_num: 2,
            ..PutConfig::default()
        }),
        ..Options::default()
    };
    // The nodes mount through whichever master leads.
    eventually("store space", Duration::from_secs(30), || async {
        client.put("probe", b"p", &opts).await.ok()
    })
    .await;
    for i in 0..1000 {
        client
            .put(&format!("obj/{i}"), &pattern(4096, i), &opts)
            .await
            .unwrap();
    }

    // SIGKILL the leader.
    let at = masters
        .iter()
        .position(|(_, m)| m.endpoint().to_string() == leader.address)
        .expect("the leader is one of ours");
    let (port, mut old) = masters.remove(at);
    old.kill();
    let killed = Instant::now();
    eventually(
        "a new leader serves",
        Duration::from_millis(2 * TTL_MS + 5000),
        || async { client.put("after-kill", b"x", &opts).await.ok() },
    )
    .await;
    let took = killed.elapsed();
    let new = election.leader().await.unwrap().expect("a leader");
    assert!(new.epoch > leader.epoch, "{new:?} after {leader:?}");
    eprintln!("failover: a put succeeded {took:?} after the leader was killed");

    for i in 0..1000 {
        let key = format!("obj/{i}");
        let got = eventually(&key, Duration::from_secs(30), || async {
            client.get(&key, &opts).await.ok()
        })
        .await;
        assert_eq!(got, pattern(4096, i), "{key}");
    }
    for i in 0..50 {
        client
            .put(&format!("later/{i}"), &pattern(4096, i), &opts)
            .await
            .unwrap();
    }

    // The old leader comes back on its port, as a standby of the new one.
    let back = elected_master(&endpoint, port);
    let direct = MasterClient::new(back.endpoint(), ClientId(77));
    let e = direct.exist("obj/1").await.unwrap_err();
    assert_eq!(e.code(), -1010, "a standby refuses: {e}");
    assert_eq!(
        election.leader().await.unwrap().expect("a leader").address,
        new.address,
        "the restarted master did not take over"
    );
    assert_eq!(
        client.get("later/7", &opts).await.unwrap(),
        pattern(4096, 7)
    );
    // ... and catches up with the new leader's log.
    let to_leader = MasterClient::new(new.address.parse().unwrap(), ClientId(78));
    eventually(
        "the restarted master catches up",
        Duration::from_secs(30),
        || async {
            let leading = to_leader.health().await.ok()?;
            let standby = direct.health().await.ok()?;
            (standby.role == "standby" && standby.last_seq >= leading.durable_seq).then_some(())
        },
    )
    .await;

    // An operator sees one leader in the new epoch and two standbys.
    let stats = std::process::Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args(["store", "stats", "--master", &joined])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(
        stats.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&stats.stderr)
    );
    let roles: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("master\t"))
        .collect();
    let leaders: Vec<&&str> = roles.iter().filter(|l| l.contains("\tleader\t")).collect();
    assert_eq!(leaders.len(), 1, "{text}");
    assert!(
        leaders[0].contains(&format!("epoch {}", new.epoch)),
        "{text}"
    );
    assert_eq!(
        roles.iter().filter(|l| l.contains("\tstandby\t")).count(),
        2,
        "{text}"
    );
    drop(back);
}
