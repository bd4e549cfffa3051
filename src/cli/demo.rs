//! `yuebing demo`, the main job on the embedded default: a master, three `yuebing node`
//! processes on 127.0.0.1, 1000 objects of 4 KiB … 16 MiB (log-uniform) put with 2 replicas by
//! one client, read back and checked by another, one node SIGKILLed, everything read again.
//! With `--ha` the story runs on elected masters instead ([`super::demo_ha`]); the phases and
//! the summary table here are shared with it.

use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use yuebing_rpc::{Endpoint, Size, Token};
use yuebing_store::master::{MasterServerConfig, PutConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

use super::child::ChildProcess;

/// Flags of `yuebing demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Node processes (at least 1).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    pub nodes: usize,
    /// Store space per node.
    #[arg(long, default_value = "2G")]
    pub store_size: String,
    /// Objects to put.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Smallest object.
    #[arg(long, default_value = "4K")]
    pub min: String,
    /// Largest object.
    #[arg(long, default_value = "16M")]
    pub max: String,
    /// Replicas per object, on distinct nodes (at least 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: u32,
    /// Operations in flight per client.
    #[arg(long, default_value_t = 4)]
    pub inflight: usize,
    /// Force a transport between processes: tcp, shm or rdma (default: chosen per peer).
    #[arg(long)]
    pub transport: Option<String>,
    /// High availability: etcd, three elected masters (`yuebing master --etcd`) and the nodes;
    /// the objects are put, the leading master is SIGKILLed, the failover timed (kill to the
    /// first put a new leader takes) and every object read back. Needs the `etcd` binary
    /// (`apt-get install etcd-server`) and a build with `--features etcd`.
    #[arg(long)]
    pub ha: bool,
    /// With --ha: the masters' election TTL, ms (a dead leader is replaced about this long
    /// after it died; etcd grants at least about 2 s).
    #[arg(long, default_value_t = 2000)]
    pub election_ttl_ms: u64,
}

/// A count of at least one (`--nodes`).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// What one phase measured.
pub(crate) struct Phase {
    name: String,
    ops: u64,
    /// Operations that failed.
    pub(crate) errors: u64,
    /// What the first failed operation said.
    first_error: Option<String>,
    bytes: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
}

impl Phase {
    fn row(&self) -> String {
        let q = |p: f64| self.hist.value_at_quantile(p) as f64 / 1000.0;
        format!(
            "{:<26} {:>6} {:>6} {:>9.2} {:>8.3} {:>10.2} {:>10.2}",
            self.name,
            self.ops,
            self.errors,
            self.bytes as f64 / 1e9,
            self.bytes as f64 / 1e9 / self.elapsed.as_secs_f64(),
            q(0.5),
            q(0.99)
        )
    }
}

/// Object `i`'s size and contents (deterministic, so a reader can check them).
fn value(i: usize, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    fastrand::Rng::with_seed(i as u64 * 7919 + 1).fill(&mut v);
    v
}

/// `n` object sizes between `min` and `max`, log-uniform (the same for every run).
fn sizes(n: usize, min: usize, max: usize) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(42);
    let (lo, hi) = ((min as f64).ln(), (max as f64).ln());
    (0..n)
        .map(|_| (lo + rng.f64() * (hi - lo)).exp().round() as usize)
        .map(|s| s.clamp(min, max))
        .collect()
}

async fn phase<F, Fut>(name: &str, n: usize, inflight: usize, bar: &ProgressBar, op: F) -> Phase
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<u64, String>>,
{
    bar.set_message(name.to_string());
    let mut hist = Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid bounds");
    let (mut bytes, mut errors, mut first_error) = (0, 0, None);
    let start = Instant::now();
    let mut results = futures::stream::iter(0..n)
        .map(|i| {
            let f = op(i);
            async move {
                let t = Instant::now();
                (f.await, t.elapsed())
            }
        })
        .buffer_unordered(inflight.max(1));
    while let Some((r, took)) = results.next().await {
        match r {
            Ok(b) => bytes += b,
            Err(e) => {
                errors += 1;
                bar.println(format!("  {name}: {e}"));
                first_error.get_or_insert(e);
            }
        }
        hist.saturating_record(took.as_micros() as u64);
        bar.inc(1);
    }
    Phase {
        name: name.into(),
        ops: n as u64,
        errors,
        first_error,
        bytes,
        elapsed: start.elapsed(),
        hist,
    }
}

/// A line per phase that saw errors: how many, and the first.
pub(crate) fn failures(phases: &[&Phase]) -> String {
    phases
        .iter()
        .filter_map(|p| {
            let first = p.first_error.as_deref()?;
            Some(format!(
                "{}: {} errors, the first: {first}\n",
                p.name, p.errors
            ))
        })
        .collect()
}

/// An object size the demo draws from (`--min`, `--max`): positive, in this machine's memory.
fn object_size(flag: &str, text: &str) -> Result<usize, String> {
    text.parse::<Size>()
        .and_then(Size::positive)
        .and_then(Size::to_usize)
        .map_err(|e| format!("{flag}: {e}"))
}

/// The objects of one demo run: their sizes, and how to put and check them.
pub(crate) struct Objects {
    /// Each object's size, by index.
    pub(crate) sizes: Vec<usize>,
    /// Operations in flight per client.
    pub(crate) inflight: usize,
}

