//! `yuebing bench store`: the store's data path, shaped like the Mooncake peer's
//! `mooncake_store_bench.py` so the numbers compare: a `yuebing master` process, one `yuebing
//! node` process holding the store space, and a pure client (store size 0) in this process
//! issuing the calls, one replica, one call at a time. Per value size: put_from / get_into
//! (registered memory, zero copy), put / get (bytes), batch_put_from / batch_get_into; on 1 KiB
//! values the small operations (put_from, get_into, exist hit and miss, batch exist). With
//! `--multi LAYERSxBLOCK` (default 32x64K, the peer bench's `--multi`; `none` to skip) the
//! multi-buffer batches too: each key one block in each of LAYERS per-layer buffers (vLLM's
//! paged KV layout), `batch_put_from_buffers` / `batch_get_into_buffers` of `--batch` keys,
//! the bytes read back checked. `--transport shm|tcp` forces how client and node talk.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use yuebing_engine::{EngineBuffer, EngineConfig, TransportKind};
use yuebing_store::{Client, ClientConfig, MetricsRegistry, Options};

use super::args::positive_size;
use super::command::{finish, ticker};
use super::harness::median_spread;
use super::report::{
    metrics_modes, metrics_overhead, on_off_modes, same_cell, with_metrics, Metering, Row,
};
use super::transfer::size_label as label;
use crate::cli::child::ChildProcess;
use crate::cli::{progress, CliError};
use crate::config::ConfigFile;

/// Flags of `yuebing bench store`.
#[derive(Args, Debug)]
pub struct BenchStoreArgs {
    /// Value sizes, comma-separated [default: 4K,64K,1M,16M; config: bench.sizes].
    #[arg(long, env = "YUEBING_BENCH_SIZES")]
    pub sizes: Option<String>,
    /// Items per batch call [default: 32; config: bench.batch].
    #[arg(long, env = "YUEBING_BENCH_BATCH")]
    pub batch: Option<usize>,
    /// The node's store space [default: 512M; config: bench.segment].
    #[arg(long, env = "YUEBING_BENCH_SEGMENT")]
    pub segment: Option<String>,
    /// Calls per measurement, at most [default: 1000; config: bench.max_calls].
    #[arg(long, env = "YUEBING_BENCH_MAX_CALLS")]
    pub max_calls: Option<usize>,
    /// Transports, comma-separated: shm, tcp [default: shm,tcp; config: bench.transports].
    #[arg(long, env = "YUEBING_BENCH_TRANSPORT")]
    pub transport: Option<String>,
    /// Repetitions [default: 3; config: bench.repeat].
    #[arg(long, env = "YUEBING_BENCH_REPEAT")]
    pub repeat: Option<u32>,
    /// The multi-buffer cell, LAYERSxBLOCK: each key one BLOCK in each of LAYERS buffers;
    /// `none` skips it [default: 32x64K; config: bench.multi].
    #[arg(long, env = "YUEBING_BENCH_MULTI")]
    pub multi: Option<String>,
    /// Metrics recorded by the master, the node and the client: on, off, or on,off (on, off
    /// and an A/A twin of off, interleaved, each on its own master and node; on compared with
    /// off) [default: on; config: bench.metrics].
    #[arg(long, env = "YUEBING_BENCH_METRICS")]
    pub metrics: Option<String>,
    /// The client's cache of leased locations (reads of a key read before go straight to its
    /// replica): on, off, or on,off (a client of each, interleaved on the same cluster; on
    /// compared with off) [default: off; config: bench.lease_cache].
    #[arg(long, env = "YUEBING_BENCH_LEASE_CACHE")]
    pub lease_cache: Option<String>,
    /// Store space granted to the clients ahead of their puts (a put of at most a sixteenth
    /// of a grant writes into it and needs one master round trip): on, off, or on,off (a
    /// client of each, interleaved on the same cluster; on compared with off) [default: off;
    /// config: bench.grants].
    #[arg(long, env = "YUEBING_BENCH_GRANTS")]
    pub grants: Option<String>,
    /// Also write the results as JSON to this file.
    #[arg(long, env = "YUEBING_BENCH_JSON")]
    pub json: Option<PathBuf>,
}

