//! `yuebing bench master`: the store master's metadata rates and memory.
//!
//! With `--objects` (default 1M) one-replica objects resident, 64-byte keys:
//! - puts (put_start + put_end = one put) and get_replica_list per second on the core alone (one
//!   thread), beside a std `HashMap` insert and lookup of the same keys, interleaved; each side
//!   does the same fixed work (objects/2 new keys, objects/2 lookups), so neither table crosses a
//!   resize inside the timed part;
//! - the same two calls over RPC (an in-process master on 127.0.0.1, `--inflight` callers);
//! - master memory per object: the RSS growth while loading the objects, divided by their count;
//! - puts per second over RPC with a data directory (group-committed log) against without.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use yuebing_rpc::Endpoint;
use yuebing_store::master::{
    ClientId, Master, MasterClient, MasterConfig, MasterServerConfig, MountSpec, PutConfig,
    RunningMaster,
};

use super::args::BenchCommon;
use super::command::{finish, ticker};
use super::harness::{closed_loop, median_spread, Sample};
use super::report::Row;
use crate::cli::{progress, CliError};
use crate::config::ConfigFile;

/// Flags of `yuebing bench master`.
#[derive(Args, Debug)]
pub struct BenchMasterArgs {
    /// Objects resident while measuring [default: 1000000; config: bench.objects].
    #[arg(long, env = "YUEBING_BENCH_OBJECTS")]
    pub objects: Option<usize>,
    /// Concurrent callers over RPC [default: 32; config: bench.inflight].
    #[arg(long, env = "YUEBING_BENCH_INFLIGHT")]
    pub inflight: Option<usize>,
    /// `--repeat`, `--duration-ms`, `--warmup-ms`, `--json`.
    #[command(flatten)]
    pub common: BenchCommon,
}

