//! One cluster token end to end, with real processes: a master, two nodes and `yuebing store`
//! started with one `YUEBING_TOKEN` work together; with a wrong token each of the four
//! listeners (master rpc, engine control, tcp data, shm side channel) refuses; the token
//! appears in no log line.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use yuebing::cli::child::{pass_token, ChildProcess};
use yuebing::engine::{EngineConfig, TransferEngine};
use yuebing::rpc::Token;

const TOKEN: &str = "cluster-secret-7f3a9c";

fn yuebing() -> Command {
    Command::new(env!("CARGO_BIN_EXE_yuebing"))
}

/// `yuebing ARGS` with `token` in its environment, debug logs to `log`, waited for until ready.
fn start_logged(args: &[&str], ready: &str, token: &Token, log: &Path) -> ChildProcess {
    let mut cmd = yuebing();
    cmd.args(args)
        .env("RUST_LOG", "debug")
        .stderr(std::fs::File::create(log).unwrap());
    pass_token(&mut cmd, Some(token));
    ChildProcess::spawn_command(cmd, ready).unwrap_or_else(|e| panic!("{e}"))
}

/// `yuebing store ARGS` with `token` (none: no token); its exit status, stdout and stderr.
fn store(master: &str, token: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = yuebing();
    cmd.args(["store", "--master", master])
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null());
    pass_token(&mut cmd, token.map(|t| Token::new(t).unwrap()).as_ref());
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sends a data-plane hello (`magic`, then a token) and returns the one-byte answer.
fn hello(mut s: impl Read + Write, magic: &[u8], token: &[u8]) -> u8 {
    s.write_all(magic).unwrap();
    s.write_all(&(token.len() as u16).to_be_bytes()).unwrap();
    s.write_all(token).unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    answer[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_reaches_every_connection_and_a_wrong_one_is_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| -> PathBuf { dir.path().join(format!("{name}.log")) };
    let token = Token::new(TOKEN).unwrap();
    let master = start_logged(
        &["master", "--port", "0", "--metrics-port", "off"],
        "yuebing master ready on ",
        &token,
        &log("master"),
    );
    let addr = master.announced.clone();
    let nodes: Vec<ChildProcess> = (0..2)
        .map(|i| {
            let args = ["node", "--master", &addr, "--store-size", "64M"];
            start_logged(
                &args,
                "yuebing node ready ",
                &token,
                &log(&format!("node{i}")),
            )
        })
        .collect();

    // Everyone with the token: a value put on both nodes and read back, over each transport.
    let value = dir.path().join("value");
    std::fs::write(&value, vec![7u8; 300_000]).unwrap();
    let value = value.to_str().unwrap();
    let mut said = String::new();
    let (ok, _, err) = store(&addr, Some(TOKEN), &["put", "k", value, "--replicas", "2"]);
    assert!(ok, "put with the token: {err}");
    said.push_str(&err);
    for transport in ["tcp", "shm"] {
        let back = dir.path().join(format!("back-{transport}"));
        let back = back.to_str().unwrap();
        let (ok, _, err) = store(
            &addr,
            Some(TOKEN),
            &["--transport", transport, "get", "k", back],
        );
        assert!(ok, "get over {transport}: {err}");
        assert_eq!(std::fs::read(back).unwrap(), vec![7u8; 300_000]);
        said.push_str(&err);
    }

    // The master's rpc: a client with a wrong or no token is refused with the typed error.
    for wrong in [Some("wrong-token"), None] {
        let (ok, _, err) = store(&addr, wrong, &["exist", "k"]);
        assert!(
            !ok && err.contains("-2004"),
            "master, token {wrong:?}: {err}"
        );
        said.push_str(&err);
    }

    // A node's engine control service.
    let node_name = nodes[0].announced.clone();
    let stranger = TransferEngine::start(EngineConfig {
        token: Some(Token::new("wrong-token").unwrap()),
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let e = stranger.open_segment(&node_name).await.unwrap_err();
    assert_eq!(e.code(), -2004, "engine control: {e}");

    // Its tcp data port and its shm side channel, found in its descriptor (fetched with the
    // token), each answer a wrong token's hello with "wrong token" and nothing else.
    let friend = TransferEngine::start(EngineConfig {
        token: Some(token.clone()),
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let handle = friend.open_segment(&node_name).await.unwrap();
    let d = friend.segment_descriptor(handle).unwrap();
    let data = d.transports["tcp"]["endpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let socket = d.transports["shm"]["socket"].as_str().unwrap().to_string();
    let wrong_token_status = 2;
    let tcp = std::net::TcpStream::connect(&data).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        hello(&tcp, b"YBTCP\0\0\x02", b"wrong-token"),
        wrong_token_status
    );
    let shm = UnixStream::connect(&socket).unwrap();
    shm.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        hello(&shm, b"YBSHM\0\0\x02", b"wrong-token"),
        wrong_token_status
    );
    // Refused connections are closed: nothing more is read or answered.
    for mut s in [Box::new(tcp) as Box<dyn Read>, Box::new(shm)] {
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0);
    }

    // Every refusal was logged with the peer; the token was never logged.
    drop(nodes);
    drop(master);
    let logs: String = ["master", "node0", "node1"]
        .iter()
        .map(|n| std::fs::read_to_string(log(n)).unwrap())
        .collect();
    assert!(
        logs.contains("refused connection"),
        "the master logs its refusals"
    );
    assert!(logs.contains("refused a tcp data connection") && logs.contains("peer="));
    assert!(logs.contains("refused a shm side-channel connection"));
    assert!(
        !logs.contains(TOKEN) && !said.contains(TOKEN),
        "the token was logged"
    );
}
