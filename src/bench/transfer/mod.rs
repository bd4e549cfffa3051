//! `yuebing bench transfer`: the Transfer Engine between two processes, the analogue of
//! Mooncake's `transfer_engine_bench`, against the machine's limits measured in the same run.
//!
//! A target process (`yuebing bench-target`, started and killed by the bench) holds one
//! pre-faulted buffer; this process initiates batches of `--batch` requests of `--block` bytes
//! from `--threads` tasks, over each transport of `--transport` (tcp and shm by default). Per
//! case it reports GB/s, batch latency p50/p99 and CPU seconds per GB (initiator + target), and,
//! interleaved, single-thread memcpy (shm's baseline), a raw loopback TCP stream with its CPU
//! seconds per GB and a raw ping-pong (block out, 8-byte ack back) (tcp's baselines). At batch
//! 1 it also measures the ping-pong with both ends on tokio (`raw-tcp-pingpong-tokio`, no
//! ratio): how much of the gap to the blocking ping-pong is the async runtime's.

mod baseline;
pub mod cpu;
pub mod target;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use yuebing_engine::{
    EngineConfig, Opcode, SegmentHandle, TransferEngine, TransferRequest, TransportKind,
};
use yuebing_store::MetricsRegistry;

use self::baseline::Measured;
use self::cpu::cpu_seconds;
use self::target::TargetProcess;
use super::args::{list, positive_size, BenchCommon};
use super::command::{finish, ticker};
use super::harness::{closed_loop, median_spread};
use super::report::{metrics_modes, metrics_overhead, with_metrics, Metering, Row};
use crate::cli::{progress, CliError};
use crate::config::{ConfigError, ConfigFile};

/// Flags of `yuebing bench transfer`.
#[derive(Args, Debug)]
pub struct BenchTransferArgs {
    /// write or read [default: write; config: bench.op].
    #[arg(long, env = "YUEBING_BENCH_OP")]
    pub op: Option<String>,
    /// Block sizes, comma-separated [default: 4K,64K,1M,16M; config: bench.blocks].
    #[arg(long, env = "YUEBING_BENCH_BLOCKS")]
    pub blocks: Option<String>,
    /// Requests per batch, comma-separated [default: 1,32; config: bench.batches].
    #[arg(long, env = "YUEBING_BENCH_BATCHES")]
    pub batches: Option<String>,
    /// Concurrent initiating tasks [default: 1; config: bench.threads].
    #[arg(long, env = "YUEBING_BENCH_THREADS")]
    pub threads: Option<usize>,
    /// Transports to measure, comma-separated: tcp, shm, rdma [default: tcp,shm; config:
    /// bench.transports].
    #[arg(long, env = "YUEBING_BENCH_TRANSPORT")]
    pub transport: Option<String>,
    /// Runtime worker threads of the initiator and of the target process, each. One per side
    /// is like for like with the baselines (one thread per side) and keeps the tcp spin for a
    /// lone request on; more oversubscribe a small box [default: 1; config:
    /// bench.worker_threads].
    #[arg(long, env = "YUEBING_BENCH_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// The initiating engine's metrics: on, off, or on,off (on, off and an A/A twin of off:
    /// three engines, interleaved, on compared with off) [default: on; config: bench.metrics].
    #[arg(long, env = "YUEBING_BENCH_METRICS")]
    pub metrics: Option<String>,
    /// The initiator's memory on this GPU (`cuda:N`, a build with the `cuda` feature), compared
    /// with the GPU's pinned host-device copy [default: host memory; config: bench.gpu].
    #[arg(long, env = "YUEBING_BENCH_GPU")]
    pub gpu: Option<u32>,
    /// `--repeat`, `--duration-ms`, `--warmup-ms`, `--json`.
    #[command(flatten)]
    pub common: BenchCommon,
}

impl BenchTransferArgs {
    /// Runtime worker threads of each side (at least 1).
    pub fn worker_threads(&self, file: &ConfigFile) -> Result<usize, ConfigError> {
        crate::cli::worker_threads(file, "bench", self.worker_threads, 1)
    }

