//! The target process of `bench transfer`: an engine with one pre-faulted buffer, announced on
//! stdout as one JSON line; it exits when its stdin closes (so it never outlives the bench).

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use yuebing_engine::{EngineConfig, RemoteAccess, TransferEngine};

/// What the target announces.
#[derive(Debug, Serialize, Deserialize)]
pub struct Announce {
    /// Segment name (the engine's rpc `host:port`).
    pub name: String,
    /// Address of its buffer.
    pub addr: u64,
    /// Length of its buffer.
    pub len: u64,
    /// Its process id.
    pub pid: u32,
}

/// Runs the target until stdin closes; its engine requires `token`.
pub async fn run(
    bind: String,
    len: usize,
    token: Option<yuebing_rpc::Token>,
) -> Result<(), String> {
    let engine = TransferEngine::start(EngineConfig {
        bind,
        token,
        ..EngineConfig::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    // The initiator reads and writes it: exported for both.
    let buffer = engine
        .allocate_exported(len, true, RemoteAccess::READ_WRITE)
        .map_err(|e| e.to_string())?;
    let announce = Announce {
        name: engine.name().to_string(),
        addr: buffer.addr(),
        len: len as u64,
        pid: std::process::id(),
    };
    let line = serde_json::to_string(&announce).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())?;
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    drop(buffer);
    drop(engine);
    Ok(())
}

/// A target process started with `exe bench-target`; killed and reaped when dropped (also
/// when a test using it panics).
pub struct TargetProcess {
    /// The child process.
    pub child: Child,
    /// What it announced.
    pub announce: Announce,
}

impl TargetProcess {
    /// Starts `exe bench-target` serving `len` bytes on `workers` runtime worker threads,
    /// requiring `token` (handed over in its environment), and waits for its announcement.
    pub fn spawn(
        exe: &Path,
        len: usize,
        workers: usize,
        token: Option<&yuebing_rpc::Token>,
    ) -> Result<TargetProcess, String> {
        let mut cmd = Command::new(exe);
        crate::cli::child::pass_token(&mut cmd, token);
        let mut child = cmd
            .args([
                "bench-target",
                "--bind",
                "127.0.0.1:0",
                "--len",
                &len.to_string(),
                "--worker-threads",
                &workers.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the target process: {e}"))?;
        let stdout = child.stdout.take().ok_or("target has no stdout")?;
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let announce = match read {
            Ok(n) if n > 0 => {
                serde_json::from_str(&line).map_err(|e| format!("target said {line:?}: {e}"))
            }
            _ => Err("the target process exited before announcing itself".to_string()),
        };
        match announce {
            Ok(announce) => Ok(TargetProcess { child, announce }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }
}

impl Drop for TargetProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
