//! The three clusters of `bench ha` (etcd log, local log, none) and the timed put load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use yuebing_rpc::Endpoint;
use yuebing_store::{Client, ClientConfig, Options};

use super::{HaBenchConfig, HA_MASTERS, VARIANTS};
use crate::bench::harness::{closed_loop, median_spread, Sample};
use crate::bench::report::Row;
use crate::bench::transfer::size_label;
use crate::cli::child::ChildProcess;
use crate::cli::local_ha::LocalHa;

/// Flags of every master. A read-lease TTL of 1 s: after a promotion (the elected leader) or
/// a start, space freed is not reused for one lease TTL (10 s by default), and the objects each
/// measurement removes must be reusable by the next one. The puts take no read leases.
const MASTER_FLAGS: &[&str] = &["--lease-ttl-ms", "1000"];

/// One cluster's node and client (and, for a single master, its process and directory).
struct Setup {
    // Dropped in this order: the client, the node, the master, its directory.
    client: Client,
    _node: ChildProcess,
    _master: Option<ChildProcess>,
    _dir: Option<TempDir>,
}

/// The three clusters, in the order of [`VARIANTS`].
pub(super) struct Setups {
    setups: Vec<Setup>,
    /// The elected masters and their etcd (the first setup's masters).
    pub(super) ha: LocalHa,
}

impl Setups {
    /// Starts etcd and the elected masters, the two single masters, a node and a client each.
    pub(super) async fn start(cfg: &HaBenchConfig) -> Result<Setups, String> {
        let token = cfg.token.clone();
        let ha = LocalHa::start(HA_MASTERS, "bench", cfg.ttl, MASTER_FLAGS, token.clone()).await?;
        ha.leader(elected_within(cfg)).await?;
        let mut setups = vec![Setup::start(cfg, ha.endpoints(), None, None).await?];
        let dir = tempfile::Builder::new()
            .prefix("yuebing-bench-ha-")
            .tempdir()
            .map_err(|e| format!("no temp directory: {e}"))?;
        let data_dir = dir.path().to_string_lossy().into_owned();
        let (local, at) = ChildProcess::master(
            &[MASTER_FLAGS, &["--data-dir", &data_dir]].concat(),
            token.as_ref(),
        )
        .await?;
        setups.push(Setup::start(cfg, vec![at], Some(local), Some(dir)).await?);
        let (none, at) = ChildProcess::master(MASTER_FLAGS, token.as_ref()).await?;
        setups.push(Setup::start(cfg, vec![at], Some(none), None).await?);
        Ok(Setups { setups, ha })
    }

    /// The client of the etcd setup.
    pub(super) fn ha_client(&self) -> &Client {
        &self.setups[0].client
    }

    /// Closed-loop puts of fresh keys of `size` bytes on setup `v` (repetition `rep`); the
    /// objects are removed afterwards, untimed.
    pub(super) async fn measure_puts(
        &self,
        v: usize,
        size: usize,
        cfg: &HaBenchConfig,
        rep: u32,
    ) -> Result<Sample, String> {
        let client = &self.setups[v].client;
        let tag = format!("{}/{}/{rep}", VARIANTS[v], size_label(size));
        let sample = put_load(client, size, cfg.inflight, cfg.warmup, cfg.duration, &tag)
            .await
            .map_err(|e| format!("{}: {e}", VARIANTS[v]))?;
        client
            .remove_all(true, &Options::default())
            .await
            .map_err(|e| format!("{}: removing the objects: {e}", VARIANTS[v]))?;
        Ok(sample)
    }
}

/// How long a leader may take to be elected or replaced: generous, several TTLs.
pub(super) fn elected_within(cfg: &HaBenchConfig) -> Duration {
    5 * cfg.ttl + Duration::from_secs(10)
}

impl Setup {
    async fn start(
        cfg: &HaBenchConfig,
        masters: Vec<Endpoint>,
        master: Option<ChildProcess>,
        dir: Option<TempDir>,
    ) -> Result<Setup, String> {
        let token = cfg.token.as_ref();
        let node = ChildProcess::node_of(&masters, &cfg.store_size, None, token).await?;
        let client = Client::start(ClientConfig {
            masters,
            token: cfg.token.clone(),
            ..ClientConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
        // One put before any timing: the node is mounted and the client knows the leader, so
        // a measurement's window is not spent on a cluster that does not serve yet.
        let probe = Options::default();
        let first = match client.put("bench-ha-probe", b"probe", &probe).await {
            Ok(()) => client.remove("bench-ha-probe", true, &probe).await,
            Err(e) => Err(e),
        };
        first.map_err(|e| format!("the cluster does not serve a first put: {e}"))?;
        Ok(Setup {
            client,
            _node: node,
            _master: master,
            _dir: dir,
        })
    }
}

/// Puts fresh keys `TAG/N` of `size` bytes through `client` from `inflight` tasks for
/// `duration` after `warmup`; the first error ends it.
pub(super) async fn put_load(
    client: &Client,
    size: usize,
    inflight: usize,
    warmup: Duration,
    duration: Duration,
    tag: &str,
) -> Result<Sample, String> {
    let value = Arc::new(vec![0x5a_u8; size]);
    let next = Arc::new(AtomicU64::new(0));
    let (client, tag) = (client.clone(), tag.to_string());
    let sample = closed_loop(inflight, warmup, duration, move |_| {
        let (client, value, next) = (client.clone(), value.clone(), next.clone());
        let key = format!("{tag}/{}", next.fetch_add(1, Ordering::Relaxed));
        async move {
            client
                .put(&key, &value, &Options::default())
                .await
                .map_err(|e| match e {
                    yuebing_store::Error::NoAvailableHandle { .. } => format!(
                        "put {key}: {e} (a measurement must fit in a node's store space: \
                         raise --store-size or shorten --duration-ms)"
                    ),
                    e => format!("put {key}: {e}"),
                })
        }
    })
    .await?;
    match sample.ops {
        0 => Err(format!(
            "no put of {size} B ended within the {} ms window: raise --duration-ms",
            duration.as_millis()
        )),
        _ => Ok(sample),
    }
}

/// The rows of one size: puts per second of each variant against `none`, and latencies.
/// `samples[v]` holds variant `v`'s repetitions.
pub(super) fn put_rows(cfg: &HaBenchConfig, size: usize, samples: &[Vec<Sample>]) -> Vec<Row> {
    let case = format!("put {}, {} in flight", size_label(size), cfg.inflight);
    let stat = |v: usize, f: fn(&Sample) -> f64| {
        median_spread(&samples[v].iter().map(f).collect::<Vec<_>>())
    };
    let baseline = VARIANTS.len() - 1;
    let base = stat(baseline, Sample::ops_per_sec).0;
    let mut rows = Vec::new();
    for (v, name) in VARIANTS.iter().enumerate() {
        let row = Row::new(&case, name, "ops/s", stat(v, Sample::ops_per_sec));
        rows.push(match v == baseline {
            true => row,
            false => row.against(VARIANTS[baseline], base),
        });
    }
    for (metric, f) in [
        ("p50_us", (|s: &Sample| s.p50_us) as fn(&Sample) -> f64),
        ("p99_us", |s: &Sample| s.p99_us),
    ] {
        for (v, name) in VARIANTS.iter().enumerate() {
            rows.push(Row::new(&case, name, metric, stat(v, f)));
        }
    }
    rows
}
