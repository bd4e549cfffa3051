//! `yuebing store stats --watch` as a process, with its stdout a file (not a terminal): one
//! `key=value` line per interval while a client puts objects, `error=` lines while the master
//! is gone, and status 0 on SIGINT.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Process;
use yuebing::store::{Client, ClientConfig, Options};
use yuebing_testkit::eventually;
use yuebing_testkit::ports::free_port;

/// Every key of a sample's line, in order.
const KEYS: [&str; 15] = [
    "ts",
    "master",
    "objects",
    "pending_writes",
    "segments",
    "nodes",
    "clients",
    "used_bytes",
    "capacity_bytes",
    "evicted",
    "ops_s",
    "errors_s",
    "p99_us",
    "puts_s",
    "gets_s",
];

/// A line's keys (in order) and values (an error line's up to its message).
fn fields(line: &str) -> (Vec<&str>, HashMap<&str, &str>) {
    let head = line.split(" message=").next().unwrap_or(line);
    let pairs: Vec<(&str, &str)> = head
        .split(' ')
        .map(|kv| {
            kv.split_once('=')
                .unwrap_or_else(|| panic!("{kv:?} in {line:?}"))
        })
        .collect();
    let keys = pairs.iter().map(|(k, _)| *k).collect();
    (keys, pairs.into_iter().collect())
}

/// A rate: `None` for `-` (not known yet).
fn rate(value: &str) -> Option<f64> {
    (value != "-").then(|| value.parse().unwrap_or_else(|e| panic!("{value:?}: {e}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_view_shows_objects_and_put_rates_errors_while_the_master_is_gone_and_ends_on_sigint(
) {
    let mut master = Process::master(free_port(), &[]);
    let ep = master.endpoint();
    let _node = Process::node(&ep, "16M");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("watch.out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_yuebing"));
    cmd.args([
        "store",
        "--master",
        &ep.to_string(),
        "stats",
        "--watch",
        "200ms",
    ])
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(&path).unwrap())
    .stderr(Stdio::null());
    let mut watch = yuebing_testkit::process::spawn(cmd).unwrap();
    let lines = || {
        let text = std::fs::read_to_string(&path).unwrap();
        // A line being written has no newline yet.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete.lines().map(str::to_string).collect::<Vec<_>>()
    };

    // A client puts objects, one every 20 ms, until told to stop.
    let client = Client::start(ClientConfig {
        masters: vec![ep.clone()],
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let putting = Arc::new(AtomicBool::new(true));
    let puts = tokio::spawn({
        let (client, putting) = (client.clone(), putting.clone());
        async move {
            let mut i = 0;
            while putting.load(Ordering::Acquire) {
                client
                    .put(format!("watched-{i}"), &[7u8; 4096], Options::default())
                    .await
                    .unwrap();
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });

    // Objects grow from one line to a later one, and some line shows puts per second.
    let seen = eventually(
        "lines with more objects and a put rate",
        Duration::from_secs(30),
        async || {
            let lines = lines();
            let samples: Vec<_> = lines.iter().map(|l| fields(l).1).collect();
            let objects: Vec<u64> = samples
                .iter()
                .filter_map(|f| f.get("objects")?.parse().ok())
                .collect();
            let grew = objects.windows(2).any(|w| w[1] > w[0]);
            let put = samples.iter().any(|f| {
                f.get("puts_s")
                    .and_then(|r| rate(r))
                    .is_some_and(|r| r > 0.0)
            });
            (grew && put).then_some(lines)
        },
    )
    .await;
    putting.store(false, Ordering::Release);
    puts.await.unwrap();
    let (keys, first) = fields(&seen[0]);
    assert_eq!(keys, KEYS, "{}", seen[0]);
    assert_eq!(first["master"], ep.to_string());
    assert_eq!(first["ops_s"], "-", "no rates before a second sample");
    for line in &seen[1..] {
        let (_, f) = fields(line);
        assert_eq!((f["segments"], f["nodes"]), ("1", "1"), "{line}");
        assert_eq!(f["capacity_bytes"], (16u64 << 20).to_string(), "{line}");
        assert!(
            rate(f["ops_s"]).is_some() && rate(f["errors_s"]).is_some(),
            "{line}"
        );
    }

    // The master gone: the view says so on a line of its own, and goes on.
    master.kill();
    let before = lines().len();
    eventually("an error line", Duration::from_secs(30), async || {
        lines()[before..]
            .iter()
            .find(|l| l.contains(" error="))
            .cloned()
    })
    .await;
    assert!(watch.try_wait().unwrap().is_none(), "the view goes on");
    let errors = lines();
    let error = errors[before..]
        .iter()
        .find(|l| l.contains(" error="))
        .unwrap();
    assert!(
        error.starts_with("ts=") && error.contains(&format!(" master={ep} error=")),
        "{error}"
    );
    assert!(
        error.contains(" code=-") && error.contains(" message="),
        "{error}"
    );

    watch.signal(libc::SIGINT).unwrap();
    let status = eventually("the view's end", Duration::from_secs(20), async || {
        watch.try_wait().unwrap()
    })
    .await;
    assert_eq!(status.code(), Some(0), "{status}");
}
