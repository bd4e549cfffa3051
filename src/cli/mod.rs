//! Subcommands of the `yuebing` tool that live in the library (so tests and benches can reuse
//! their settings resolution): `master`, `node`, `store …` (and `store stats --watch`'s live
//! view), `demo` (and `demo --ha`),
//! and the child processes (master, nodes) the demo and `bench store` start; the error every
//! command fails with ([`CliError`]) and its progress bar ([`progress`]).

pub mod child;
pub mod client_args;
pub mod cluster;
pub mod demo;
pub mod demo_ha;
pub mod duration;
pub mod error;
pub mod ha;
#[cfg(feature = "etcd")]
pub mod local_ha;
pub mod master;
pub mod node;
pub mod parent;
pub mod store;
pub mod watch;

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{ConfigError, ConfigFile};
pub use error::CliError;

/// A progress bar of `total` steps on a terminal; a hidden one when stdout is not a terminal.
pub fn progress(total: u64) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        bar.set_style(style);
    }
    bar
}

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