impl BenchMasterArgs {
    /// `yuebing bench master`: the settings from these flags and `file`, the run, its table.
    pub async fn run(self, file: &ConfigFile) -> Result<(), CliError> {
        let (repeat, duration, warmup) = self.common.resolve(file)?;
        let cfg = MasterBenchConfig {
            objects: file.resolve("bench", "objects", self.objects, 1_000_000)?,
            inflight: file.resolve("bench", "inflight", self.inflight, 32)?.max(1),
            duration,
            warmup,
            repeat,
        };
        let bar = progress(2 + 3 * u64::from(cfg.repeat));
        let rows = run(&cfg, ticker(&bar)).await;
        let header = format!(
            "bench master: {} objects resident, 64-byte keys, {} repetitions; core: objects/2 puts and gets each, rpc: {:?} with {} callers; medians, spread = max - min",
            cfg.objects, cfg.repeat, cfg.duration, cfg.inflight
        );
        finish("master", &bar, rows, header, self.common.json)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct MasterBenchConfig {
    /// Objects resident while measuring.
    pub objects: usize,
    /// Concurrent callers over RPC.
    pub inflight: usize,
    /// Measured time per measurement.
    pub duration: Duration,
    /// Unmeasured warm-up before each RPC measurement.
    pub warmup: Duration,
    /// Repetitions.
    pub repeat: u32,
}

const VALUE: u64 = 4096;
const CLIENT: ClientId = ClientId(1);

/// The 64-byte key number `i`.
fn key(i: usize) -> String {
    format!("kvcache/model-x/layer/{i:042}")
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

fn space() -> Vec<MountSpec> {
    vec![MountSpec {
        node: "127.0.0.1:1".into(),
        base: 1 << 40,
        len: 1 << 44,
    }]
}

fn core_with(keys: &[String]) -> Master {
    let mut m = Master::new(MasterConfig::default(), false);
    m.mount(CLIENT, 1, &space()).expect("mount");
    let cfg = PutConfig::default();
    for k in keys {
        m.put_start(CLIENT, 1, k, VALUE, &cfg, yuebing_store::Write::Put)
            .expect("put_start");
        m.put_end(CLIENT, 1, k).expect("put_end");
    }
    m
}

/// Runs `op` over every key; ops per second.
fn timed(keys: &[String], mut op: impl FnMut(&str)) -> f64 {
    let start = Instant::now();
    keys.iter().for_each(|k| op(k));
    keys.len() as f64 / start.elapsed().as_secs_f64()
}

/// One repetition of the single-thread comparison: (core put, map insert, core get, map get).
/// Each side does the same fixed work: `fresh` new keys (half the resident count, so neither
/// table crosses a resize in the timed part) and as many lookups of random resident keys.
fn core_round(resident: &[String], fresh: &[String]) -> [f64; 4] {
    let cfg = PutConfig::default();
    let mut m = core_with(resident);
    let mut now = 2;
    let put = timed(fresh, |k| {
        now += 1;
        let _ = m.put_start(
            CLIENT,
            now / 1024,
            k,
            VALUE,
            &cfg,
            yuebing_store::Write::Put,
        );
        let _ = m.put_end(CLIENT, now / 1024, k);
    });
    let mut rng = fastrand::Rng::with_seed(7);
    let probes: Vec<String> = (0..fresh.len())
        .map(|_| resident[rng.usize(..resident.len())].clone())
        .collect();
    let get = timed(&probes, |k| {
        let _ = std::hint::black_box(m.get_replica_list(now / 1024, k));
    });
    drop(m);
    let mut map: HashMap<String, u64> = resident.iter().map(|k| (k.clone(), VALUE)).collect();
    let insert = timed(fresh, |k| {
        map.insert(k.to_string(), VALUE);
    });
    let lookup = timed(&probes, |k| {
        std::hint::black_box(map.get(k));
    });
    [put, insert, get, lookup]
}

async fn start_master(data_dir: Option<std::path::PathBuf>) -> Result<RunningMaster, String> {
    let cfg = MasterServerConfig {
        data_dir,
        ..MasterServerConfig::default()
    };
    let ep: Endpoint = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    RunningMaster::start(cfg, &ep)
        .await
        .map_err(|e| e.to_string())
}

/// Closed-loop puts of fresh keys over RPC.
async fn rpc_puts(
    c: &MasterClient,
    inflight: usize,
    warmup: Duration,
    duration: Duration,
    tag: &str,
) -> Result<Sample, String> {
    let next = Arc::new(AtomicU64::new(0));
    let (c, tag) = (c.clone(), tag.to_string());
    closed_loop(inflight, warmup, duration, move |_| {
        let (c, next, tag) = (c.clone(), next.clone(), tag.clone());
        async move {
            let k = format!("{tag}/{:040}", next.fetch_add(1, Ordering::Relaxed));
            c.put_start(&k, VALUE, &PutConfig::default(), yuebing_store::Write::Put)
                .await
                .map_err(|e| e.to_string())?;
            c.put_end(&k).await.map_err(|e| e.to_string())
        }
    })
    .await
}

async fn rpc_gets(
    c: &MasterClient,
    resident: usize,
    cfg: &MasterBenchConfig,
) -> Result<Sample, String> {
    let c = c.clone();
    closed_loop(cfg.inflight, cfg.warmup, cfg.duration, move |_| {
        let c = c.clone();
        async move {
            let k = key(fastrand::usize(..resident));
            c.get_replica_list(&k)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// Pings the master every second, as a store client does, so the bench's client (and its
/// store space) is not expired; stops when dropped.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    fn start(c: &MasterClient) -> Heartbeat {
        let c = c.clone();
        Heartbeat(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = c.ping().await;
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Loads `keys` through batch calls (1000 a call).
async fn preload(c: &MasterClient, keys: &[String]) -> Result<(), String> {
    for chunk in keys.chunks(1000) {
        let items: Vec<_> = chunk.iter().map(|k| (k.clone(), VALUE)).collect();
        for r in c
            .batch_put_start(items, &PutConfig::default(), yuebing_store::Write::Put)
            .await
            .map_err(|e| e.to_string())?
        {
            r.map_err(|e| e.to_string())?;
        }
        for r in c
            .batch_put_end(chunk.to_vec())
            .await
            .map_err(|e| e.to_string())?
        {
            r.map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Runs the benchmark; `tick` is called after each measurement.
pub async fn run(cfg: &MasterBenchConfig, mut tick: impl FnMut(&str)) -> Result<Vec<Row>, String> {
    let n = cfg.objects.max(1);
    let resident: Vec<String> = (0..n).map(key).collect();
    // Memory first, in a fresh heap: the RSS growth of loading the objects into a core.
    let before = rss_bytes().ok_or("cannot read /proc/self/statm")?;
    let core = core_with(&resident);
    let after = rss_bytes().ok_or("cannot read /proc/self/statm")?;
    let per_object = after.saturating_sub(before) as f64 / n as f64;
    drop(core);
    tick("memory");
    let fresh: Vec<String> = (n..n + n.div_ceil(2)).map(key).collect();
    let (resident, fresh) = (Arc::new(resident), Arc::new(fresh));
    // The single-thread comparison first, while the process holds nothing else.
    let mut core_s: Vec<[f64; 4]> = Vec::new();
    for _ in 0..cfg.repeat {
        let (r, f) = (resident.clone(), fresh.clone());
        let s = tokio::task::spawn_blocking(move || core_round(&r, &f))
            .await
            .map_err(|e| e.to_string())?;
        core_s.push(s);
        tick("core");
    }
    drop(fresh);
    let mut rpc_put: Vec<Sample> = Vec::new();
    let mut rpc_get: Vec<Sample> = Vec::new();
    let mut mem_put: Vec<Sample> = Vec::new();
    let mut disk_put: Vec<Sample> = Vec::new();
    let server = start_master(None).await?;
    let client = MasterClient::new(server.local_endpoint().clone(), CLIENT);
    client.mount(space()).await.map_err(|e| e.to_string())?;
    let _alive = Heartbeat::start(&client);
    preload(&client, &resident).await?;
    tick("rpc preload");
    for rep in 0..cfg.repeat {
        let tag = format!("p{rep}");
        rpc_put.push(rpc_puts(&client, cfg.inflight, cfg.warmup, cfg.duration, &tag).await?);
        rpc_get.push(rpc_gets(&client, n, cfg).await?);
        tick("rpc");
        for with_dir in [false, true] {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let m = start_master(with_dir.then(|| dir.path().to_path_buf())).await?;
            let c = MasterClient::new(m.local_endpoint().clone(), CLIENT);
            c.mount(space()).await.map_err(|e| e.to_string())?;
            let _alive = Heartbeat::start(&c);
            let s = rpc_puts(&c, cfg.inflight, cfg.warmup, cfg.duration, "d").await?;
            if with_dir {
                disk_put.push(s)
            } else {
                mem_put.push(s)
            }
            m.shutdown(Duration::from_secs(1)).await;
        }
        tick("data dir");
    }
    server.shutdown(Duration::from_secs(1)).await;
    Ok(rows(
        n, per_object, &core_s, &rpc_put, &rpc_get, &mem_put, &disk_put,
    ))
}

fn rows(
    n: usize,
    per_object: f64,
    core: &[[f64; 4]],
    rpc_put: &[Sample],
    rpc_get: &[Sample],
    mem_put: &[Sample],
    disk_put: &[Sample],
) -> Vec<Row> {
    let col = |i: usize| median_spread(&core.iter().map(|s| s[i]).collect::<Vec<_>>());
    let rate = |v: &[Sample]| median_spread(&v.iter().map(Sample::ops_per_sec).collect::<Vec<_>>());
    let lat =
        |v: &[Sample], f: fn(&Sample) -> f64| median_spread(&v.iter().map(f).collect::<Vec<_>>());
    let million = if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        n.to_string()
    };
    let put_case = format!("put (start+end), {million} resident");
    let get_case = format!("get_replica_list, {million} resident");
    let mut out = vec![
        Row::new(&put_case, "core (1 thread)", "ops/s", col(0))
            .against("std-hashmap-insert", col(1).0),
        Row::new(&put_case, "std-hashmap-insert", "ops/s", col(1)),
        Row::new(&get_case, "core (1 thread)", "ops/s", col(2))
            .against("std-hashmap-lookup", col(3).0),
        Row::new(&get_case, "std-hashmap-lookup", "ops/s", col(3)),
    ];
    for (case, v) in [(&put_case, rpc_put), (&get_case, rpc_get)] {
        out.push(Row::new(case, "rpc", "ops/s", rate(v)));
        out.push(Row::new(case, "rpc", "p50_us", lat(v, |s| s.p50_us)));
        out.push(Row::new(case, "rpc", "p99_us", lat(v, |s| s.p99_us)));
    }
    let case = "put over rpc, empty master";
    out.push(
        Row::new(case, "rpc+data-dir", "ops/s", rate(disk_put))
            .against("rpc-in-memory", rate(mem_put).0),
    );
    out.push(Row::new(case, "rpc-in-memory", "ops/s", rate(mem_put)));
    out.push(Row::new(
        case,
        "rpc+data-dir",
        "p50_us",
        lat(disk_put, |s| s.p50_us),
    ));
    out.push(Row::new(
        case,
        "rpc-in-memory",
        "p50_us",
        lat(mem_put, |s| s.p50_us),
    ));
    out.push(Row::new(
        &format!("memory, {million} one-replica objects"),
        "core",
        "bytes/object",
        (per_object, 0.0),
    ));
    out
}
