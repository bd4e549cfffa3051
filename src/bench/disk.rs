//! `yuebing bench disk`: a node's disk tier (yuebing-store's `DiskTier`) against the raw
//! device under it, and against a file per object, in the same run.
//!
//! Each size is written then read by `--inflight` concurrent writers/readers on each variant
//! in turn (the order turned by one each repetition):
//! - `pwrite+fdatasync` (the baseline): one file, each value `pwrite` then `fdatasync`, as
//!   durable as a tier write when it returns; reads `pread` it back;
//! - `disk tier`: `DiskTier::write` (durable when it returns) and `DiskTier::read` (checksums
//!   checked);
//! - `file per object`: a file per value, created, written and `fsync`ed with its directory;
//!   reads open and read it.
//!
//! Before the reads, every file's cached pages are dropped (`posix_fadvise(DONTNEED)`), so
//! reads come from the device, not from memory.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use yuebing_store::disk_tier::{DiskTier, DiskTierConfig, Tag};

use super::args::positive_size;
use super::command::{finish, ticker};
use super::harness::median_spread;
use super::report::Row;
use super::transfer::size_label as label;
use crate::cli::{progress, CliError};
use crate::config::ConfigFile;

/// Flags of `yuebing bench disk`.
#[derive(Args, Debug)]
pub struct BenchDiskArgs {
    /// Value sizes, comma-separated [default: 4K,1M,16M; config: bench.sizes].
    #[arg(long, env = "YUEBING_BENCH_SIZES")]
    pub sizes: Option<String>,
    /// Bytes written per size and variant (at least 16 values, at most 4096)
    /// [default: 256M; config: bench.bytes].
    #[arg(long, env = "YUEBING_BENCH_BYTES")]
    pub bytes: Option<String>,
    /// Concurrent writers and readers [default: 8; config: bench.inflight].
    #[arg(long, env = "YUEBING_BENCH_INFLIGHT")]
    pub inflight: Option<usize>,
    /// The directory to measure in (a fresh one is made inside it and removed at the end)
    /// [default: the system's temporary directory; config: bench.dir].
    #[arg(long, env = "YUEBING_BENCH_DIR")]
    pub dir: Option<PathBuf>,
    /// Repetitions [default: 3; config: bench.repeat].
    #[arg(long, env = "YUEBING_BENCH_REPEAT")]
    pub repeat: Option<u32>,
    /// Also write the results as JSON to this file.
    #[arg(long, env = "YUEBING_BENCH_JSON")]
    pub json: Option<PathBuf>,
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct DiskBenchConfig {
    /// Value sizes.
    pub sizes: Vec<usize>,
    /// Bytes written per size and variant.
    pub bytes: usize,
    /// Concurrent writers and readers.
    pub inflight: usize,
    /// Where the run's directory is made.
    pub dir: PathBuf,
    /// Repetitions.
    pub repeat: u32,
}

impl BenchDiskArgs {
    /// `yuebing bench disk`: the settings from these flags and `file`, the run, its table.
    pub async fn run(self, file: &ConfigFile) -> Result<(), CliError> {
        let sizes = file
            .resolve("bench", "sizes", self.sizes, "4K,1M,16M".to_string())?
            .split(',')
            .map(|x| positive_size(x).map_err(CliError::Usage))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = file.resolve("bench", "bytes", self.bytes, "256M".to_string())?;
        let cfg = DiskBenchConfig {
            sizes,
            bytes: positive_size(&bytes).map_err(CliError::Usage)?,
            inflight: file.resolve("bench", "inflight", self.inflight, 8)?.max(1),
            dir: file.resolve("bench", "dir", self.dir, std::env::temp_dir())?,
            repeat: file.resolve("bench", "repeat", self.repeat, 3)?.max(1),
        };
        let bar = progress(u64::from(cfg.repeat) * cfg.sizes.len() as u64 * VARIANTS.len() as u64);
        let rows = run(&cfg, ticker(&bar)).await;
        let header = format!(
            "bench disk: in {}, {} writers/readers, {} per size and variant, {} repetitions; writes durable when they return; reads after the page cache was dropped; medians, spread = max - min",
            cfg.dir.display(),
            cfg.inflight,
            label(cfg.bytes),
            cfg.repeat
        );
        finish("disk", &bar, rows, header, self.json)
    }
}

const BASELINE: &str = "pwrite+fdatasync";
const TIER: &str = "disk tier";
const FILES: &str = "file per object";
const VARIANTS: [&str; 3] = [BASELINE, TIER, FILES];

/// One measurement of one phase (write or read).
struct Sample {
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    p50_us: f64,
    p99_us: f64,
}

/// Runs the benchmark; `tick` is called after each variant of each size of each round.
pub async fn run(cfg: &DiskBenchConfig, mut tick: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    let root = cfg
        .dir
        .join(format!("yuebing-bench-disk-{}", std::process::id()));
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let result = measure(cfg, &root, &mut tick).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn measure(
    cfg: &DiskBenchConfig,
    root: &Path,
    tick: &mut impl FnMut(&str),
) -> Result<Vec<Row>, String> {
    let mut samples: Vec<(String, String, Sample)> = Vec::new();
    for rep in 0..cfg.repeat {
        for &size in &cfg.sizes {
            let n = (cfg.bytes / size).clamp(16, 4096);
            let value = Bytes::from(
                (0..size)
                    .map(|i| (i * 7 + rep as usize) as u8)
                    .collect::<Vec<u8>>(),
            );
            for k in 0..VARIANTS.len() {
                let variant = VARIANTS[(k + rep as usize) % VARIANTS.len()];
                let dir = root.join(format!("r{rep}-{size}-{k}"));
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let (w, r) = match variant {
                    BASELINE => raw(cfg, &dir, &value, n).await?,
                    TIER => tier(cfg, &dir, &value, n).await?,
                    _ => files(cfg, &dir, &value, n).await?,
                };
                let _ = std::fs::remove_dir_all(&dir);
                samples.push((format!("write {}", label(size)), variant.to_string(), w));
                samples.push((format!("read {}", label(size)), variant.to_string(), r));
                tick(&format!("{variant} {}", label(size)));
            }
        }
    }
    Ok(rows(&samples))
}

/// Runs `op(i)` for `i` in `0..n` from `inflight` blocking workers (worker `w` takes every
/// `inflight`-th `i` from `w`); the sample of the whole.
async fn spread<F>(inflight: usize, n: usize, size: usize, op: F) -> Result<Sample, String>
where
    F: Fn(usize) -> Result<(), String> + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let workers: Vec<_> = (0..inflight.min(n))
        .map(|w| {
            let op = op.clone();
            tokio::task::spawn_blocking(move || {
                let mut lat = Vec::new();
                for i in (w..n).step_by(inflight) {
                    let t = Instant::now();
                    op(i)?;
                    lat.push(t.elapsed());
                }
                Ok::<_, String>(lat)
            })
        })
        .collect();
    gather(workers, start, n, size).await
}

/// The sample of `n` operations of `size` bytes each, started at `start`, whose latencies the
/// `workers` give back.
async fn gather(
    workers: Vec<tokio::task::JoinHandle<Result<Vec<Duration>, String>>>,
    start: Instant,
    n: usize,
    size: usize,
) -> Result<Sample, String> {
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).map_err(|e| e.to_string())?;
    for w in workers {
        for d in w.await.map_err(|e| e.to_string())?? {
            hist.saturating_record(d.as_nanos() as u64);
        }
    }
    Ok(Sample {
        ops: n as u64,
        bytes: (n * size) as u64,
        elapsed: start.elapsed(),
        p50_us: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
    })
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

/// Drops the cached pages of every file in `dir`, so that reads go to the device.
fn drop_cache(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.is_file() {
            let f = File::open(&path).map_err(io(&path))?;
            use std::os::fd::AsRawFd;
            // SAFETY: posix_fadvise only reads its arguments; `f` is an open descriptor for
            // the whole call.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(format!("{}: posix_fadvise: error {rc}", path.display()));
            }
        }
    }
    Ok(())
}

