//! `yuebing bench rpc`: the control plane against stock tarpc and a raw TCP echo.
//!
//! Cases (all on 127.0.0.1, servers and clients in this process):
//! - 16 B echo, one call at a time: p50 / p99 latency;
//! - 16 B echo with 64 and 256 calls in flight: calls per second, one connection (a pool of 1
//!   against one stock client) and four (a pool of 4 against four stock clients used
//!   round-robin);
//! - 1 MiB echo, one at a time and 8 in flight, one connection: GB/s of payload (one way) for
//!   stock tarpc, the pool with the payload in serde, the pool with an attachment, and a raw
//!   length-prefixed echo (the ceiling).
//!
//! Each repetition runs every case and variant once, in turn; the table shows medians and
//! spreads, and ratios against stock tarpc (and the raw echo for attachments).

mod raw;
mod service;
mod stock;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use yuebing_rpc::{handler, Attachment, Endpoint, Pool, PoolConfig, Server, ServerConfig};

use self::raw::RawClient;
use self::service::{BenchEcho, BenchEchoClient, BenchEchoRpc, EchoImpl};
use super::args::BenchCommon;
use super::command::{finish, ticker};
use super::harness::{closed_loop, median_spread, Sample};
use super::report::Row;
use crate::cli::{progress, CliError};
use crate::config::ConfigFile;

/// Flags of `yuebing bench rpc`.
#[derive(Args, Debug)]
pub struct BenchRpcArgs {
    /// Run only the measurements whose "case / variant" label contains this text.
    #[arg(long)]
    pub only: Option<String>,
    /// `--repeat`, `--duration-ms`, `--warmup-ms`, `--json`.
    #[command(flatten)]
    pub common: BenchCommon,
}