impl BenchStoreArgs {
    /// `yuebing bench store` with the cluster `token`: the settings from these flags and
    /// `file`, the run, its table.
    pub async fn run(
        self,
        file: &ConfigFile,
        token: Option<yuebing_rpc::Token>,
    ) -> Result<(), CliError> {
        let list = |s: String| -> Result<Vec<usize>, CliError> {
            s.split(',')
                .map(|x| positive_size(x).map_err(CliError::Usage))
                .collect()
        };
        let transports = file
            .resolve("bench", "transports", self.transport, "shm,tcp".to_string())?
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<TransportKind>()
                    .map_err(|e| CliError::Usage(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let segment = file.resolve("bench", "segment", self.segment, "512M".to_string())?;
        let multi =
            multi_cell(&file.resolve("bench", "multi", self.multi, "32x64K".to_string())?)
                .map_err(CliError::Usage)?;
        let cfg = StoreBenchConfig {
            sizes: list(file.resolve(
                "bench",
                "sizes",
                self.sizes,
                "4K,64K,1M,16M".to_string(),
            )?)?,
            batch: file.resolve("bench", "batch", self.batch, 32)?.max(1),
            segment: positive_size(&segment).map_err(CliError::Usage)?,
            max_calls: file
                .resolve("bench", "max_calls", self.max_calls, 1000)?
                .max(1),
            repeat: file.resolve("bench", "repeat", self.repeat, 3)?.max(1),
            transports,
            multi,
            metrics: metrics_modes(&file.resolve("bench", "metrics", self.metrics, "on".into())?)
                .map_err(CliError::Usage)?,
            lease_cache: on_off_modes(
                &file.resolve("bench", "lease_cache", self.lease_cache, "off".into())?,
                "lease cache",
                "--lease-cache",
            )
            .map_err(CliError::Usage)?,
            grants: on_off_modes(
                &file.resolve("bench", "grants", self.grants, "off".into())?,
                "grants",
                "--grants",
            )
            .map_err(CliError::Usage)?,
            token,
        };
        let cells = cfg.sizes.len() as u64 + 1 + u64::from(cfg.multi.is_some());
        let clients =
            cfg.transports.len() * cfg.metrics.len() * cfg.lease_cache.len() * cfg.grants.len();
        let total = u64::from(cfg.repeat) * clients as u64 * cells;
        let bar = progress(total);
        let rows = run(&cfg, ticker(&bar)).await;
        let header = format!(
            "bench store: one node ({} store space) + a pure client, 1 replica, one call at a time; {} repetitions, medians, spread = max - min",
            cfg.segment, cfg.repeat
        );
        finish("store", &bar, rows, header, self.json)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct StoreBenchConfig {
    /// Value sizes in bytes.
    pub sizes: Vec<usize>,
    /// Items per batch call.
    pub batch: usize,
    /// Store space of the node (bytes); at most 80 % of it is filled.
    pub segment: usize,
    /// Calls per measurement, at most (fewer for large values: see `keys_for`).
    pub max_calls: usize,
    /// Repetitions.
    pub repeat: u32,
    /// Transports measured.
    pub transports: Vec<TransportKind>,
    /// The multi-buffer cell: (layers, block bytes), or none.
    pub multi: Option<(usize, usize)>,
    /// How metrics are recorded: one mode, or on, off and off's A/A twin (interleaved).
    pub metrics: Vec<Metering>,
    /// Whether the clients keep leased locations: one mode, or both (a client each).
    pub lease_cache: Vec<bool>,
    /// Whether the clients hold grants for their puts: one mode, or both (a client each).
    pub grants: Vec<bool>,
    /// The cluster token of the bench's master, node and clients.
    pub token: Option<yuebing_rpc::Token>,
}

impl StoreBenchConfig {
    /// The most store space the clients of one cluster may hold in grants: two grants (one
    /// open, one retired whose last writes end) per client that takes grants.
    fn granted(&self) -> u64 {
        let granting = self.grants.contains(&true) as u64;
        let clients = (self.transports.len() * self.lease_cache.len()) as u64;
        2 * BENCH_GRANT * granting * clients
    }
}

/// One measurement: items moved, bytes, wall time and per-call latency.
struct Sample {
    items: u64,
    bytes: u64,
    elapsed: Duration,
    p50_us: f64,
    p99_us: f64,
}

/// Times `calls` sequential calls of `op` (each moving `items` items of `size` bytes).
async fn timed<F, Fut>(calls: usize, items: usize, size: usize, mut op: F) -> Result<Sample, String>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).map_err(|e| e.to_string())?;
    let start = Instant::now();
    for i in 0..calls {
        let t = Instant::now();
        op(i).await?;
        hist.saturating_record(t.elapsed().as_nanos() as u64);
    }
    Ok(Sample {
        items: (calls * items) as u64,
        bytes: (calls * items * size) as u64,
        elapsed: start.elapsed(),
        p50_us: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
    })
}

/// `LAYERSxBLOCK` (`32x64K`), or `none`.
fn multi_cell(text: &str) -> Result<Option<(usize, usize)>, String> {
    if text.trim() == "none" {
        return Ok(None);
    }
    let bad = || format!("--multi {text:?}: expected LAYERSxBLOCK (32x64K) or none");
    let (layers, block) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let layers: usize = layers.trim().parse().map_err(|_| bad())?;
    if layers == 0 {
        return Err(bad());
    }
    Ok(Some((layers, positive_size(block).map_err(|_| bad())?)))
}

/// Keys per measurement for `size`: at most `max_calls`, and no more than 80 % of the segment.
fn keys_for(cfg: &StoreBenchConfig, size: usize) -> usize {
    (cfg.segment / 5 * 4 / size).clamp(1, cfg.max_calls)
}

fn err(e: yuebing_store::Error) -> String {
    format!("{e} (code {})", e.code())
}

/// The measurements of one size (and the small operations when `size` is 1 KiB) for one round.
async fn round(
    c: &Client,
    src: &EngineBuffer,
    dst: &EngineBuffer,
    cfg: &StoreBenchConfig,
    size: usize,
    tag: &str,
    out: &mut Vec<(String, Sample)>,
) -> Result<(), String> {
    let o = &Options::default();
    let n = keys_for(cfg, size);
    let batch = cfg.batch.min(n).max(1);
    let key = |kind: &str, i: usize| format!("{tag}/{kind}/{size}/{i}");
    let value = vec![0x5au8; size];
    let clear = || drain(c, cfg.granted());
    let s = timed(n, 1, size, |i| {
        let k = key("p", i);
        async move {
            c.put_from(&k, src.addr(), size as u64, o)
                .await
                .map_err(err)
        }
    })
    .await?;
    out.push((format!("put_from {}", label(size)), s));
    let s = timed(n, 1, size, |i| {
        let k = key("p", i);
        async move {
            c.get_into(&k, dst.addr(), size as u64, o)
                .await
                .map(|_| ())
                .map_err(err)
        }
    })
    .await?;
    out.push((format!("get_into {}", label(size)), s));
    let s = timed(n, 1, size, |i| {
        let k = key("p", i);
        async move { c.get(&k, o).await.map(|_| ()).map_err(err) }
    })
    .await?;
    out.push((format!("get(bytes) {}", label(size)), s));
    clear().await?;
    let s = timed(n, 1, size, |i| {
        let (k, v) = (key("b", i), &value);
        async move { c.put(&k, v, o).await.map_err(err) }
    })
    .await?;
    out.push((format!("put(bytes) {}", label(size)), s));
    clear().await?;
    if batch > 1 {
        let calls = (n / batch).max(1);
        let keys =
            |j: usize| -> Vec<String> { (0..batch).map(|b| key("bb", j * batch + b)).collect() };
        let s = timed(calls, batch, size, |j| {
            let keys = keys(j);
            async move {
                let items = at_offsets(&keys, src.addr(), size);
                check_all(c.batch_put_from(&items, o).await.map_err(err)?)
            }
        })
        .await?;
        out.push((format!("batch_put_from {} x{batch}", label(size)), s));
        let s = timed(calls, batch, size, |j| {
            let keys = keys(j);
            async move {
                let items = at_offsets(&keys, dst.addr(), size);
                check_all(c.batch_get_into(&items, o).await.map_err(err)?)
            }
        })
        .await?;
        out.push((format!("batch_get_into {} x{batch}", label(size)), s));
        clear().await?;
    }
    Ok(())
}

/// The multi-buffer cell: `batch` keys per call, key b one `block` at `b * block` in each of
/// `layers` per-layer regions of `src` (and of `dst` when read back), the bytes of the last
/// call read back checked.
async fn multi_round(
    c: &Client,
    (src, dst): (&EngineBuffer, &EngineBuffer),
    cfg: &StoreBenchConfig,
    (layers, block): (usize, usize),
    tag: &str,
    out: &mut Vec<(String, Sample)>,
) -> Result<(), String> {
    let o = &Options::default();
    let object = layers * block;
    let batch = cfg.batch.min(keys_for(cfg, object)).max(1);
    let calls = (keys_for(cfg, object) / batch).max(1);
    // Layer l of key b at `l * batch * block + b * block`, in both buffers.
    let layout = |base: u64, keys: &[String]| -> Vec<(String, Vec<(u64, u64)>)> {
        keys.iter()
            .enumerate()
            .map(|(b, k)| {
                let at = |l: usize| base + ((l * batch + b) * block) as u64;
                (
                    k.clone(),
                    (0..layers).map(|l| (at(l), block as u64)).collect(),
                )
            })
            .collect()
    };
    let keys = |j: usize| -> Vec<String> {
        (0..batch)
            .map(|b| format!("{tag}/multi/{}", j * batch + b))
            .collect()
    };
    let cell = format!("{layers}x{} x{batch}", label(block));
    let s = timed(calls, batch, object, |j| {
        let items = layout(src.addr(), &keys(j));
        async move { check_all(c.batch_put_from_buffers(&items, o).await.map_err(err)?) }
    })
    .await?;
    out.push((format!("batch_put_from_buffers {cell}"), s));
    let s = timed(calls, batch, object, |j| {
        let items = layout(dst.addr(), &keys(j));
        async move { check_all(c.batch_get_into_buffers(&items, o).await.map_err(err)?) }
    })
    .await?;
    out.push((format!("batch_get_into_buffers {cell}"), s));
    let span = layers * batch * block;
    let (mut a, mut b) = (vec![0u8; span], vec![1u8; span]);
    // SAFETY: every call above has ended: no transfer reads `src` or writes `dst` now.
    unsafe { src.read_at(0, &mut a).and_then(|()| dst.read_at(0, &mut b)) }
        .map_err(|e| e.to_string())?;
    if a != b {
        return Err(format!(
            "{cell}: the blocks read back differ from those written"
        ));
    }
    drain(c, cfg.granted()).await
}

/// exist (hit and miss) and batch exist on 1 KiB values.
async fn small_ops(
    c: &Client,
    src: &EngineBuffer,
    cfg: &StoreBenchConfig,
    tag: &str,
    out: &mut Vec<(String, Sample)>,
) -> Result<(), String> {
    let o = &Options::default();
    let n = cfg.max_calls;
    let key = |i: usize| format!("{tag}/small/{i}");
    for i in 0..n {
        c.put_from(&key(i), src.addr(), 1024, o)
            .await
            .map_err(err)?;
    }
    for (name, miss) in [("exist(hit) 1KiB", false), ("exist(miss) 1KiB", true)] {
        let s = timed(n, 1, 0, |i| {
            let k = if miss {
                format!("{tag}/absent/{i}")
            } else {
                key(i)
            };
            async move {
                match c.exist(&k, o).await.map_err(err)? {
                    found if found != miss => Ok(()),
                    _ => Err(format!("exist({k}) gave the wrong answer")),
                }
            }
        })
        .await?;
        out.push((name.to_string(), s));
    }
    let b = cfg.batch.max(1);
    let s = timed((n / b).max(1), b, 0, |j| {
        let keys: Vec<String> = (0..b).map(|x| key((j * b + x) % n)).collect();
        async move {
            let refs: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
            check_all(c.batch_exist(&refs, o).await.map_err(err)?)
        }
    })
    .await?;
    out.push((format!("batch_exist 1KiB x{b}"), s));
    drain(c, cfg.granted()).await
}

/// Removes everything (untimed) and waits until the space held for leases is free again, so
/// that the next measurement starts on an empty store and never triggers eviction. Space the
/// clients hold in grants, at most `granted` bytes, stays theirs.
async fn drain(c: &Client, granted: u64) -> Result<(), String> {
    let o = &Options::default();
    c.remove_all(true, o).await.map_err(err)?;
    let start = Instant::now();
    loop {
        let st = c.stats(o).await.map_err(err)?;
        if st.objects == 0 && st.pending_writes == 0 && st.bytes_used <= granted {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("store space still held 30 s after remove_all".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Item b of a batch comes from (goes to) `base + b * size`, like the peer's bench.
fn at_offsets(keys: &[String], base: u64, size: usize) -> Vec<(&str, u64, u64)> {
    keys.iter()
        .enumerate()
        .map(|(b, k)| (k.as_str(), base + (b * size) as u64, size as u64))
        .collect()
}

fn check_all<T>(results: Vec<yuebing_store::Result<T>>) -> Result<(), String> {
    results
        .into_iter()
        .try_for_each(|r| r.map(|_| ()).map_err(err))
}

/// The clusters (a master and a node process each) and the clients of one set of variants.
/// Fields drop in declaration order: the clients stop before their clusters, on every path.
struct Variants {
    /// Each variant's name, client, and source and destination buffers.
    clients: Vec<(String, Client, Arc<EngineBuffer>, Arc<EngineBuffer>)>,
    /// Held only to be stopped when dropped.
    _clusters: Vec<(ChildProcess, ChildProcess)>,
}

/// Starts one cluster per metrics mode of `order` (in that order) and one client per mode,
/// transport, lease cache and grant setting: the node serves both transports; only this
/// process's client forces one (the client initiates every transfer).
async fn start_variants(cfg: &StoreBenchConfig, order: &[Metering]) -> Result<Variants, String> {
    // The master runs in its own process, as `mooncake_master` does in the peer's bench.
    // Short leases: a forced remove_all holds leased space until the lease ends, and each
    // measurement waits for the store to be empty before it starts.
    let token = cfg.token.as_ref();
    let multi = cfg.multi.map_or(0, |(layers, block)| layers * block);
    let biggest =
        (cfg.sizes.iter().copied().max().unwrap_or(1 << 20)).max(multi) * cfg.batch.max(1);
    let mut clusters = Vec::new();
    let mut clients = Vec::new();
    for &metering in order {
        let on = metering.on();
        let admin: &[&str] = if on { &["--metrics-port", "0"] } else { &[] };
        let master_flags = [&["--lease-ttl-ms", "2000"][..], admin].concat();
        let (master, addr) = ChildProcess::master(&master_flags, token).await?;
        let segment = cfg.segment.to_string();
        let masters = std::slice::from_ref(&addr);
        let node = ChildProcess::node_with(masters, &segment, None, admin, token).await?;
        let mut kinds = Vec::new();
        for &kind in &cfg.transports {
            for &cached in &cfg.lease_cache {
                kinds.extend(cfg.grants.iter().map(|&granted| (kind, cached, granted)));
            }
        }
        for (kind, cached, granted) in kinds {
            let client = Client::start(ClientConfig {
                masters: vec![addr.clone()],
                token: cfg.token.clone(),
                engine: EngineConfig {
                    transport: Some(kind),
                    ..EngineConfig::default()
                },
                metrics: if on {
                    MetricsRegistry::prometheus()
                } else {
                    MetricsRegistry::off()
                },
                lease_cache: match cached {
                    true => BENCH_LEASE_CACHE,
                    false => 0,
                },
                grant_size: match granted {
                    true => BENCH_GRANT,
                    false => 0,
                },
                ..ClientConfig::default()
            })
            .await
            .map_err(err)?;
            let src = client
                .engine()
                .allocate(biggest, true)
                .map_err(|e| e.to_string())?;
            let dst = client
                .engine()
                .allocate(biggest, true)
                .map_err(|e| e.to_string())?;
            let mut name = format!("yuebing-{}", kind.name());
            for (what, modes, on) in [
                ("cache", &cfg.lease_cache, cached),
                ("grants", &cfg.grants, granted),
            ] {
                if modes.len() > 1 {
                    name.push_str(&format!(" {what}={}", on_off(on)));
                }
            }
            let variant = with_metrics(&name, metering, &cfg.metrics);
            clients.push((variant, client, src, dst));
        }
        clusters.push((master, node));
    }
    Ok(Variants {
        clients,
        _clusters: clusters,
    })
}

/// Runs the benchmark; `tick` is called after each size of each round.
pub async fn run(cfg: &StoreBenchConfig, mut tick: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    // Metrics modes run on clusters of their own, and a cluster keeps traits of its own for
    // its whole life (where its processes and memory landed): measured on one set of clusters,
    // two identical ones differ by ±5 % here. So they are started afresh for each repetition,
    // the first started turned by one each time, and those traits average out over the
    // repetitions like any other noise. Other variants share one cluster, started once.
    let fresh_each_repetition = cfg.metrics.len() > 1;
    let mut variants: Option<Variants> = None;
    // Interleaved: each size of each repetition is measured on every variant in turn, the
    // order turned by one each repetition, so that neither drift nor going first favours one.
    let mut samples: Vec<(String, String, Sample)> = Vec::new();
    for rep in 0..cfg.repeat {
        let current = match variants.take() {
            Some(kept) if !fresh_each_repetition => kept,
            old => {
                drop(old);
                let mut order = cfg.metrics.clone();
                let first = rep as usize % order.len().max(1);
                order.rotate_left(first);
                start_variants(cfg, &order).await?
            }
        };
        let clients = &variants.insert(current).clients;
        let tag = format!("r{rep}");
        let n = clients.len();
        // Clusters started afresh are in an order turned already: turning it again would
        // undo it.
        let shift = if fresh_each_repetition {
            0
        } else {
            rep as usize
        };
        let turn: Vec<_> = (0..n).map(|i| &clients[(i + shift) % n]).collect();
        for &size in &cfg.sizes {
            for (variant, client, src, dst) in &turn {
                let mut out = Vec::new();
                round(client, src, dst, cfg, size, &tag, &mut out).await?;
                samples.extend(out.into_iter().map(|(case, s)| (case, variant.clone(), s)));
                tick(&format!("{variant} {}", label(size)));
            }
        }
        for (variant, client, src, _) in &turn {
            let mut out = Vec::new();
            small_ops(client, src, cfg, &tag, &mut out).await?;
            samples.extend(out.into_iter().map(|(case, s)| (case, variant.clone(), s)));
            tick(&format!("{variant} small operations"));
        }
        if let Some(cell) = cfg.multi {
            for (variant, client, src, dst) in &turn {
                let mut out = Vec::new();
                multi_round(client, (src, dst), cfg, cell, &tag, &mut out).await?;
                samples.extend(out.into_iter().map(|(case, s)| (case, variant.clone(), s)));
                tick(&format!("{variant} multi-buffer"));
            }
        }
    }
    drop(variants);
    Ok(on_against_off(metrics_overhead(rows(&samples))))
}

/// The clients' cache of leased locations when `--lease-cache` is on: room for every key
/// a measurement reads.
const BENCH_LEASE_CACHE: usize = 1 << 16;

fn on_off(on: bool) -> &'static str {
    match on {
        true => "on",
        false => "off",
    }
}

/// Store space each client asks for per grant when `--grants` is on: a put of up to 1 MiB
/// goes through one.
const BENCH_GRANT: u64 = 16 << 20;

/// Each row of a variant with a client mode on (`… cache=on`, `… grants=on`: the first one
/// in its name) against the row of the same case and metric with that mode off (both
/// measured interleaved in the same run), as its baseline.
fn on_against_off(rows: Vec<Row>) -> Vec<Row> {
    let all = rows.clone();
    rows.into_iter()
        .map(|row| {
            let on = [" cache=on", " grants=on"]
                .into_iter()
                .find(|m| row.variant.contains(m));
            let Some(on) = on else {
                return row;
            };
            let baseline = row.variant.replacen(on, &on.replace("=on", "=off"), 1);
            match same_cell(&all, &row, &baseline) {
                Some(b) if b.value > 0.0 => {
                    let value = b.value;
                    row.against(&baseline, value)
                }
                _ => row,
            }
        })
        .collect()
}

fn rows(samples: &[(String, String, Sample)]) -> Vec<Row> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for (case, variant, _) in samples {
        if !keys.contains(&(case.as_str(), variant.as_str())) {
            keys.push((case, variant));
        }
    }
    let mut out = Vec::new();
    for (case, variant) in keys {
        let of: Vec<&Sample> = samples
            .iter()
            .filter(|(c, v, _)| c == case && v == variant)
            .map(|(_, _, s)| s)
            .collect();
        let stat = |f: &dyn Fn(&Sample) -> f64| {
            median_spread(&of.iter().map(|s| f(s)).collect::<Vec<_>>())
        };
        if of.iter().any(|s| s.bytes > 0) {
            out.push(Row::new(
                case,
                variant,
                "GB/s",
                stat(&|s| s.bytes as f64 / 1e9 / s.elapsed.as_secs_f64()),
            ));
        }
        out.push(Row::new(
            case,
            variant,
            "ops/s",
            stat(&|s| s.items as f64 / s.elapsed.as_secs_f64()),
        ));
        out.push(Row::new(case, variant, "p50_us", stat(&|s| s.p50_us)));
        out.push(Row::new(case, variant, "p99_us", stat(&|s| s.p99_us)));
    }
    out
}
