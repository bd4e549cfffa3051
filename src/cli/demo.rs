//! `yuebing demo`, the main job on the embedded default: a master, three `yuebing node`
//! processes on 127.0.0.1, 1000 objects of 4 KiB … 16 MiB (log-uniform) put with 2 replicas by
//! one client, read back and checked by another, one node SIGKILLed, everything read again.

use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{MasterServerConfig, PutConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

use super::child::ChildProcess;
use crate::bench::transfer::parse_size;

/// Flags of `yuebing demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Node processes.
    #[arg(long, default_value_t = 3)]
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
    /// Replicas per object, on distinct nodes.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// Operations in flight per client.
    #[arg(long, default_value_t = 4)]
    pub inflight: usize,
    /// Force a transport between processes: tcp or shm (default: chosen per peer).
    #[arg(long)]
    pub transport: Option<String>,
}

/// What one phase measured.
struct Phase {
    name: String,
    ops: u64,
    errors: u64,
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
    let (mut bytes, mut errors) = (0, 0);
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
            }
        }
        hist.saturating_record(took.as_micros() as u64);
        bar.inc(1);
    }
    Phase {
        name: name.into(),
        ops: n as u64,
        errors,
        bytes,
        elapsed: start.elapsed(),
        hist,
    }
}

/// Runs the demo; prints progress on `bar` and returns the summary text, or why it failed.
/// With a `token`, every connection of the demo (its master, its nodes, its clients) presents
/// and requires it.
pub async fn run(args: DemoArgs, token: Option<Token>, bar: ProgressBar) -> Result<String, String> {
    let (min, max) = (parse_size(&args.min)?, parse_size(&args.max)?);
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
    let sizes = sizes(args.objects, min, max);
    let total: usize = sizes.iter().sum();
    bar.println(format!(
        "{} objects, {:.2} GB, {} replicas each",
        args.objects,
        total as f64 / 1e9,
        args.replicas
    ));
    bar.set_length(3 * args.objects as u64);
    let put_opts = Options::put(PutConfig {
        replica_num: args.replicas,
        ..PutConfig::default()
    });
    let key = |i: usize| format!("demo/object-{i:05}");
    let puts = phase("put", args.objects, args.inflight, &bar, |i| {
        let (w, opts, size) = (&writer, &put_opts, sizes[i]);
        async move {
            let v = value(i, size);
            w.put(&key(i), &v, opts).await.map_err(|e| e.to_string())?;
            Ok(size as u64)
        }
    })
    .await;
    let check = |name: &'static str| {
        let reader = &reader;
        let sizes = &sizes;
        phase(
            name,
            args.objects,
            args.inflight,
            &bar,
            move |i| async move {
                let got = reader
                    .get(&key(i), &Options::default())
                    .await
                    .map_err(|e| format!("{}: {e}", key(i)))?;
                let want = crc32fast::hash(&value(i, sizes[i]));
                if got.len() != sizes[i] || crc32fast::hash(&got) != want {
                    return Err(format!("{}: checksum mismatch", key(i)));
                }
                Ok(got.len() as u64)
            },
        )
    };
    let gets = check("get (second client)").await;
    let victim = nodes.first_mut().ok_or("no nodes")?;
    let victim_name = victim.announced.clone();
    victim.kill();
    bar.println(format!("killed node {victim_name} (SIGKILL)"));
    let after = check("get after the kill").await;
    let stats = reader
        .stats(&Options::default())
        .await
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let mut out = String::new();
    out.push_str(&format!(
        "yuebing demo: master + {} nodes x {} on 127.0.0.1; {} objects {}..{} (log-uniform), {} replicas\n",
        args.nodes, args.store_size, args.objects, args.min, args.max, args.replicas
    ));
    out.push_str(&format!(
        "{:<26} {:>6} {:>6} {:>9} {:>8} {:>10} {:>10}\n",
        "phase", "ops", "errors", "GB", "GB/s", "p50_ms", "p99_ms"
    ));
    for p in [&puts, &gets, &after] {
        out.push_str(&p.row());
        out.push('\n');
    }
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
        return Err(format!("the demo saw failures:\n{out}"));
    }
    Ok(out)
}