impl BenchRpcArgs {
    /// `yuebing bench rpc`: the settings from these flags and `file`, the run, its table.
    pub async fn run(self, file: &ConfigFile) -> Result<(), CliError> {
        let (repeat, duration, warmup) = self.common.resolve(file)?;
        let cfg = RpcBenchConfig {
            repeat,
            duration,
            warmup,
            only: self.only,
        };
        let per_repeat = 18;
        let bar = progress(u64::from(cfg.repeat) * per_repeat);
        let rows = run(&cfg, ticker(&bar)).await;
        let header = format!(
            "bench rpc: {} repetitions x {:?} each; medians, spread = max - min; GB/s counts payload one way",
            cfg.repeat, cfg.duration
        );
        finish("rpc", &bar, rows, header, self.common.json)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RpcBenchConfig {
    /// Repetitions of every measurement.
    pub repeat: u32,
    /// Measured time of each measurement.
    pub duration: Duration,
    /// Unmeasured warm-up before each measurement.
    pub warmup: Duration,
    /// Runs only the measurements whose "case / variant" label contains this text.
    pub only: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Variant {
    Stock1,
    Stock4,
    Pool1,
    Pool4,
    Pool1Attach,
    Raw1,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Stock1 => "tarpc-stock x1",
            Variant::Stock4 => "tarpc-stock x4 rr",
            Variant::Pool1 => "yuebing-pool(1)",
            Variant::Pool4 => "yuebing-pool(4)",
            Variant::Pool1Attach => "yuebing-pool(1)+attachment",
            Variant::Raw1 => "raw-tcp-echo",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Latency,
    Rate,
    Bandwidth,
}

struct Case {
    name: String,
    payload: usize,
    inflight: usize,
    metric: Metric,
    /// (variant, baseline it is compared against)
    variants: Vec<(Variant, Option<Variant>)>,
}

fn cases() -> Vec<Case> {
    use Variant::*;
    let mut out = vec![Case {
        name: "echo 16B, 1 in flight".into(),
        payload: 16,
        inflight: 1,
        metric: Metric::Latency,
        variants: vec![(Stock1, None), (Pool1, Some(Stock1))],
    }];
    for inflight in [64, 256] {
        out.push(Case {
            name: format!("echo 16B, {inflight} in flight"),
            payload: 16,
            inflight,
            metric: Metric::Rate,
            variants: vec![
                (Stock1, None),
                (Pool1, Some(Stock1)),
                (Stock4, None),
                (Pool4, Some(Stock4)),
            ],
        });
    }
    for inflight in [1, 8] {
        out.push(Case {
            name: format!("echo 1MiB, {inflight} in flight"),
            payload: 1 << 20,
            inflight,
            metric: Metric::Bandwidth,
            variants: vec![
                (Stock1, None),
                (Raw1, None),
                (Pool1, Some(Stock1)),
                (Pool1Attach, Some(Stock1)),
            ],
        });
    }
    out
}

/// Everything the variants call, connected once.
#[derive(Clone)]
struct Targets {
    stock1: BenchEchoClient,
    stock4: Arc<Vec<BenchEchoClient>>,
    pool1: Pool<BenchEchoRpc>,
    pool4: Pool<BenchEchoRpc>,
    raw: RawClient,
    rr: Arc<AtomicUsize>,
}

type BenchResult<T> = Result<T, String>;

async fn setup() -> BenchResult<(Targets, yuebing_rpc::RunningServer)> {
    let (stock_addr, _) = stock::serve().await.map_err(|e| e.to_string())?;
    let (raw_addr, _) = raw::serve().await.map_err(|e| e.to_string())?;
    let server = Server::new(ServerConfig::default())
        .service("echo", |_| handler!(EchoImpl.serve()))
        .bind(
            &"127.0.0.1:0"
                .parse::<Endpoint>()
                .map_err(|e| e.to_string())?,
        )
        .await
        .map_err(|e| e.to_string())?;
    let pool = |n: usize| {
        let cfg = PoolConfig {
            max_connections: n,
            min_connections: n,
            ..PoolConfig::new("echo")
        };
        Pool::<BenchEchoRpc>::new(server.local_endpoint().clone(), cfg)
    };
    let (pool1, pool4) = (pool(1), pool(4));
    pool1.warm_up().await.map_err(|e| e.to_string())?;
    pool4.warm_up().await.map_err(|e| e.to_string())?;
    let stock = |a: SocketAddr| async move { stock::connect(a).await.map_err(|e| e.to_string()) };
    let mut stock4 = Vec::new();
    for _ in 0..4 {
        stock4.push(stock(stock_addr).await?);
    }
    let targets = Targets {
        stock1: stock(stock_addr).await?,
        stock4: Arc::new(stock4),
        pool1,
        pool4,
        raw: RawClient::connect(raw_addr)
            .await
            .map_err(|e| e.to_string())?,
        rr: Arc::new(AtomicUsize::new(0)),
    };
    Ok((targets, server))
}

fn check(len: usize, want: usize) -> BenchResult<()> {
    if len == want {
        Ok(())
    } else {
        Err(format!("echo returned {len} bytes, sent {want}"))
    }
}

/// One call of `variant` with `payload`.
async fn call(t: &Targets, variant: Variant, payload: Bytes) -> BenchResult<()> {
    let want = payload.len();
    let ctx = tarpc::context::current;
    let len = match variant {
        Variant::Stock1 => t
            .stock1
            .echo(ctx(), payload)
            .await
            .map_err(|e| e.to_string())?
            .len(),
        Variant::Stock4 => {
            let i = t.rr.fetch_add(1, Ordering::Relaxed) % t.stock4.len();
            t.stock4[i]
                .echo(ctx(), payload)
                .await
                .map_err(|e| e.to_string())?
                .len()
        }
        Variant::Pool1 | Variant::Pool4 => {
            let pool = if variant == Variant::Pool1 {
                &t.pool1
            } else {
                &t.pool4
            };
            pool.call(|c, ctx| {
                let p = payload.clone();
                async move { c.echo(ctx, p).await }
            })
            .await
            .map_err(|e| e.to_string())?
            .len()
        }
        Variant::Pool1Attach => t
            .pool1
            .call(|c, ctx| {
                let p = Attachment(payload.clone());
                async move { c.echo_att(ctx, p).await }
            })
            .await
            .map_err(|e| e.to_string())?
            .len(),
        Variant::Raw1 => t.raw.echo(payload).await?.len(),
    };
    check(len, want)
}

/// Runs the benchmark and returns its rows. `tick` is called after each measurement.
pub async fn run(cfg: &RpcBenchConfig, mut tick: impl FnMut(&str)) -> BenchResult<Vec<Row>> {
    let (targets, server) = setup().await?;
    let cases = cases();
    let mut samples: HashMap<(usize, Variant), Vec<Sample>> = HashMap::new();
    for _ in 0..cfg.repeat {
        for (ci, case) in cases.iter().enumerate() {
            let payload = Bytes::from(vec![0xA5u8; case.payload]);
            for &(variant, _) in &case.variants {
                let label = format!("{} / {}", case.name, variant.name());
                if cfg
                    .only
                    .as_ref()
                    .is_some_and(|o| !label.contains(o.as_str()))
                {
                    continue;
                }
                let t = targets.clone();
                let p = payload.clone();
                let sample = closed_loop(case.inflight, cfg.warmup, cfg.duration, move |_| {
                    let t = t.clone();
                    let p = p.clone();
                    async move { call(&t, variant, p).await }
                })
                .await?;
                samples.entry((ci, variant)).or_default().push(sample);
                tick(&label);
            }
        }
    }
    drop(server);
    Ok(rows(&cases, &samples))
}

/// Reads one number off a sample.
type Extract<'a> = dyn Fn(&Sample) -> f64 + 'a;

fn rows(cases: &[Case], samples: &HashMap<(usize, Variant), Vec<Sample>>) -> Vec<Row> {
    let mut out = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        let stat = |v: Variant, f: &Extract<'_>| {
            let vals: Vec<f64> = samples
                .get(&(ci, v))
                .map_or(vec![], |s| s.iter().map(f).collect());
            median_spread(&vals)
        };
        let gbps = |s: &Sample| s.ops_per_sec() * case.payload as f64 / 1e9;
        let metrics: Vec<(&str, &Extract<'_>)> = match case.metric {
            Metric::Latency => vec![("p50_us", &|s| s.p50_us), ("p99_us", &|s| s.p99_us)],
            Metric::Rate => vec![("ops/s", &Sample::ops_per_sec)],
            Metric::Bandwidth => vec![("GB/s", &gbps)],
        };
        for (metric, f) in metrics {
            for &(variant, baseline) in &case.variants {
                if !samples.contains_key(&(ci, variant)) {
                    continue;
                }
                let row = Row::new(&case.name, variant.name(), metric, stat(variant, f));
                match baseline {
                    Some(b) => {
                        out.push(row.clone().against(b.name(), stat(b, f).0));
                        if variant == Variant::Pool1Attach {
                            out.push(row.against(Variant::Raw1.name(), stat(Variant::Raw1, f).0));
                        }
                    }
                    None => out.push(row),
                }
            }
        }
    }
    out
}
