//! `yuebing bench <what>`: the subcommands, which runtime each wants, and what every one does
//! at its end (clear the progress bar, print the table, write `--json`).

use std::path::PathBuf;

use clap::Subcommand;
use indicatif::ProgressBar;
use yuebing_rpc::Token;

use super::report;
use super::{bridge, disk, ha, master, rpc, store, transfer};
use crate::cli::CliError;
use crate::config::{ConfigError, ConfigFile};

/// The benchmarks of `yuebing bench`.
#[derive(Subcommand, Debug)]
pub enum Bench {
    /// The control plane: yuebing-rpc against stock tarpc and a raw TCP echo.
    Rpc(rpc::BenchRpcArgs),
    /// The Transfer Engine between two processes against memcpy and raw loopback TCP.
    Transfer(transfer::BenchTransferArgs),
    /// The store master: core and RPC rates with many objects resident, memory per object.
    Master(master::BenchMasterArgs),
    /// The store's data path: one node process and a pure client (like Mooncake's store bench).
    Store(store::BenchStoreArgs),
    /// The bridge: store and master calls awaited, blocking from threads, and with callbacks.
    Bridge(bridge::BenchBridgeArgs),
    /// Elected masters on etcd (build with --features etcd; needs apt-get install etcd-server):
    /// put rates with the etcd log vs a local log vs none, standby lag, failover time over
    /// repeated SIGKILLs of the leader.
    Ha(ha::BenchHaArgs),
    /// A node's disk tier against the raw device (pwrite + fdatasync, pread) and against a
    /// file per object, writes durable, reads from the device.
    Disk(disk::BenchDiskArgs),
}

impl Bench {
    /// The worker threads of the runtime this bench runs on (`None`: tokio's default).
    pub fn worker_threads(&self, file: &ConfigFile) -> Result<Option<usize>, ConfigError> {
        match self {
            Bench::Transfer(args) => args.worker_threads(file).map(Some),
            // The bridge bench runs on a bridge's runtime of its own; this one only waits for it.
            Bench::Bridge(_) => Ok(Some(1)),
            _ => Ok(None),
        }
    }

    /// Runs the bench with the cluster `token`: its settings from `file`, a progress bar on a
    /// terminal, then its table on stdout and, with `--json`, its rows in that file.
    pub async fn run(self, file: &ConfigFile, token: Option<Token>) -> Result<(), CliError> {
        match self {
            Bench::Rpc(args) => args.run(file).await,
            Bench::Transfer(args) => args.run(file, token).await,
            Bench::Master(args) => args.run(file).await,
            Bench::Store(args) => args.run(file, token).await,
            Bench::Bridge(args) => args.run(file, token).await,
            Bench::Ha(args) => args.run(file, token).await,
            Bench::Disk(args) => args.run(file).await,
        }
    }
}

/// Advances `bar` by one measurement, named `what`.
pub(crate) fn ticker(bar: &ProgressBar) -> impl FnMut(&str) + '_ {
    |what| {
        bar.set_message(what.to_string());
        bar.inc(1);
    }
}

/// Clears the progress bar, prints the table and writes `--json`.
pub(crate) fn finish(
    bench: &str,
    bar: &ProgressBar,
    rows: Result<Vec<report::Row>, String>,
    header: String,
    json: Option<PathBuf>,
) -> Result<(), CliError> {
    bar.finish_and_clear();
    let rows = rows.map_err(CliError::Bench)?;
    println!("{header}");
    print!("{}", report::table(&rows));
    write_json(json, bench, &rows)
}

/// Writes `rows` to `path` (`--json`), if given, and says so.
pub(crate) fn write_json(
    path: Option<PathBuf>,
    bench: &str,
    rows: &[report::Row],
) -> Result<(), CliError> {
    if let Some(path) = path {
        report::write_json(&path, bench, rows).map_err(|e| CliError::Output {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