    /// `yuebing bench transfer` with the cluster `token`, on a runtime of
    /// [`BenchTransferArgs::worker_threads`] workers: the settings from these flags and
    /// `file`, the run, its table.
    pub async fn run(
        self,
        file: &ConfigFile,
        token: Option<yuebing_rpc::Token>,
    ) -> Result<(), CliError> {
        let (repeat, duration, warmup) = self.common.resolve(file)?;
        let op = match file
            .resolve("bench", "op", self.op, "write".to_string())?
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
        let transports =
            file.resolve("bench", "transports", self.transport, "tcp,shm".to_string())?;
        let transports = list(&transports, |t| {
            t.parse::<TransportKind>()
                .map_err(|e| format!("--transport: {e}"))
        })?;
        let blocks = file.resolve("bench", "blocks", self.blocks, "4K,64K,1M,16M".to_string())?;
        let batches = file.resolve("bench", "batches", self.batches, "1,32".to_string())?;
        let cfg = TransferBenchConfig {
            op,
            blocks: list(&blocks, positive_size)?,
            batches: list(&batches, |b| {
                b.parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("bad batch {b:?}"))
            })?,
            threads: file.resolve("bench", "threads", self.threads, 1)?.max(1),
            // The target runs as many workers as this runtime (sized from the same setting).
            worker_threads: tokio::runtime::Handle::current().metrics().num_workers(),
            duration,
            warmup,
            repeat,
            transports,
            metrics: metrics_modes(&file.resolve("bench", "metrics", self.metrics, "on".into())?)
                .map_err(CliError::Usage)?,
            token,
            gpu: file.resolve("bench", "gpu", self.gpu.map(Some), None)?,
        };
        let per_cell = cfg.transports.len() * cfg.metrics.len() + 1;
        let total =
            u64::from(cfg.repeat) * (cfg.blocks.len() * cfg.batches.len() * per_cell) as u64;
        let bar = progress(total);
        let rows = run(&cfg, ticker(&bar)).await;
        let memory = cfg
            .gpu
            .map_or(String::new(), |g| format!("; initiator memory on cuda:{g}"));
        let header = format!(
            "bench transfer: {} repetitions x {:?}; {} thread(s); {} runtime worker(s) per process; medians, spread = max - min; CPU = initiator + target{memory}",
            cfg.repeat, cfg.duration, cfg.threads, cfg.worker_threads
        );
        finish("transfer", &bar, rows, header, self.common.json)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct TransferBenchConfig {
    /// Read or write.
    pub op: Opcode,
    /// Block sizes in bytes.
    pub blocks: Vec<usize>,
    /// Requests per batch.
    pub batches: Vec<usize>,
    /// Concurrent initiating tasks.
    pub threads: usize,
    /// Runtime worker threads of the target process (the initiator's are the caller's).
    pub worker_threads: usize,
    /// Measured time per measurement.
    pub duration: Duration,
    /// Unmeasured warm-up before each.
    pub warmup: Duration,
    /// Repetitions.
    pub repeat: u32,
    /// Transports measured, each forced on every request (tcp, shm).
    pub transports: Vec<TransportKind>,
    /// Whether the initiating engine records metrics: one mode, or on, off and off's A/A twin
    /// (three engines, interleaved).
    pub metrics: Vec<Metering>,
    /// The cluster token of both engines.
    pub token: Option<yuebing_rpc::Token>,
    /// The initiator's memory on this GPU instead of the host (feature `cuda`).
    pub gpu: Option<u32>,
}

/// A size as the tables name it: `4KiB`, `1MiB`, `100B`.
pub(crate) fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

struct Sample {
    gbps: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_s_per_gb: f64,
}

/// The initiator's memory: a host buffer, or device memory registered as `cuda:N`.
enum Local {
    Host(Arc<yuebing_engine::EngineBuffer>),
    #[cfg(feature = "cuda")]
    Gpu(GpuLocal),
}

/// Device memory registered with `engine`: unregistered when dropped, then freed (the fields
/// drop after `Drop::drop`).
#[cfg(feature = "cuda")]
struct GpuLocal {
    engine: TransferEngine,
    device: yuebing_engine::gpu::DeviceBuffer,
}

#[cfg(feature = "cuda")]
impl Drop for GpuLocal {
    fn drop(&mut self) {
        let _ = self.engine.unregister(self.device.addr());
    }
}

impl Local {
    /// `len` bytes registered with `engine`: on GPU `gpu` if given, else host memory.
    fn allocate(engine: &TransferEngine, len: usize, gpu: Option<u32>) -> Result<Local, String> {
        let Some(gpu) = gpu else {
            let buf = engine.allocate(len, true).map_err(|e| e.to_string())?;
            return Ok(Local::Host(buf));
        };
        #[cfg(feature = "cuda")]
        {
            let device =
                yuebing_engine::gpu::DeviceBuffer::allocate(gpu, len).map_err(|e| e.to_string())?;
            // SAFETY: `GpuLocal` owns the device memory and unregisters it from the engine
            // (which stops every access to it, the NICs' included) in its `Drop`, before the
            // memory is freed; only the engine and the driver's copies touch it meanwhile.
            unsafe {
                engine.register(
                    device.addr() as *mut u8,
                    len,
                    yuebing_engine::Location::Cuda { device: gpu },
                )
            }
            .map_err(|e| e.to_string())?;
            Ok(Local::Gpu(GpuLocal {
                engine: engine.clone(),
                device,
            }))
        }
        #[cfg(not(feature = "cuda"))]
        Err(format!(
            "--gpu {gpu}: this build has no GPU support (cargo feature `cuda`)"
        ))
    }

