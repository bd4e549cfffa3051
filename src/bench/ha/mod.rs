//! `yuebing bench ha`: what elected masters on etcd cost and how fast they fail over (issue 16).
//!
//! On this machine: one etcd member and three elected `yuebing master --etcd` processes, a
//! single master with a data directory (its own group-committed log), and a single in-memory
//! master, each with one `yuebing node` process and a pure client.
//! - put throughput of the store client at `--inflight` (default 32) in flight, per size: the
//!   etcd log and the local log against no log, interleaved (each repetition measures every
//!   variant once), as ratios; the objects are removed, untimed, after each measurement;
//! - standby lag: under the same put load (the first size), each standby's distance behind the
//!   leader (the leader's durable sequence minus the standby's applied one, sampled every
//!   50 ms), median and max;
//! - failover: `--kills` (default 5) times the leader is SIGKILLed, timed from the kill to the
//!   first call a new leader answers and to the first put it takes (which also waits for the
//!   node to mount its space at the new leader, at its next heartbeat, every second); the
//!   killed master is restarted as a standby and the next kill waits until every standby has
//!   caught up.
//!
//! # Layout
//! - this file: the settings and the rows;
//! - `setups`: the three clusters and the timed put load;
//! - `failover`: the kills and the lag samples.

use std::time::Duration;

use clap::Args;
use yuebing_rpc::Token;

use super::args::BenchCommon;
use super::command::{finish, ticker};
use super::report::Row;
use crate::cli::{progress, CliError};
use crate::config::{ConfigError, ConfigFile};

#[cfg(feature = "etcd")]
mod failover;
#[cfg(feature = "etcd")]
mod setups;

/// Flags of `yuebing bench ha`.
#[derive(Args, Debug)]
pub struct BenchHaArgs {
    /// Object sizes, comma-separated [default: 4K,1M; config: bench.sizes].
    #[arg(long, env = "YUEBING_BENCH_SIZES")]
    pub sizes: Option<String>,
    /// Puts in flight [default: 32; config: bench.inflight].
    #[arg(long, env = "YUEBING_BENCH_INFLIGHT")]
    pub inflight: Option<usize>,
    /// Leaders killed, one after another, for the failover time [default: 5; config:
    /// bench.kills].
    #[arg(long, env = "YUEBING_BENCH_KILLS")]
    pub kills: Option<usize>,
    /// The masters' election TTL, ms [default: 2000; config: bench.election_ttl_ms].
    #[arg(long, env = "YUEBING_BENCH_ELECTION_TTL_MS")]
    pub election_ttl_ms: Option<u64>,
    /// How long the standby lag is sampled under load, ms (0: not measured) [default: 5000;
    /// config: bench.lag_ms].
    #[arg(long, env = "YUEBING_BENCH_LAG_MS")]
    pub lag_ms: Option<u64>,
    /// Store space of each setup's node: a measurement's puts must fit in it [default: 2G;
    /// config: bench.store_size].
    #[arg(long, env = "YUEBING_BENCH_STORE_SIZE")]
    pub store_size: Option<String>,
    /// `--repeat`, `--duration-ms`, `--warmup-ms`, `--json`.
    #[command(flatten)]
    pub common: BenchCommon,
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct HaBenchConfig {
    /// Object sizes of the put measurements.
    pub sizes: Vec<usize>,
    /// Puts in flight.
    pub inflight: usize,
    /// Repetitions of each put measurement.
    pub repeat: u32,
    /// Measured time per put measurement.
    pub duration: Duration,
    /// Unmeasured warm-up before each put measurement.
    pub warmup: Duration,
    /// Leaders killed for the failover time.
    pub kills: usize,
    /// The masters' election TTL.
    pub ttl: Duration,
    /// How long the standby lag is sampled (zero: not at all).
    pub lag: Duration,
    /// Store space of each setup's node, as `yuebing node --store-size` takes it.
    pub store_size: String,
    /// The cluster token every process and connection uses.
    pub token: Option<Token>,
}

impl BenchHaArgs {
    /// `yuebing bench ha` with the cluster `token`: the settings ([`BenchHaArgs::resolve`]),
    /// the run, its table.
    pub async fn run(self, file: &ConfigFile, token: Option<Token>) -> Result<(), CliError> {
        let cfg = self.resolve(file, token)?;
        let bar = progress(cfg.measurements());
        let rows = run(&cfg, ticker(&bar)).await;
        finish("ha", &bar, rows, cfg.header(), self.common.json)
    }

