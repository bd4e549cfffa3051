//! `yuebing bench bridge`: what the bridge costs callers that are not async Rust.
//!
//! One master on 127.0.0.1 (requiring the cluster token when one is set) and one store client (which holds the store space itself)
//! run in this process on a [`yuebing_bridge::Bridge`]'s runtime. Each [`Op`] — the master's
//! no-op `health`, a 4 KiB `put` (fresh keys, removed untimed after each measurement), a 4 KiB
//! `get`, a 1 MiB `get_into` registered memory — is called through each [`Mode`] — `async`
//! (tasks on the bridge runtime awaiting the async API), `blocking` (the blocking facade from
//! plain OS threads), `callback` (`*_call(..).then(cb)` in closed-loop chains), `c-abi` and
//! `c-abi-callback` (the same through the exported C functions, blocking and `_async`) — with each
//! number of calls in flight (threads, tasks or chains). Each repetition runs every variant
//! once, the modes in a rotated order, after condvar ping-pongs between plain threads: one
//! pair measures the cost of one thread wake-up, the baseline of the blocking mode's extra
//! latency; as many pairs as calls in flight measure how many wake-ups per second the machine
//! makes, a ceiling for any blocking caller that sleeps until its call ends.
//! Reported: medians over the repetitions of calls/s, p50 and p99, the ratio to `async`, and
//! the targets (see `targets`) as pass or fail. With `--loops` it runs the waiter study
//! instead (see `waiters`): the blocking waiters compared under background load.
//!
//! # Layout
//! - `args`: [`BenchBridgeArgs`], the flags, resolved into a [`BridgeBenchConfig`]; what the
//!   command prints.
//! - `mode`: [`Mode`], the ways of calling, and which loop drives each.
//! - `ops`: [`Op`], and one call of each in each mode.
//! - `load`: the closed loops (tasks, threads, callback chains) and their measurement window.
//! - `rig`: the master, the client, the registered memory and the preloaded objects.
//! - `c_abi`: the calls through the C ABI, on C handles of the rig's client and master.
//! - `pingpong`: the condvar ping-pong baseline.
//! - `targets`: the targets, checked.
//! - `results`: medians, the JSON rows and the human table.
//! - `waiters`: the waiter study: blocking calls under `nice -n 19` busy loops, per waiter.

mod args;
mod c_abi;
mod load;
mod mode;
mod ops;
mod pingpong;
mod results;
mod rig;
mod targets;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

pub use self::args::BenchBridgeArgs;
use self::load::Window;
pub use self::mode::Mode;
pub use self::ops::Op;
use self::results::Results;
use self::rig::{Rig, RigConfig};
pub use self::waiters::{parse_waiters, waiter_name, WaiterStudy};
use crate::bench::report::{self, Row};

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct BridgeBenchConfig {
    /// Operations measured.
    pub ops: Vec<Op>,
    /// Ways of calling measured ([`Mode::BASELINE`] among them for the ratios).
    pub modes: Vec<Mode>,
    /// Numbers of calls in flight.
    pub inflight: Vec<usize>,
    /// Measured time per measurement.
    pub duration: Duration,
    /// Unmeasured warm-up before each.
    pub warmup: Duration,
    /// At most this many calls recorded per measurement (`None`: as many as `duration` allows).
    pub max_ops: Option<u64>,
    /// Repetitions.
    pub repeat: u32,
    /// Worker threads of the bridge's runtime.
    pub worker_threads: usize,
    /// Threads of the bridge's callback pool.
    pub callback_threads: usize,
    /// Store space of the client (the preloaded objects and one measurement's puts live there).
    pub store_size: u64,
    /// The cluster token: the bench's master requires it, its client presents it.
    pub token: Option<yuebing_rpc::Token>,
    /// The waiter study, run instead of the modes when given.
    pub waiters: Option<WaiterStudy>,
}