impl Objects {
    /// The objects `args` asks for.
    pub(crate) fn from_args(args: &DemoArgs) -> Result<Objects, String> {
        let (min, max) = (
            object_size("--min", &args.min)?,
            object_size("--max", &args.max)?,
        );
        if min > max {
            return Err(format!(
                "--min {} is above --max {}: sizes are drawn between the two",
                args.min, args.max
            ));
        }
        Ok(Objects {
            sizes: sizes(args.objects, min, max),
            inflight: args.inflight,
        })
    }

    /// Object `i`'s key.
    fn key(i: usize) -> String {
        format!("demo/object-{i:05}")
    }

    /// A line saying what is put: count, total size, replicas.
    pub(crate) fn describe(&self, replicas: u32) -> String {
        let total: usize = self.sizes.iter().sum();
        format!(
            "{} objects, {:.2} GB, {replicas} replicas each",
            self.sizes.len(),
            total as f64 / 1e9
        )
    }

    /// Puts every object through `writer`.
    pub(crate) async fn put_all(
        &self,
        writer: &Client,
        opts: &Options,
        bar: &ProgressBar,
    ) -> Phase {
        phase("put", self.sizes.len(), self.inflight, bar, |i| {
            let size = self.sizes[i];
            async move {
                let v = value(i, size);
                writer
                    .put(&Objects::key(i), &v, opts)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(size as u64)
            }
        })
        .await
    }

    /// Reads every object through `reader` and checks its size and checksum.
    pub(crate) async fn check_all(
        &self,
        name: &str,
        reader: &Client,
        opts: &Options,
        bar: &ProgressBar,
    ) -> Phase {
        phase(name, self.sizes.len(), self.inflight, bar, |i| async move {
            let key = Objects::key(i);
            let got = reader
                .get(&key, opts)
                .await
                .map_err(|e| format!("{key}: {e}"))?;
            let want = crc32fast::hash(&value(i, self.sizes[i]));
            if got.len() != self.sizes[i] || crc32fast::hash(&got) != want {
                return Err(format!("{key}: checksum mismatch"));
            }
            Ok(got.len() as u64)
        })
        .await
    }
}

/// The summary table: a line per phase.
pub(crate) fn table(phases: &[&Phase]) -> String {
    let mut out = format!(
        "{:<26} {:>6} {:>6} {:>9} {:>8} {:>10} {:>10}\n",
        "phase", "ops", "errors", "GB", "GB/s", "p50_ms", "p99_ms"
    );
    for p in phases {
        out.push_str(&p.row());
        out.push('\n');
    }
    out
}

/// Runs the demo (with `--ha`, [`super::demo_ha::run`]); prints progress on `bar` and returns
/// the summary text, or why it failed. With a `token`, every connection of the demo (its
/// master, its nodes, its clients) presents and requires it.
pub async fn run(args: DemoArgs, token: Option<Token>, bar: ProgressBar) -> Result<String, String> {
    if args.ha {
        return super::demo_ha::run(args, token, bar).await;
    }
    let objects = Objects::from_args(&args)?;
    let ep: Endpoint = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    let mut master_cfg = MasterServerConfig::default();
    master_cfg.rpc.token = token.clone();
    let master = RunningMaster::start(master_cfg, &ep)
        .await
        .map_err(|e| e.to_string())?;
    let addr = master.local_endpoint().clone();
    bar.println(format!(
        "master on {addr}; starting {} nodes of {} each",
        args.nodes, args.store_size
    ));
    let mut nodes = Vec::with_capacity(args.nodes);
    for _ in 0..args.nodes {
        let transport = args.transport.as_deref();
        nodes.push(ChildProcess::node(&addr, &args.store_size, transport, token.as_ref()).await?);
    }
    let client_cfg = || ClientConfig {
        masters: vec![addr.clone()],
        token: token.clone(),
        ..ClientConfig::default()
    };
    let writer = Client::start(client_cfg())
        .await
        .map_err(|e| e.to_string())?;
    let reader = Client::start(client_cfg())
        .await
        .map_err(|e| e.to_string())?;
    bar.println(objects.describe(args.replicas));
    bar.set_length(3 * args.objects as u64);
    let put_opts = Options::put(PutConfig {
        replica_num: args.replicas,
        ..PutConfig::default()
    });
    let puts = objects.put_all(&writer, &put_opts, &bar).await;
    let read = Options::default();
    let gets = objects
        .check_all("get (second client)", &reader, &read, &bar)
        .await;
    let victim = nodes.first_mut().ok_or("no nodes")?;
    let victim_name = victim.announced.clone();
    victim.kill();
    bar.println(format!("killed node {victim_name} (SIGKILL)"));
    let after = objects
        .check_all("get after the kill", &reader, &read, &bar)
        .await;
    let stats = reader
        .stats(&Options::default())
        .await
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let mut out = format!(
        "yuebing demo: master + {} nodes x {} on 127.0.0.1; {} objects {}..{} (log-uniform), {} replicas\n",
        args.nodes, args.store_size, args.objects, args.min, args.max, args.replicas
    );
    out.push_str(&table(&[&puts, &gets, &after]));
    out.push_str(&format!(
        "master: {} objects, {:.2} of {:.2} GB used, {} evicted; node {victim_name} killed, every object {}\n",
        stats.objects,
        stats.bytes_used as f64 / 1e9,
        stats.bytes_capacity as f64 / 1e9,
        stats.evicted,
        if after.errors == 0 { "still readable from its other replica" } else { "NOT all readable" },
    ));
    drop(nodes);
    master.shutdown(Duration::from_secs(1)).await;
    if puts.errors + gets.errors + after.errors > 0 || stats.evicted > 0 {
        let why = failures(&[&puts, &gets, &after]);
        return Err(format!("the demo saw failures:\n{out}{why}"));
    }
    Ok(out)
}
