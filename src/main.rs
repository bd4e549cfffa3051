//! The `yuebing` command-line tool.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use yuebing::bench::args::BenchCommon;
use yuebing::bench::{
    bridge as bridge_bench, ha as ha_bench, master as master_bench, report, rpc,
    store as store_bench, transfer,
};
use yuebing::cli::client_args::ClientArgs;
use yuebing::cli::cluster::ClusterArgs;
use yuebing::cli::demo::{self, DemoArgs};
use yuebing::cli::master::{self, MasterArgs};
use yuebing::cli::node::{self, NodeArgs};
use yuebing::cli::store::{self, StoreCmd};
use yuebing::config::{ConfigError, ConfigFile};

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

#[derive(Subcommand, Debug)]
enum Bench {
    /// The control plane: yuebing-rpc against stock tarpc and a raw TCP echo.
    Rpc(BenchRpcArgs),
    /// The Transfer Engine between two processes against memcpy and raw loopback TCP.
    Transfer(BenchTransferArgs),
    /// The store master: core and RPC rates with many objects resident, memory per object.
    Master(BenchMasterArgs),
    /// The store's data path: one node process and a pure client (like Mooncake's store bench).
    Store(BenchStoreArgs),
    /// The bridge: store and master calls awaited, blocking from threads, and with callbacks.
    Bridge(BenchBridgeArgs),
    /// Elected masters on etcd (build with --features etcd; needs apt-get install etcd-server):
    /// put rates with the etcd log vs a local log vs none, standby lag, failover time over
    /// repeated SIGKILLs of the leader.
    Ha(ha_bench::BenchHaArgs),
}

#[derive(Args, Debug)]
struct BenchBridgeArgs {
    /// Calls in flight, comma-separated: as many threads (blocking), tasks (async) or callback
    /// chains (callback) [default: 1,64; config: bench.bridge_inflight].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_INFLIGHT")]
    inflight: Option<String>,
    /// Ways of calling, comma-separated: async, blocking, callback, c-abi, c-abi-callback
    /// [default: all; config: bench.bridge_modes].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_MODES")]
    modes: Option<String>,
    /// At most this many calls recorded per measurement, which ends at --duration-ms or here,
    /// whichever comes first (0: no limit) [default: 0; config: bench.ops].
    #[arg(long, env = "YUEBING_BENCH_OPS")]
    ops: Option<u64>,
    /// Store space of the bench's client [default: 1G; config: bench.store_size].
    #[arg(long, env = "YUEBING_BENCH_STORE_SIZE")]
    store_size: Option<String>,
    /// Worker threads of the bridge's runtime [default: 2; config: bench.worker_threads].
    #[arg(long, env = "YUEBING_BENCH_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Threads of the bridge's callback pool [default: 2; config: bench.callback_threads].
    #[arg(long, env = "YUEBING_BENCH_CALLBACK_THREADS")]
    callback_threads: Option<usize>,
    /// Background load, comma-separated numbers of `nice -n 19` busy loops (e.g. 0,1,2): runs
    /// the waiter study instead of the modes: the blocking 4 KiB get and 1 MiB get_into, one
    /// in flight, with each of --waiters, under each load, which the bench starts and stops
    /// itself [default: none; config: bench.bridge_loops].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_LOOPS")]
    loops: Option<String>,
    /// The waiters the study compares, the first being the baseline: legacy (yields for
    /// 300 µs, the waiter before issue 25), default, spin:MICROS, yield:MICROS
    /// [default: legacy,default; config: bench.bridge_waiters].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_WAITERS")]
    waiters: Option<String>,
    #[command(flatten)]
    common: BenchCommon,
}