/// The baseline: one file, `pwrite` + `fdatasync` per value; then `pread`s.
async fn raw(
    cfg: &DiskBenchConfig,
    dir: &Path,
    value: &Bytes,
    n: usize,
) -> Result<(Sample, Sample), String> {
    let path = dir.join("raw");
    let file = Arc::new(
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?,
    );
    let size = value.len();
    let (f, v, p) = (file.clone(), value.clone(), path.clone());
    let write = spread(cfg.inflight, n, size, move |i| {
        f.write_all_at(&v, (i * v.len()) as u64)
            .and_then(|()| f.sync_data())
            .map_err(io(&p))
    })
    .await?;
    drop_cache(dir)?;
    let (f, p) = (file, path);
    let read = spread(cfg.inflight, n, size, move |i| {
        let mut buf = vec![0u8; size];
        f.read_exact_at(&mut buf, (i * size) as u64).map_err(io(&p))
    })
    .await?;
    Ok((write, read))
}

/// The disk tier: `write` and `read` from `inflight` tasks.
async fn tier(
    cfg: &DiskBenchConfig,
    dir: &Path,
    value: &Bytes,
    n: usize,
) -> Result<(Sample, Sample), String> {
    let size = value.len();
    let capacity = (n * (size + 4096)) as u64 * 2 + (64 << 20);
    let tier_dir = dir.join("tier");
    let rt = tokio::runtime::Handle::current();
    let (tier, _) = tokio::task::spawn_blocking(move || {
        DiskTier::open(DiskTierConfig::new(tier_dir, capacity), &rt)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    let tier = Arc::new(tier);
    let workers = |read: bool| -> Vec<tokio::task::JoinHandle<Result<Vec<Duration>, String>>> {
        (0..cfg.inflight.min(n))
            .map(|w| {
                let (tier, value, inflight) = (tier.clone(), value.clone(), cfg.inflight);
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    for i in (w..n).step_by(inflight) {
                        let key = format!("k{i}");
                        let t = Instant::now();
                        if read {
                            let (_, v) = tier.read(&key).await.map_err(|e| e.to_string())?;
                            if v.len() != value.len() {
                                return Err(format!("{key}: read {} bytes", v.len()));
                            }
                        } else {
                            tier.write(&key, Tag::default(), value.clone())
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        lat.push(t.elapsed());
                    }
                    Ok(lat)
                })
            })
            .collect()
    };
    let start = Instant::now();
    let write = gather(workers(false), start, n, size).await?;
    drop_cache(&dir.join("tier"))?;
    let start = Instant::now();
    let read = gather(workers(true), start, n, size).await?;
    if let Ok(tier) = Arc::try_unwrap(tier) {
        tokio::task::spawn_blocking(move || tier.close())
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok((write, read))
}

/// A file per object: created, written, `fsync`ed with its directory; then opened and read.
async fn files(
    cfg: &DiskBenchConfig,
    dir: &Path,
    value: &Bytes,
    n: usize,
) -> Result<(Sample, Sample), String> {
    let size = value.len();
    let (d, v) = (dir.to_path_buf(), value.clone());
    let write = spread(cfg.inflight, n, size, move |i| {
        let path = d.join(format!("k{i}"));
        let f = File::create(&path).map_err(io(&path))?;
        f.write_all_at(&v, 0)
            .and_then(|()| f.sync_all())
            .and_then(|()| File::open(&d)?.sync_all())
            .map_err(io(&path))
    })
    .await?;
    drop_cache(dir)?;
    let d = dir.to_path_buf();
    let read = spread(cfg.inflight, n, size, move |i| {
        let path = d.join(format!("k{i}"));
        let mut buf = vec![0u8; size];
        File::open(&path)
            .and_then(|f| f.read_exact_at(&mut buf, 0))
            .map_err(io(&path))
    })
    .await?;
    Ok((write, read))
}

/// Rows: each variant's GB/s, p50 and p99 per case, the rates against the baseline's.
fn rows(samples: &[(String, String, Sample)]) -> Vec<Row> {
    let mut cases: Vec<&str> = Vec::new();
    for (case, _, _) in samples {
        if !cases.contains(&case.as_str()) {
            cases.push(case);
        }
    }
    let mut out = Vec::new();
    for case in cases {
        let stat = |variant: &str, f: &dyn Fn(&Sample) -> f64| {
            let of: Vec<f64> = samples
                .iter()
                .filter(|(c, v, _)| c == case && v == variant)
                .map(|(_, _, s)| f(s))
                .collect();
            median_spread(&of)
        };
        let gbps = |s: &Sample| s.bytes as f64 / 1e9 / s.elapsed.as_secs_f64();
        let base = stat(BASELINE, &gbps).0;
        for variant in VARIANTS {
            let rate = Row::new(case, variant, "GB/s", stat(variant, &gbps));
            out.push(match variant {
                BASELINE => rate,
                _ => rate.against(BASELINE, base),
            });
            let ops = |s: &Sample| s.ops as f64 / s.elapsed.as_secs_f64();
            out.push(Row::new(case, variant, "ops/s", stat(variant, &ops)));
            out.push(Row::new(
                case,
                variant,
                "p50_us",
                stat(variant, &|s| s.p50_us),
            ));
            out.push(Row::new(
                case,
                variant,
                "p99_us",
                stat(variant, &|s| s.p99_us),
            ));
        }
    }
    out
}
