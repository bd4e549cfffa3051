//! Copy and move tasks end to end: a master and three clients with store space; the client
//! holding the source replica runs each task through its engine, and the bytes are read back
//! from the new replicas after the old one is gone.

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, PutConfig, RunningMaster, TaskId, TaskState};
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;

async fn cluster() -> (RunningMaster, Vec<Client>) {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let cfg = ClientConfig {
            masters: vec![master.local_endpoint().clone()],
            store_size: 8 << 20,
            heartbeat: Duration::from_millis(50),
            ..ClientConfig::default()
        };
        clients.push(Client::start(cfg).await.unwrap());
    }
    (master, clients)
}

fn on(node: &Client) -> Options {
    Options {
        deadline: Some(Duration::from_secs(10)),
        put: Some(PutConfig {
            preferred: vec![node.hostname().to_string()],
            ..PutConfig::default()
        }),
        ..Options::default()
    }
}

async fn finished(c: &Client, id: TaskId) -> TaskState {
    let opts = Options::deadline(Duration::from_secs(5));
    eventually("the task ends", Duration::from_secs(20), async || {
        let info = c.query_task(id, &opts).await.unwrap();
        info.state.is_finished().then_some(info.state)
    })
    .await
}

async fn nodes_of(c: &Client, key: &str) -> Vec<String> {
    let opts = Options::deadline(Duration::from_secs(5));
    let mut nodes: Vec<String> = c
        .replicas(key, &opts)
        .await
        .unwrap()
        .replicas
        .into_iter()
        .map(|r| r.node)
        .collect();
    nodes.sort();
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_and_moves_run_on_the_source_and_their_bytes_read_back() {
    let (_master, c) = cluster().await;
    let opts = Options::deadline(Duration::from_secs(10));
    let value: Vec<u8> = (0..3 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let moved: Vec<u8> = value.iter().map(|b| b ^ 0x5a).collect();
    c[0].put("copied", &value, on(&c[0])).await.unwrap();
    c[0].put("moved", &moved, on(&c[0])).await.unwrap();
    let (n0, n1, n2) = (
        c[0].hostname().to_string(),
        c[1].hostname().to_string(),
        c[2].hostname().to_string(),
    );

    // Any client may ask; the one holding the source runs it.
    let copy = c[2]
        .create_copy_task("copied", &[&n1, &n2], &opts)
        .await
        .unwrap();
    let mv = c[1]
        .create_move_task("moved", &n0, &n1, &opts)
        .await
        .unwrap();
    assert_ne!(copy, mv);
    let info = c[1].query_task(copy, &opts).await.unwrap();
    assert_eq!(info.client, c[0].id());
    assert_eq!(finished(&c[1], copy).await, TaskState::Success);
    assert_eq!(finished(&c[1], mv).await, TaskState::Success);
    let mut all = vec![n0.clone(), n1.clone(), n2.clone()];
    all.sort();
    assert_eq!(nodes_of(&c[1], "copied").await, all);
    assert_eq!(nodes_of(&c[1], "moved").await, vec![n1.clone()]);

    // The source node goes (its space with it): the new replicas serve every byte.
    let mut c = c;
    let source = c.remove(0);
    drop(source);
    eventually(
        "the source node's replicas are gone",
        Duration::from_secs(20),
        async || !nodes_of(&c[1], "copied").await.contains(&n0),
    )
    .await;
    for reader in &c {
        assert_eq!(reader.get("copied", &opts).await.unwrap(), value);
        assert_eq!(reader.get("moved", &opts).await.unwrap(), moved);
    }
    let unknown = c[0].query_task(TaskId(99), &opts).await.unwrap_err();
    assert_eq!(unknown.code(), -1400);
}
