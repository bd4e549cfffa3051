//! The flags of `yuebing bench bridge`, resolved into a [`BridgeBenchConfig`], and what it
//! prints.

use clap::Args;

use super::{host, parse_modes, parse_waiters, run, waiter_name, BridgeBenchConfig};
use super::{Mode, Op, WaiterStudy};
use crate::bench::args::{list, positive_size, BenchCommon};
use crate::bench::command::{ticker, write_json};
use crate::cli::{progress, CliError};
use crate::config::ConfigFile;

/// Flags of `yuebing bench bridge`.
#[derive(Args, Debug)]
pub struct BenchBridgeArgs {
    /// Calls in flight, comma-separated: as many threads (blocking), tasks (async) or callback
    /// chains (callback) [default: 1,64; config: bench.bridge_inflight].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_INFLIGHT")]
    pub inflight: Option<String>,
    /// Ways of calling, comma-separated: async, blocking, callback, c-abi, c-abi-callback
    /// [default: all; config: bench.bridge_modes].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_MODES")]
    pub modes: Option<String>,
    /// At most this many calls recorded per measurement, which ends at --duration-ms or here,
    /// whichever comes first (0: no limit) [default: 0; config: bench.ops].
    #[arg(long, env = "YUEBING_BENCH_OPS")]
    pub ops: Option<u64>,
    /// Store space of the bench's client [default: 1G; config: bench.store_size].
    #[arg(long, env = "YUEBING_BENCH_STORE_SIZE")]
    pub store_size: Option<String>,
    /// Worker threads of the bridge's runtime [default: 2; config: bench.worker_threads].
    #[arg(long, env = "YUEBING_BENCH_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Threads of the bridge's callback pool [default: 2; config: bench.callback_threads].
    #[arg(long, env = "YUEBING_BENCH_CALLBACK_THREADS")]
    pub callback_threads: Option<usize>,
    /// Background load, comma-separated numbers of `nice -n 19` busy loops (e.g. 0,1,2): runs
    /// the waiter study instead of the modes: the blocking 4 KiB get and 1 MiB get_into, one
    /// in flight, with each of --waiters, under each load, which the bench starts and stops
    /// itself [default: none; config: bench.bridge_loops].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_LOOPS")]
    pub loops: Option<String>,
    /// The waiters the study compares, the first being the baseline: legacy (yields for
    /// 300 µs, the waiter before issue 25), default, spin:MICROS, yield:MICROS
    /// [default: legacy,default; config: bench.bridge_waiters].
    #[arg(long, env = "YUEBING_BENCH_BRIDGE_WAITERS")]
    pub waiters: Option<String>,
    /// `--repeat`, `--duration-ms`, `--warmup-ms`, `--json`.
    #[command(flatten)]
    pub common: BenchCommon,
}

impl BenchBridgeArgs {
    /// The settings: flags, then `YUEBING_BENCH_*`, then the `[bench]` section, then the
    /// defaults; the cluster `token` for the bench's master and client.
    pub fn resolve(
        &self,
        file: &ConfigFile,
        token: Option<yuebing_rpc::Token>,
    ) -> Result<BridgeBenchConfig, CliError> {
        let (repeat, duration, warmup) = self.common.resolve(file)?;
        let inflight = file.resolve(
            "bench",
            "bridge_inflight",
            self.inflight.clone(),
            "1,64".to_string(),
        )?;
        let every_mode = Mode::ALL.map(|m| m.name()).join(",");
        let modes = file.resolve("bench", "bridge_modes", self.modes.clone(), every_mode)?;
        let store_size = file.resolve(
            "bench",
            "store_size",
            self.store_size.clone(),
            "1G".to_string(),
        )?;
        let max_ops = file.resolve("bench", "ops", self.ops, 0)?;
        let loops: Option<String> =
            file.resolve("bench", "bridge_loops", self.loops.clone().map(Some), None)?;
        let waiters = file.resolve(
            "bench",
            "bridge_waiters",
            self.waiters.clone(),
            "legacy,default".to_string(),
        )?;
        let study = match loops {
            None => None,
            Some(loops) => Some(WaiterStudy {
                loops: list(&loops, |n| {
                    n.parse::<usize>()
                        .map_err(|_| format!("--loops {n:?}: expected a number of busy loops"))
                })?,
                waiters: parse_waiters(&waiters).map_err(CliError::Usage)?,
            }),
        };
        Ok(BridgeBenchConfig {
            ops: Op::ALL.to_vec(),
            modes: parse_modes(&modes).map_err(CliError::Usage)?,
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
            worker_threads: crate::cli::worker_threads(file, "bench", self.worker_threads, 2)?,
            callback_threads: file
                .resolve("bench", "callback_threads", self.callback_threads, 2)?
                .max(1),
            store_size: positive_size(&store_size).map_err(CliError::Usage)? as u64,
            token,
            waiters: study,
        })
    }

    /// `yuebing bench bridge` with the cluster `token`: the settings, the run on a plain
    /// thread (never on this runtime's workers), its table.
    pub async fn run(
        self,
        file: &ConfigFile,
        token: Option<yuebing_rpc::Token>,
    ) -> Result<(), CliError> {
        let cfg = self.resolve(file, token)?;
        let host = host();
        let bar = progress(cfg.measurements());
        // The calls are made from plain threads, never from this runtime's workers.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (run_cfg, run_bar) = (cfg.clone(), bar.clone());
        std::thread::Builder::new()
            .name("bench-bridge".into())
            .spawn(move || {
                let _ = tx.send(run(&run_cfg, ticker(&run_bar)));
            })
            .map_err(|e| CliError::Internal(format!("cannot start the bench thread: {e}")))?;
        let report = rx
            .await
            .map_err(|_| CliError::Internal("the bench thread panicked".into()))?;
        bar.finish_and_clear();
        let report = report.map_err(CliError::Bench)?;
        let levels: Vec<String> = cfg.inflight.iter().map(|n| n.to_string()).collect();
        if let Some(study) = &cfg.waiters {
            let names: Vec<String> = study.waiters.iter().map(|&w| waiter_name(w)).collect();
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
            return write_json(self.common.json, "bridge", &report.rows);
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
        write_json(self.common.json, "bridge", &report.rows)
    }
}