    /// The settings: flags, then `YUEBING_BENCH_*`, then the `[bench]` section, then the
    /// defaults.
    pub fn resolve(
        &self,
        file: &ConfigFile,
        token: Option<Token>,
    ) -> Result<HaBenchConfig, ConfigError> {
        let (repeat, duration, warmup) = self.common.resolve(file)?;
        let bad = |key: &str, reason: String| ConfigError {
            path: format!("bench.{key}"),
            reason,
        };
        let sizes: String = file.resolve("bench", "sizes", self.sizes.clone(), "4K,1M".into())?;
        let sizes = sizes
            .split(',')
            .map(super::args::positive_size)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("sizes", e))?;
        let store_size: String =
            file.resolve("bench", "store_size", self.store_size.clone(), "2G".into())?;
        // Checked here, before any process starts, by the rule `yuebing node` applies to it.
        super::args::positive_size(&store_size).map_err(|e| bad("store_size", e))?;
        let ttl_ms = file.resolve("bench", "election_ttl_ms", self.election_ttl_ms, 2000)?;
        if ttl_ms < 1000 {
            return Err(bad(
                "election_ttl_ms",
                format!("{ttl_ms} ms: at least 1000"),
            ));
        }
        Ok(HaBenchConfig {
            sizes,
            inflight: file.resolve("bench", "inflight", self.inflight, 32)?.max(1),
            repeat,
            duration,
            warmup,
            kills: file.resolve("bench", "kills", self.kills, 5)?,
            ttl: Duration::from_millis(ttl_ms),
            lag: Duration::from_millis(file.resolve("bench", "lag_ms", self.lag_ms, 5000)?),
            store_size,
            token,
        })
    }
}

impl HaBenchConfig {
    /// How many times the run calls its `tick` (for a progress bar).
    pub fn measurements(&self) -> u64 {
        let puts = u64::from(self.repeat) * self.sizes.len() as u64 * VARIANTS.len() as u64;
        1 + puts + u64::from(!self.lag.is_zero()) + self.kills as u64
    }

    /// The line printed above the table.
    pub fn header(&self) -> String {
        format!(
            "bench ha: etcd (1 member) + {HA_MASTERS} elected masters (TTL {} ms) vs one master \
             with --data-dir vs one in-memory master (all with --lease-ttl-ms 1000), each with \
             1 node ({}) and a pure client, 1 replica; puts: {} in flight, {} repetitions x {:?} (+{:?} warm-up), interleaved, \
             medians, spread = max - min; all processes on this machine ({} CPUs)",
            self.ttl.as_millis(),
            self.store_size,
            self.inflight,
            self.repeat,
            self.duration,
            self.warmup,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )
    }
}

/// Elected masters in the etcd setup.
const HA_MASTERS: usize = 3;

/// The setups, baseline last: (variant, what it is).
const VARIANTS: [&str; 3] = ["etcd-log", "local-log", "none"];

/// Runs the benchmark; `tick` is called after each measurement.
#[cfg(feature = "etcd")]
pub async fn run(cfg: &HaBenchConfig, mut tick: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    let clusters = setups::Setups::start(cfg).await?;
    tick("setup");
    let mut rows = Vec::new();
    let mut samples = vec![Vec::new(); cfg.sizes.len() * VARIANTS.len()];
    for rep in 0..cfg.repeat {
        for (s, &size) in cfg.sizes.iter().enumerate() {
            for v in 0..VARIANTS.len() {
                let sample = clusters.measure_puts(v, size, cfg, rep).await?;
                samples[s * VARIANTS.len() + v].push(sample);
                tick(VARIANTS[v]);
            }
        }
    }
    for (s, &size) in cfg.sizes.iter().enumerate() {
        let per_variant = &samples[s * VARIANTS.len()..(s + 1) * VARIANTS.len()];
        rows.extend(setups::put_rows(cfg, size, per_variant));
    }
    if !cfg.lag.is_zero() {
        let size = cfg.sizes.first().copied().unwrap_or(4096);
        rows.extend(failover::standby_lag(&clusters, cfg, size).await?);
        tick("standby lag");
    }
    rows.extend(failover::kills(clusters, cfg, &mut tick).await?);
    Ok(rows)
}

/// A build without the `etcd` feature cannot run the benchmark, and says how to build one.
#[cfg(not(feature = "etcd"))]
pub async fn run(_: &HaBenchConfig, _: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    Err(crate::cli::demo_ha::needs_etcd_build("yuebing bench ha"))
}
