//! Subcommands of the `yuebing` tool that live in the library (so tests and benches can reuse
//! their settings resolution): `master`, `node`, `store …`, `demo`,
//! and the child processes (master, nodes) the demo and `bench store` start.

pub mod child;
pub mod client_args;
pub mod demo;
pub mod master;
pub mod node;
pub mod store;

/// Waits for SIGINT or SIGTERM.
pub async fn wait_for_signal() -> yuebing_store::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| yuebing_store::Error::Io {
            path: "signal handler".into(),
            reason: e.to_string(),
        })?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}