#[derive(Args, Debug)]
struct BenchStoreArgs {
    /// Value sizes, comma-separated [default: 4K,64K,1M,16M; config: bench.sizes].
    #[arg(long, env = "YUEBING_BENCH_SIZES")]
    sizes: Option<String>,
    /// Items per batch call [default: 32; config: bench.batch].
    #[arg(long, env = "YUEBING_BENCH_BATCH")]
    batch: Option<usize>,
    /// The node's store space [default: 512M; config: bench.segment].
    #[arg(long, env = "YUEBING_BENCH_SEGMENT")]
    segment: Option<String>,
    /// Calls per measurement, at most [default: 1000; config: bench.max_calls].
    #[arg(long, env = "YUEBING_BENCH_MAX_CALLS")]
    max_calls: Option<usize>,
    /// Transports, comma-separated: shm, tcp [default: shm,tcp; config: bench.transports].
    #[arg(long, env = "YUEBING_BENCH_TRANSPORT")]
    transport: Option<String>,
    /// Repetitions [default: 3; config: bench.repeat].
    #[arg(long, env = "YUEBING_BENCH_REPEAT")]
    repeat: Option<u32>,
    /// Also write the results as JSON to this file.
    #[arg(long, env = "YUEBING_BENCH_JSON")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct BenchMasterArgs {
    /// Objects resident while measuring [default: 1000000; config: bench.objects].
    #[arg(long, env = "YUEBING_BENCH_OBJECTS")]
    objects: Option<usize>,
    /// Concurrent callers over RPC [default: 32; config: bench.inflight].
    #[arg(long, env = "YUEBING_BENCH_INFLIGHT")]
    inflight: Option<usize>,
    #[command(flatten)]
    common: BenchCommon,
}

#[derive(Args, Debug)]
struct BenchTransferArgs {
    /// write or read [default: write; config: bench.op].
    #[arg(long, env = "YUEBING_BENCH_OP")]
    op: Option<String>,
    /// Block sizes, comma-separated [default: 4K,64K,1M,16M; config: bench.blocks].
    #[arg(long, env = "YUEBING_BENCH_BLOCKS")]
    blocks: Option<String>,
    /// Requests per batch, comma-separated [default: 1,32; config: bench.batches].
    #[arg(long, env = "YUEBING_BENCH_BATCHES")]
    batches: Option<String>,
    /// Concurrent initiating tasks [default: 1; config: bench.threads].
    #[arg(long, env = "YUEBING_BENCH_THREADS")]
    threads: Option<usize>,
    /// Transports to measure, comma-separated: tcp, shm [default: tcp,shm; config:
    /// bench.transports].
    #[arg(long, env = "YUEBING_BENCH_TRANSPORT")]
    transport: Option<String>,
    /// Runtime worker threads of the initiator and of the target process, each. One per side
    /// is like for like with the baselines (one thread per side) and keeps the tcp spin for a
    /// lone request on; more oversubscribe a small box [default: 1; config:
    /// bench.worker_threads].
    #[arg(long, env = "YUEBING_BENCH_WORKER_THREADS")]
    worker_threads: Option<usize>,
    #[command(flatten)]
    common: BenchCommon,
}

impl BenchTransferArgs {
    /// Runtime worker threads of each side (at least 1).
    fn worker_threads(&self, file: &ConfigFile) -> Result<usize, ConfigError> {
        yuebing::cli::worker_threads(file, "bench", self.worker_threads, 1)
    }
}

#[derive(Args, Debug)]
struct BenchRpcArgs {
    /// Run only the measurements whose "case / variant" label contains this text.
    #[arg(long)]
    only: Option<String>,
    #[command(flatten)]
    common: BenchCommon,
}

/// Why a command failed: printed as one line with a name and a code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Bench(String),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Demo(String),
    #[error("cannot write {path}: {reason}")]
    Output { path: String, reason: String },
    #[error(transparent)]
    Store(#[from] yuebing::store::Error),
    #[error("{0}")]
    Internal(String),
}

impl CliError {
    /// The name printed with the code: a store error's is its code's, the same name the C ABI
    /// and the Python package give (from the crates' tables, `yuebing::bridge::error`).
    fn name(&self) -> &'static str {
        match self {
            CliError::Config(_) => "ConfigError",
            CliError::Bench(_) => "BenchFailed",
            CliError::Usage(_) => "UsageError",
            CliError::Demo(_) => "DemoFailed",
            CliError::Output { .. } => "OutputError",
            CliError::Store(e) => yuebing::bridge::error::code_name(e.code()),
            CliError::Internal(_) => "InternalError",
        }
    }

    /// The numeric code printed with the name: the error's own code where it has one.
    fn code(&self) -> i32 {
        match self {
            CliError::Store(e) => e.code(),
            e => i32::from(e.exit_code()),
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}

fn progress(total: u64) -> ProgressBar {
    if !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        bar.set_style(style);
    }
    bar
}

