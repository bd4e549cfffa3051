//! Copy and move tasks with real processes: a `yuebing master` with a data directory, two
//! `yuebing node`s, the operator commands `yuebing store copy|move|task`, and the tasks read
//! back after the master was killed and restarted from its data directory.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::Process;
use yuebing::rpc::Endpoint;
use yuebing::store::master::{PutConfig, TaskId, TaskState};
use yuebing::store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;
use yuebing_testkit::patterns::pattern;
use yuebing_testkit::ports::free_port;

/// `yuebing store --master MASTER ARGS`: whether it succeeded, its stdout and stderr.
fn store(master: &Endpoint, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args(["store", "--master", &master.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn nodes_of(c: &Client, key: &str) -> Vec<String> {
    let r = c.replicas(key, Options::default()).await.unwrap();
    let mut nodes: Vec<String> = r.replicas.into_iter().map(|r| r.node).collect();
    nodes.sort();
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_copy_and_move_objects_and_tasks_outlive_a_master_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let port = free_port();
    let mut master = Process::master(port, &["--data-dir", d]);
    let ep = master.endpoint();
    let a = Process::node(&ep, "32M");
    let b = Process::node(&ep, "32M");
    let (na, nb) = (a.ready().to_string(), b.ready().to_string());
    let c = Client::start(ClientConfig {
        masters: vec![ep.clone()],
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let on_a = Options::put(PutConfig {
        preferred: vec![na.clone()],
        ..PutConfig::default()
    });
    let (vc, vm) = (pattern(2 << 20, 1), pattern(100_000, 2));
    c.put("copied", &vc, &on_a).await.unwrap();
    c.put("moved", &vm, &on_a).await.unwrap();

    let (ok, out, err) = store(&ep, &["copy", "copied", &nb, "--wait"]);
    assert!(ok, "{out}{err}");
    let mut lines = out.lines();
    let id: TaskId = lines.next().unwrap().parse().unwrap();
    let done = lines.next().unwrap();
    assert!(done.contains("REPLICA_COPY\tSUCCESS\tcopied"), "{done}");
    let mut both = vec![na.clone(), nb.clone()];
    both.sort();
    assert_eq!(nodes_of(&c, "copied").await, both);

    let (ok, out, err) = store(&ep, &["move", "moved", &na, &nb, "--wait"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("REPLICA_MOVE\tSUCCESS\tmoved"), "{out}");
    assert_eq!(nodes_of(&c, "moved").await, vec![nb.clone()]);

    // Refusals are one line naming the error and its code; the exit status says so.
    let (ok, _, err) = store(&ep, &["move", "copied", &na, &na]);
    assert!(!ok && err.contains("-600"), "{err}");
    let (ok, _, err) = store(&ep, &["task", "0-1"]);
    assert!(
        !ok && err.contains("TaskNotFound") && err.contains("-1400"),
        "{err}"
    );
    let (ok, _, err) = store(&ep, &["task", "x-y"]);
    assert!(!ok && err.contains("task id"), "{err}");

    // The master dies and comes back from its data directory: the tasks are still known.
    master.signal(libc::SIGKILL);
    master.kill();
    let _master = Process::master(port, &["--data-dir", d]);
    let info = eventually("the task known again", Duration::from_secs(15), || async {
        c.query_task(id, Options::default()).await
    })
    .await;
    assert_eq!(
        (info.state, info.key.as_str()),
        (TaskState::Success, "copied")
    );
    let (ok, out, err) = store(&ep, &["task", &id.to_string()]);
    assert!(
        ok && out.starts_with(&format!("{id}\tREPLICA_COPY\tSUCCESS")),
        "{out}{err}"
    );
    // And the bytes of the new replicas are what was put, once the nodes remounted.
    drop(a);
    let got = eventually("read from the copies", Duration::from_secs(15), || async {
        c.get("moved", Options::default()).await
    })
    .await;
    assert_eq!(got, vm);
    assert_eq!(c.get("copied", Options::default()).await.unwrap(), vc);
}
