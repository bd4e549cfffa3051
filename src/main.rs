//! The `yuebing` command-line tool: the top-level commands and their dispatch. Each command's
//! flags and runner live in the library: `yuebing::cli` (master, node, store, demo) and
//! `yuebing::bench` (`bench <what>`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use yuebing::bench::command::Bench;
use yuebing::bench::transfer;
use yuebing::cli::client_args::ClientArgs;
use yuebing::cli::cluster::ClusterArgs;
use yuebing::cli::demo::{self, DemoArgs};
use yuebing::cli::master::{self, MasterArgs};
use yuebing::cli::node::{self, NodeArgs};
use yuebing::cli::store::{self, StoreCmd};
use yuebing::cli::{progress, CliError};
use yuebing::config::ConfigFile;

/// yuebing: move and cache large byte objects between processes and machines.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// TOML file with settings (flags and YUEBING_* variables take precedence).
    #[arg(long, global = true, env = "YUEBING_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: a master, three nodes, 1000 objects put, read back, a node killed.
    Demo(DemoArgs),
    /// The store master: object metadata, leases, eviction (RPC service).
    Master(Box<MasterArgs>),
    /// A store node: contributes store space and serves transfers.
    Node(NodeArgs),
    /// Operator commands against a running master.
    Store {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        cmd: StoreCmd,
    },
    /// Benchmark programs that print a table (and `--json`).
    #[command(subcommand)]
    Bench(Bench),
    /// The target process of `bench transfer` (started by the bench itself).
    #[command(hide = true)]
    BenchTarget {
        /// Control service address.
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: String,
        /// Bytes of pre-faulted buffer to serve.
        #[arg(long)]
        len: usize,
        /// Runtime worker threads (the bench passes its own setting).
        #[arg(long, default_value_t = 1)]
        worker_threads: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A master or node that a demo, bench or test started stops when its parent is gone.
    if matches!(cli.command, Command::Master(_) | Command::Node(_)) {
        yuebing::cli::parent::stop_with_parent();
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // No colour codes in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let file = match ConfigFile::load(cli.config.as_deref()) {
        Ok(f) => f,
        Err(e) => return fail(e.into()),
    };
    let token = match cli.cluster.resolve(&file) {
        Ok(t) => t,
        Err(e) => return fail(e.into()),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // 8 MiB per worker, as the main thread has: a debug build of `demo --ha` nests futures (the
    // story, the store client's put, the rpc pool) deeper than tokio's default 2 MiB holds.
    builder.thread_stack_size(8 << 20);
    let workers = match &cli.command {
        Command::Master(args) => args.worker_threads(&file).map(Some),
        Command::Bench(bench) => bench.worker_threads(&file),
        Command::Node(args) => args.worker_threads(&file),
        Command::BenchTarget { worker_threads, .. } => Ok(Some((*worker_threads).max(1))),
        _ => Ok(None),
    };
    match workers {
        Ok(Some(n)) => {
            builder.worker_threads(n);
        }
        Ok(None) => {}
        Err(e) => return fail(e.into()),
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error[RuntimeError]: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The command runs as a task on the runtime's workers, not on this thread (which only
    // blocks on it): otherwise every hand-over between the command and the tasks it talks to
    // (rpc connections, the engine, an in-process master) would cross threads, and each such
    // wake-up costs tens of microseconds on small machines.
    let command = async move {
        match cli.command {
            Command::Demo(args) => {
                let bar = progress(0);
                let summary = demo::run(args, token, bar).await.map_err(CliError::Demo)?;
                print!("{summary}");
                Ok(())
            }
            Command::Node(args) => {
                let admin = args.admin_bind(&file)?;
                let cfg = args
                    .resolve(&file, token, &tokio::runtime::Handle::current())
                    .await?;
                Ok(node::run(cfg, admin).await?)
            }
            Command::Store { client, cmd } => {
                let cfg = client
                    .resolve(&file, token, &tokio::runtime::Handle::current())
                    .await?;
                Ok(store::run(cfg, cmd).await?)
            }
            Command::Master(mut args) => {
                let ha = std::mem::take(&mut args.ha).resolve(&file)?;
                let admin = args.admin_bind(&file)?;
                let (cfg, endpoint) = args.resolve(&file, token)?;
                match ha {
                    Some(ha) => Ok(yuebing::cli::ha::serve(ha, cfg, endpoint, admin).await?),
                    None => Ok(master::serve(cfg, endpoint, admin).await?),
                }
            }
            Command::Bench(bench) => bench.run(&file, token).await,
            Command::BenchTarget { bind, len, .. } => transfer::target::run(bind, len, token)
                .await
                .map_err(CliError::Bench),
        }
    };
    let result = runtime.block_on(async {
        match tokio::spawn(command).await {
            Ok(r) => r,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => Err(CliError::Internal(format!(
                    "the command was cancelled: {e}"
                ))),
            },
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Prints the error's one line and returns its exit status.
fn fail(e: CliError) -> ExitCode {
    eprintln!("{}", one_line(&e));
    ExitCode::from(e.exit_code())
}

/// The one line a failed command prints: `error[Name code]: message`.
fn one_line(e: &CliError) -> String {
    format!("error[{} {}]: {e}", e.name(), e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_prints_the_name_c_and_python_give_its_code() {
        let timeout = CliError::Store(yuebing::store::Error::Timeout);
        assert_eq!(
            one_line(&timeout),
            "error[StoreTimeout -1501]: the call's deadline passed"
        );
        let rpc = CliError::Store(yuebing::rpc::Error::Unauthenticated.into());
        assert_eq!(rpc.name(), "Unauthenticated");
        let etcd = CliError::Store(yuebing::store::Error::Engine(
            yuebing::engine::Error::Metadata {
                code: -5002,
                reason: "x".into(),
                retryable: true,
            },
        ));
        assert_eq!((etcd.name(), etcd.code()), ("EtcdUnavailable", -5002));
    }
}