async fn bench_rpc(file: &ConfigFile, args: BenchRpcArgs) -> Result<(), CliError> {
    let (repeat, duration, warmup) = args.common.resolve(file)?;
    let cfg = rpc::RpcBenchConfig {
        repeat,
        duration,
        warmup,
        only: args.only,
    };
    let per_repeat = 18;
    let bar = progress(u64::from(cfg.repeat) * per_repeat);
    let rows = rpc::run(&cfg, ticker(&bar)).await;
    let header = format!(
        "bench rpc: {} repetitions x {:?} each; medians, spread = max - min; GB/s counts payload one way",
        cfg.repeat, cfg.duration
    );
    finish("rpc", &bar, rows, header, args.common.json)
}

async fn bench_master(file: &ConfigFile, args: BenchMasterArgs) -> Result<(), CliError> {
    let (repeat, duration, warmup) = args.common.resolve(file)?;
    let cfg = master_bench::MasterBenchConfig {
        objects: file.resolve("bench", "objects", args.objects, 1_000_000)?,
        inflight: file.resolve("bench", "inflight", args.inflight, 32)?.max(1),
        duration,
        warmup,
        repeat,
    };
    let bar = progress(2 + 3 * u64::from(cfg.repeat));
    let rows = master_bench::run(&cfg, ticker(&bar)).await;
    let header = format!(
        "bench master: {} objects resident, 64-byte keys, {} repetitions; core: objects/2 puts and gets each, rpc: {:?} with {} callers; medians, spread = max - min",
        cfg.objects, cfg.repeat, cfg.duration, cfg.inflight
    );
    finish("master", &bar, rows, header, args.common.json)
}

