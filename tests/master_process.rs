//! `yuebing master` as a real process on 127.0.0.1: readiness on stdout, the service, and a
//! crash (SIGKILL) and restart with `--data-dir`.

mod common;

use std::path::Path;
use std::process::Command;

use common::Process;
use yuebing::store::master::{ClientId, MasterClient, MountSpec, PingResult, PutConfig};

/// A master on any port with a long client TTL and `--data-dir`.
fn start_master(data_dir: &Path, extra: &[&str]) -> Process {
    let dir = data_dir.to_str().expect("utf-8 temp dir");
    let mut args = vec!["--client-ttl-ms", "60000", "--data-dir", dir];
    args.extend_from_slice(extra);
    Process::master(0, &args)
}

fn space() -> Vec<MountSpec> {
    vec![MountSpec {
        node: "127.0.0.1:7000".into(),
        base: 0x7000_0000,
        len: 1 << 30,
    }]
}

#[tokio::test]
async fn committed_objects_are_back_after_a_crash_and_readable_once_their_node_remounts() {
    let dir = tempfile::tempdir().unwrap();
    let mut master = start_master(dir.path(), &["--snapshot-every", "40"]);
    let c = MasterClient::new(master.endpoint(), ClientId(42));
    assert!(c.health().await.unwrap().ready);
    c.mount(space()).await.unwrap();
    for i in 0..100u64 {
        let key = format!("kv/{i}");
        c.put_start(
            &key,
            1000 + i,
            &PutConfig::default(),
            yuebing_store::Write::Put,
        )
        .await
        .unwrap();
        c.put_end(&key).await.unwrap();
    }
    c.put_start(
        "never-ended",
        10,
        &PutConfig::default(),
        yuebing_store::Write::Put,
    )
    .await
    .unwrap();
    let where_ = c.get_replica_list("kv/7").await.unwrap().replicas;
    // Every answered put is durable: a crash now loses none of them.
    master.kill();

    let master = start_master(dir.path(), &[]);
    let c = MasterClient::new(master.endpoint(), ClientId(42));
    assert_eq!(c.stats().await.unwrap().objects, 100);
    assert!(!c.exist("never-ended").await.unwrap());
    assert_eq!(c.get_replica_list("kv/7").await.unwrap_err().code(), -703);
    assert_eq!(c.ping().await.unwrap(), PingResult::NeedRemount);
    c.remount(space()).await.unwrap();
    assert_eq!(c.get_replica_list("kv/7").await.unwrap().replicas, where_);
    assert_eq!(c.get_size("kv/99").await.unwrap(), 1099);
}

#[test]
fn bad_settings_fail_with_a_named_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .args(["master", "--port", "0", "--high-watermark", "1.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error[ConfigError") && err.contains("high_watermark"),
        "{err}"
    );
}

/// Runs `yuebing --config CFG master` with the extra environment; returns its status and stderr.
fn master_with(cfg: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_yuebing"))
        .envs(env.iter().copied())
        .arg("--config")
        .arg(cfg)
        .arg("master")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn settings_come_from_the_environment_and_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("y.toml");
    std::fs::write(&cfg, "[master]\nport = 0\neviction_ratio = 2.0\n").unwrap();
    let (code, err) = master_with(&cfg, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("eviction_ratio 2"), "{err}");
    // A flag (here through its YUEBING_* variable) wins over the file.
    let (_, err) = master_with(&cfg, &[("YUEBING_MASTER_EVICTION_RATIO", "0")]);
    assert!(err.contains("eviction_ratio 0 "), "{err}");
}