    fn addr(&self) -> u64 {
        match self {
            Local::Host(b) => b.addr(),
            #[cfg(feature = "cuda")]
            Local::Gpu(g) => g.device.addr(),
        }
    }
}

struct Initiator {
    engine: TransferEngine,
    local: u64,
    peer: SegmentHandle,
    remote: u64,
}

async fn measure_engine(
    init: &Arc<Initiator>,
    cfg: &TransferBenchConfig,
    target_pid: u32,
    block: usize,
    batch: usize,
    kind: TransportKind,
) -> Result<Sample, String> {
    let op = cfg.op;
    let one = {
        let init = init.clone();
        move |w: usize| {
            let init = init.clone();
            async move {
                let e = &init.engine;
                let base = (w * batch * block) as u64;
                let request = |i: u64| {
                    let off = base + i * block as u64;
                    let mut r = TransferRequest::write(
                        init.local + off,
                        init.peer,
                        init.remote + off,
                        block as u64,
                    );
                    r.opcode = op;
                    r.via(kind)
                };
                if batch == 1 {
                    // One request: the engine's single-transfer call (Mooncake's transferSync).
                    return e.transfer(request(0)).await.map_err(|e| e.to_string());
                }
                let id = e.allocate_batch(batch).map_err(|e| e.to_string())?;
                let reqs: Vec<TransferRequest> = (0..batch as u64).map(request).collect();
                e.submit(id, &reqs).map_err(|e| e.to_string())?;
                let status = e.wait(id).await.map_err(|e| e.to_string())?;
                e.free_batch(id).map_err(|e| e.to_string())?;
                if status.completed != batch {
                    return Err(format!(
                        "batch ended {:?}: {:?}",
                        status.state, status.error
                    ));
                }
                Ok::<(), String>(())
            }
        }
    };
    closed_loop(cfg.threads, Duration::ZERO, cfg.warmup, one.clone()).await?;
    let (c0, t0) = (
        cpu_seconds(None).unwrap_or(0.0),
        cpu_seconds(Some(target_pid)).unwrap_or(0.0),
    );
    let s = closed_loop(cfg.threads, Duration::ZERO, cfg.duration, one).await?;
    let cpu =
        cpu_seconds(None).unwrap_or(0.0) - c0 + cpu_seconds(Some(target_pid)).unwrap_or(0.0) - t0;
    let bytes = s.ops as f64 * (batch * block) as f64;
    Ok(Sample {
        gbps: bytes / 1e9 / s.elapsed.as_secs_f64(),
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        cpu_s_per_gb: cpu / (bytes / 1e9).max(1e-12),
    })
}

fn variant(kind: TransportKind) -> String {
    format!("yuebing-{}", kind.name())
}
const MEMCPY: &str = "memcpy-1thread";
const STREAM: &str = "raw-tcp-stream";
/// The GPU's pinned host-device copy, in the direction the initiator's staging goes.
const GPU_COPY: &str = "cuda-pinned-copy";
const PING: &str = "raw-tcp-pingpong";
const PING_TOKIO: &str = "raw-tcp-pingpong-tokio";

/// Runs the benchmark; `tick` is called after each measurement.
pub async fn run(
    cfg: &TransferBenchConfig,
    mut tick: impl FnMut(&str),
) -> Result<Vec<Row>, String> {
    let max_block = cfg.blocks.iter().copied().max().ok_or("no block size")?;
    let max_batch = cfg.batches.iter().copied().max().ok_or("no batch size")?;
    let region = max_block * max_batch * cfg.threads.max(1);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Started from the blocking pool: it waits for the target's announcement.
    let workers = cfg.worker_threads;
    let token = cfg.token.clone();
    let target = tokio::task::spawn_blocking(move || {
        TargetProcess::spawn(&exe, region, workers, token.as_ref())
    })
    .await
    .map_err(|e| e.to_string())??;
    // One initiating engine per metrics mode, all writing to (or reading from) the target.
    let mut inits = Vec::new();
    for &metering in &cfg.metrics {
        let registry = match metering.on() {
            true => MetricsRegistry::prometheus(),
            false => MetricsRegistry::off(),
        };
        let engine = TransferEngine::start(EngineConfig {
            token: cfg.token.clone(),
            metrics: registry.sink().clone(),
            ..EngineConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
        let local = Local::allocate(&engine, region, cfg.gpu)?;
        let peer = engine
            .open_segment(&target.announce.name)
            .await
            .map_err(|e| e.to_string())?;
        let init = Arc::new(Initiator {
            local: local.addr(),
            peer,
            remote: target.announce.addr,
            engine,
        });
        inits.push((metering, init, local, registry));
    }
    let mut engine_samples: HashMap<(TransportKind, Metering, usize, usize), Vec<Sample>> =
        HashMap::new();
    let mut base: HashMap<(&str, usize, usize), Vec<Measured>> = HashMap::new();
    for rep in 0..cfg.repeat as usize {
        // The engines' order turns by one each repetition: going first favours none.
        let n = inits.len();
        let turn: Vec<_> = (0..n).map(|i| &inits[(i + rep) % n]).collect();
        for &block in &cfg.blocks {
            for &batch in &cfg.batches {
                let label = format!("{} {} batch={batch}", op_name(cfg.op), size_label(block));
                for &kind in &cfg.transports {
                    for &(metering, init, _, _) in &turn {
                        let pid = target.announce.pid;
                        let s = measure_engine(init, cfg, pid, block, batch, kind).await?;
                        engine_samples
                            .entry((kind, *metering, block, batch))
                            .or_default()
                            .push(s);
                        let name = with_metrics(&variant(kind), *metering, &cfg.metrics);
                        tick(&format!("{label} / {name}"));
                    }
                }
                let d = cfg.duration;
                let m =
                    tokio::task::spawn_blocking(move || baseline::memcpy(block, block * batch, d))
                        .await
                        .map_err(|e| e.to_string())?;
                base.entry((MEMCPY, block, batch)).or_default().push(m);
                let (name, m) = if batch == 1 {
                    (
                        PING,
                        tokio::task::spawn_blocking(move || baseline::tcp_ping_pong(block, d))
                            .await,
                    )
                } else {
                    (
                        STREAM,
                        tokio::task::spawn_blocking(move || baseline::tcp_stream(block, d)).await,
                    )
                };
                let m = m.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
                base.entry((name, block, batch)).or_default().push(m);
                if let Some(gpu) = cfg.gpu {
                    let (op, len) = (cfg.op, block * batch);
                    let m =
                        tokio::task::spawn_blocking(move || baseline::gpu_copy(gpu, op, len, d))
                            .await
                            .map_err(|e| e.to_string())??;
                    base.entry((GPU_COPY, block, batch)).or_default().push(m);
                }
                if batch == 1 && cfg.transports.contains(&TransportKind::Tcp) {
                    let m = baseline::tcp_ping_pong_tokio(block, d)
                        .await
                        .map_err(|e| e.to_string())?;
                    base.entry((PING_TOKIO, block, batch)).or_default().push(m);
                }
                tick(&format!("{label} / baselines"));
            }
        }
    }
    drop(inits);
    drop(target);
    Ok(metrics_overhead(rows(cfg, &engine_samples, &base)))
}

fn op_name(op: Opcode) -> &'static str {
    match op {
        Opcode::Read => "read",
        Opcode::Write => "write",
    }
}

fn rows(
    cfg: &TransferBenchConfig,
    engine: &HashMap<(TransportKind, Metering, usize, usize), Vec<Sample>>,
    base: &HashMap<(&str, usize, usize), Vec<Measured>>,
) -> Vec<Row> {
    let mut out = Vec::new();
    for &block in &cfg.blocks {
        for &batch in &cfg.batches {
            let case = format!("{} {} batch={batch}", op_name(cfg.op), size_label(block));
            let bstat = |name: &str, f: &dyn Fn(&Measured) -> f64| {
                base.get(&(name, block, batch))
                    .map(|v| median_spread(&v.iter().map(f).collect::<Vec<_>>()))
            };
            let ceiling = if batch == 1 { PING } else { STREAM };
            for (&kind, &on) in cfg
                .transports
                .iter()
                .flat_map(|k| cfg.metrics.iter().map(move |m| (k, m)))
            {
                let Some(samples) = engine.get(&(kind, on, block, batch)) else {
                    continue;
                };
                let stat = |f: &dyn Fn(&Sample) -> f64| {
                    median_spread(&samples.iter().map(f).collect::<Vec<_>>())
                };
                let name = with_metrics(&variant(kind), on, &cfg.metrics);
                // tcp is compared with raw loopback TCP, shm with a single-thread memcpy.
                // With the initiator's memory on a GPU, every transport stages it (or the NIC
                // reaches it): compared with the GPU's pinned host-device copy.
                let (rate_base, cpu_base) = match kind {
                    _ if cfg.gpu.is_some() => (GPU_COPY, None),
                    TransportKind::Tcp => (ceiling, Some(STREAM)),
                    _ => (MEMCPY, None),
                };
                let gbps = Row::new(&case, &name, "GB/s", stat(&|s| s.gbps));
                match bstat(rate_base, &|m| m.gbps) {
                    Some(c) => out.push(gbps.against(rate_base, c.0)),
                    None => out.push(gbps),
                }
                out.push(Row::new(&case, &name, "p50_us", stat(&|s| s.p50_us)));
                out.push(Row::new(&case, &name, "p99_us", stat(&|s| s.p99_us)));
                let cpu = Row::new(&case, &name, "cpu_s_per_GB", stat(&|s| s.cpu_s_per_gb));
                match cpu_base.and_then(|b| bstat(b, &|m| m.cpu_s_per_gb).map(|c| (b, c))) {
                    Some((b, c)) => out.push(cpu.against(b, c.0)),
                    None => out.push(cpu),
                }
            }
            if let Some(m) = bstat(MEMCPY, &|m| m.gbps) {
                out.push(Row::new(&case, MEMCPY, "GB/s", m));
            }
            if let Some(m) = bstat(GPU_COPY, &|m| m.gbps) {
                out.push(Row::new(&case, GPU_COPY, "GB/s", m));
            }
            if let Some(m) = bstat(ceiling, &|m| m.gbps) {
                out.push(Row::new(&case, ceiling, "GB/s", m));
            }
            if let Some(m) = bstat(PING_TOKIO, &|m| m.gbps) {
                out.push(Row::new(&case, PING_TOKIO, "GB/s", m));
            }
            if let Some(m) = bstat(STREAM, &|m| m.cpu_s_per_gb) {
                out.push(Row::new(&case, STREAM, "cpu_s_per_GB", m));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print() {
        assert_eq!(size_label(1 << 20), "1MiB");
        assert_eq!(size_label(4096), "4KiB");
        assert_eq!(size_label(100), "100B");
    }
}