async fn bench_store(
    file: &ConfigFile,
    args: BenchStoreArgs,
    token: Option<yuebing::rpc::Token>,
) -> Result<(), CliError> {
    let list = |s: String| -> Result<Vec<usize>, CliError> {
        s.split(',')
            .map(|x| transfer::parse_size(x).map_err(CliError::Usage))
            .collect()
    };
    let transports = file
        .resolve("bench", "transports", args.transport, "shm,tcp".to_string())?
        .split(',')
        .map(|t| match t.trim() {
            "shm" => Ok(yuebing::engine::TransportKind::Shm),
            "tcp" => Ok(yuebing::engine::TransportKind::Tcp),
            other => Err(CliError::Usage(format!(
                "unknown transport {other:?} (shm, tcp)"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = store_bench::StoreBenchConfig {
        sizes: list(file.resolve("bench", "sizes", args.sizes, "4K,64K,1M,16M".to_string())?)?,
        batch: file.resolve("bench", "batch", args.batch, 32)?.max(1),
        segment: list(file.resolve("bench", "segment", args.segment, "512M".to_string())?)?
            .first()
            .copied()
            .unwrap_or(512 << 20),
        max_calls: file
            .resolve("bench", "max_calls", args.max_calls, 1000)?
            .max(1),
        repeat: file.resolve("bench", "repeat", args.repeat, 3)?.max(1),
        transports,
        token,
    };
    let total = u64::from(cfg.repeat) * cfg.transports.len() as u64 * (cfg.sizes.len() as u64 + 1);
    let bar = progress(total);
    let rows = store_bench::run(&cfg, ticker(&bar)).await;
    let header = format!(
        "bench store: one node ({} store space) + a pure client, 1 replica, one call at a time; {} repetitions, medians, spread = max - min",
        cfg.segment, cfg.repeat
    );
    finish("store", &bar, rows, header, args.json)
}

async fn bench_bridge(
    file: &ConfigFile,
    args: BenchBridgeArgs,
    token: Option<yuebing::rpc::Token>,
) -> Result<(), CliError> {
    let (repeat, duration, warmup) = args.common.resolve(file)?;
    let inflight = file.resolve(
        "bench",
        "bridge_inflight",
        args.inflight,
        "1,64".to_string(),
    )?;
    let every_mode = bridge_bench::Mode::ALL.map(|m| m.name()).join(",");
    let modes = file.resolve("bench", "bridge_modes", args.modes, every_mode)?;
    let store_size = file.resolve("bench", "store_size", args.store_size, "1G".to_string())?;
    let max_ops = file.resolve("bench", "ops", args.ops, 0)?;
    let loops: Option<String> =
        file.resolve("bench", "bridge_loops", args.loops.map(Some), None)?;
    let waiters = file.resolve(
        "bench",
        "bridge_waiters",
        args.waiters,
        "legacy,default".to_string(),
    )?;
    let study = match loops {
        None => None,
        Some(loops) => Some(bridge_bench::WaiterStudy {
            loops: list(&loops, |n| {
                n.parse::<usize>()
                    .map_err(|_| format!("--loops {n:?}: expected a number of busy loops"))
            })?,
            waiters: bridge_bench::parse_waiters(&waiters).map_err(CliError::Usage)?,
        }),
    };
    let cfg = bridge_bench::BridgeBenchConfig {
        ops: bridge_bench::Op::ALL.to_vec(),
        modes: bridge_bench::parse_modes(&modes).map_err(CliError::Usage)?,
        inflight: list(&inflight, |n| {
            n.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--inflight {n:?}: expected a number >= 1"))
        })?,
        duration,
        warmup,
        max_ops: (max_ops > 0).then_some(max_ops),
        repeat,
        worker_threads: yuebing::cli::worker_threads(file, "bench", args.worker_threads, 2)?,
        callback_threads: file
            .resolve("bench", "callback_threads", args.callback_threads, 2)?
            .max(1),
        store_size: transfer::parse_size(&store_size).map_err(CliError::Usage)? as u64,
        token,
        waiters: study,
    };
    let host = bridge_bench::host();
    let bar = progress(cfg.measurements());
    // The calls are made from plain threads, never from this runtime's workers.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (run_cfg, run_bar) = (cfg.clone(), bar.clone());
    std::thread::Builder::new()
        .name("bench-bridge".into())
        .spawn(move || {
            let _ = tx.send(bridge_bench::run(&run_cfg, ticker(&run_bar)));
        })
        .map_err(|e| CliError::Internal(format!("cannot start the bench thread: {e}")))?;
    let report = rx
        .await
        .map_err(|_| CliError::Internal("the bench thread panicked".into()))?;
    bar.finish_and_clear();
    let report = report.map_err(CliError::Bench)?;
    let levels: Vec<String> = cfg.inflight.iter().map(|n| n.to_string()).collect();
    if let Some(study) = &cfg.waiters {
        let names: Vec<String> = study
            .waiters
            .iter()
            .map(|&w| bridge_bench::waiter_name(w))
            .collect();
        println!(
            "bench bridge --loops: {host} before the run; one plain thread calling the blocking \
             client, one call at a time; waiters {} interleaved (ratios against the first); \
             each load is that many `nice -n 19` busy loops the bench starts and stops; {} \
             repetitions x {:?} (+{:?} warm-up); medians, ± = max - min",
            names.join(", "),
            cfg.repeat,
            cfg.duration,
            cfg.warmup,
        );
        print!("{}", report.table);
        return write_json(args.common.json, "bridge", &report.rows);
    }
    println!(
        "bench bridge: {host} before the run; bridge runtime {} worker(s) + {} callback thread(s); \
         {} in flight = that many plain threads (blocking), tasks (async), callback chains \
         (callback); {} repetitions x {:?} (+{:?} warm-up), variants interleaved; put: fresh \
         keys, removed untimed after each measurement; medians, ± = max - min",
        cfg.worker_threads,
        cfg.callback_threads,
        levels.join(" and "),
        cfg.repeat,
        cfg.duration,
        cfg.warmup,
    );
    print!("{}", report.table);
    write_json(args.common.json, "bridge", &report.rows)
}

async fn bench_ha(
    file: &ConfigFile,
    args: ha_bench::BenchHaArgs,
    token: Option<yuebing::rpc::Token>,
) -> Result<(), CliError> {
    let cfg = args.resolve(file, token)?;
    let bar = progress(cfg.measurements());
    let rows = ha_bench::run(&cfg, ticker(&bar)).await;
    finish("ha", &bar, rows, cfg.header(), args.common.json)
}

/// Advances `bar` by one measurement, named `what`.
fn ticker(bar: &ProgressBar) -> impl FnMut(&str) + '_ {
    |what| {
        bar.set_message(what.to_string());
        bar.inc(1);
    }
}

/// Clears the progress bar, prints the table and writes `--json`.
fn finish(
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

fn list<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, CliError> {
    text.split(',')
        .map(|p| parse(p.trim()))
        .collect::<Result<Vec<T>, String>>()
        .map_err(CliError::Usage)
}

async fn bench_transfer(
    file: &ConfigFile,
    args: BenchTransferArgs,
    token: Option<yuebing::rpc::Token>,
) -> Result<(), CliError> {
    let (repeat, duration, warmup) = args.common.resolve(file)?;
    use yuebing::engine::{Opcode, TransportKind};
    let op = match file
        .resolve("bench", "op", args.op, "write".to_string())?
        .as_str()
    {
        "write" => Opcode::Write,
        "read" => Opcode::Read,
        other => {
            return Err(CliError::Usage(format!(
                "--op {other:?}: expected write or read"
            )))
        }
    };
    let transports = file.resolve("bench", "transports", args.transport, "tcp,shm".to_string())?;
    let transports = list(&transports, |t| match t {
        "tcp" => Ok(TransportKind::Tcp),
        "shm" => Ok(TransportKind::Shm),
        other => Err(format!("--transport {other:?}: expected tcp or shm")),
    })?;
    let blocks = file.resolve("bench", "blocks", args.blocks, "4K,64K,1M,16M".to_string())?;
    let batches = file.resolve("bench", "batches", args.batches, "1,32".to_string())?;
    let cfg = transfer::TransferBenchConfig {
        op,
        blocks: list(&blocks, transfer::parse_size)?,
        batches: list(&batches, |b| {
            b.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("bad batch {b:?}"))
        })?,
        threads: file.resolve("bench", "threads", args.threads, 1)?.max(1),
        // The target runs as many workers as this runtime (sized from the same setting).
        worker_threads: tokio::runtime::Handle::current().metrics().num_workers(),
        duration,
        warmup,
        repeat,
        transports,
        token,
    };
    let total = u64::from(cfg.repeat)
        * (cfg.blocks.len() * cfg.batches.len() * (cfg.transports.len() + 1)) as u64;
    let bar = progress(total);
    let rows = transfer::run(&cfg, ticker(&bar)).await;
    let header = format!(
        "bench transfer: {} repetitions x {:?}; {} thread(s); {} runtime worker(s) per process; medians, spread = max - min; CPU = initiator + target",
        cfg.repeat, cfg.duration, cfg.threads, cfg.worker_threads
    );
    finish("transfer", &bar, rows, header, args.common.json)
}

fn write_json(path: Option<PathBuf>, bench: &str, rows: &[report::Row]) -> Result<(), CliError> {
    if let Some(path) = path {
        report::write_json(&path, bench, rows).map_err(|e| CliError::Output {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        println!("wrote {}", path.display());
    }
    Ok(())
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
        Command::Bench(Bench::Transfer(args)) => args.worker_threads(&file).map(Some),
        Command::Node(args) => args.worker_threads(&file),
        Command::BenchTarget { worker_threads, .. } => Ok(Some((*worker_threads).max(1))),
        // The bridge bench runs on a bridge's runtime of its own; this one only waits for it.
        Command::Bench(Bench::Bridge(_)) => Ok(Some(1)),
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
                let cfg = args
                    .resolve(&file, token, &tokio::runtime::Handle::current())
                    .await?;
                Ok(node::run(cfg).await?)
            }
            Command::Store { client, cmd } => {
                let cfg = client
                    .resolve(&file, token, &tokio::runtime::Handle::current())
                    .await?;
                Ok(store::run(cfg, cmd).await?)
            }
            Command::Master(mut args) => {
                let ha = std::mem::take(&mut args.ha).resolve(&file)?;
                let (cfg, endpoint) = args.resolve(&file, token)?;
                match ha {
                    Some(ha) => Ok(yuebing::cli::ha::serve(ha, cfg, endpoint).await?),
                    None => Ok(master::serve(cfg, endpoint).await?),
                }
            }
            Command::Bench(Bench::Rpc(args)) => bench_rpc(&file, args).await,
            Command::Bench(Bench::Transfer(args)) => bench_transfer(&file, args, token).await,
            Command::Bench(Bench::Master(args)) => bench_master(&file, args).await,
            Command::Bench(Bench::Store(args)) => bench_store(&file, args, token).await,
            Command::Bench(Bench::Bridge(args)) => bench_bridge(&file, args, token).await,
            Command::Bench(Bench::Ha(args)) => bench_ha(&file, args, token).await,
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
