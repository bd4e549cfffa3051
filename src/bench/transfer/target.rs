//! The target process of `bench transfer`: an engine with one pre-faulted buffer, announced on
//! stdout as one JSON line; it exits when its stdin closes (so it never outlives the bench).

use std::io::Write as _;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use yuebing_engine::{EngineConfig, TransferEngine};

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

/// Runs the target until stdin closes.
pub async fn run(bind: String, len: usize) -> Result<(), String> {
    let engine = TransferEngine::start(EngineConfig {
        bind,
        ..EngineConfig::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let buffer = engine.allocate(len, true).map_err(|e| e.to_string())?;
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