/// A run's results: the JSON rows and the human table.
#[derive(Debug, Clone)]
pub struct BridgeReport {
    /// The rows of the conventions' JSON.
    pub rows: Vec<Row>,
    /// The table to print.
    pub table: String,
}

impl BridgeBenchConfig {
    /// Measurements per run (the progress bar's length).
    pub fn measurements(&self) -> u64 {
        if let Some(study) = &self.waiters {
            return u64::from(self.repeat) * study.measurements() as u64;
        }
        let per_repeat =
            pingpong_pairs(self).len() + self.ops.len() * self.inflight.len() * self.modes.len();
        u64::from(self.repeat) * per_repeat as u64
    }
}

/// Runs the benchmark on this (plain) thread; `tick` is called after each measurement.
pub fn run(cfg: &BridgeBenchConfig, mut tick: impl FnMut(&str)) -> Result<BridgeReport, String> {
    if cfg.modes.is_empty() || cfg.ops.is_empty() || cfg.inflight.contains(&0) {
        return Err("nothing to measure: give modes, operations and calls in flight >= 1".into());
    }
    let rig = Arc::new(Rig::start(&RigConfig {
        worker_threads: cfg.worker_threads,
        callback_threads: cfg.callback_threads,
        store_size: cfg.store_size,
        slots: cfg.inflight.iter().copied().max().unwrap_or(1),
        token: cfg.token.clone(),
    })?);
    let measured = match &cfg.waiters {
        None => measure_all(cfg, &rig, &mut tick).map(|r| (r.rows(), r.table())),
        Some(study) => {
            let window = || Arc::new(Window::new(cfg.warmup, cfg.duration, cfg.max_ops));
            waiters::Study::run(study, &rig, cfg.repeat, window, &mut tick).map(|s| s.report())
        }
    };
    let stopped = rig.stop();
    let (rows, table) = measured?;
    stopped?;
    Ok(BridgeReport { rows, table })
}

/// The ping-pongs run: one pair (a wake-up, for the latency target) and one per call in flight.
fn pingpong_pairs(cfg: &BridgeBenchConfig) -> Vec<usize> {
    let mut pairs = cfg.inflight.clone();
    pairs.push(1);
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

fn measure_all(
    cfg: &BridgeBenchConfig,
    rig: &Arc<Rig>,
    tick: &mut impl FnMut(&str),
) -> Result<Results, String> {
    let mut results = Results::new(&cfg.ops, &cfg.inflight, &cfg.modes);
    let window = |max_ops| Arc::new(Window::new(cfg.warmup, cfg.duration, max_ops));
    for rep in 0..cfg.repeat as usize {
        for &pairs in &pingpong_pairs(cfg) {
            results.add_pingpong(pairs, pingpong::condvar(&window(cfg.max_ops), pairs)?);
            tick(&format!("condvar ping-pong x{pairs}"));
        }
        for &op in &cfg.ops {
            let max_ops = match op {
                Op::Put => Some(rig.put_limit(cfg.max_ops)),
                _ => cfg.max_ops,
            };
            for &inflight in &cfg.inflight {
                // Rotated, so that no mode always runs right after the same one.
                for k in 0..cfg.modes.len() {
                    let mode = cfg.modes[(k + rep) % cfg.modes.len()];
                    let sample = mode
                        .measure(rig, op, inflight, window(max_ops))
                        .map_err(|e| format!("{} x{inflight} {mode}: {e}", op.name()))?;
                    if op == Op::Put {
                        rig.remove_puts()?;
                    }
                    results.add(op, inflight, mode, sample);
                    tick(&format!("{} x{inflight} {mode}", op.name()));
                }
            }
        }
    }
    Ok(results)
}

/// The machine and its load, for the table's header: cores and the 1-minute load average.
pub fn host() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpus} cores, load average {:.2}", report::loadavg_1m())
}

/// Parses a mode list such as `async,blocking`.
pub fn parse_modes(list: &str) -> Result<Vec<Mode>, String> {
    list.split(',').map(str::parse).collect()
}
