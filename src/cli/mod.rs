//! Subcommands of the `yuebing` tool that live in the library (so tests and benches can reuse
//! their settings resolution): `master`, `node`, `store …`, `demo` (and `demo --ha`),
//! and the child processes (master, nodes) the demo and `bench store` start.

pub mod child;
pub mod client_args;
pub mod cluster;
pub mod demo;
pub mod demo_ha;
pub mod ha;
#[cfg(feature = "etcd")]
pub mod local_ha;
pub mod master;
pub mod node;
pub mod parent;
pub mod store;

use crate::config::{ConfigError, ConfigFile};

/// Runtime worker threads from `--worker-threads` or `SECTION.worker_threads` (`None`:
/// `default`); zero is refused.
pub fn worker_threads(
    file: &ConfigFile,
    section: &str,
    flag: Option<usize>,
    default: usize,
) -> Result<usize, ConfigError> {
    at_least_one_worker(
        section,
        file.resolve(section, "worker_threads", flag, default)?,
    )
}

/// `n` workers for `SECTION.worker_threads`, or a ConfigError for zero.
pub fn at_least_one_worker(section: &str, n: usize) -> Result<usize, ConfigError> {
    match n {
        0 => Err(ConfigError {
            path: format!("{section}.worker_threads"),
            reason: "must be at least 1".into(),
        }),
        n => Ok(n),
    }
}

/// Waits for SIGINT or SIGTERM, or (in a child process that watches for it) for its parent's
/// end ([`parent::parent_gone`]).
pub async fn wait_for_signal() -> yuebing_store::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| yuebing_store::Error::Io {
            path: "signal handler".into(),
            reason: e.to_string(),
        })?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        () = parent::parent_gone() => {}
    }
    Ok(())
}
