//! `yuebing master`: settings (flags > `YUEBING_*` > `[master]` in the TOML file > default) and
//! the serving loop.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{MasterConfig, MasterServerConfig, PlacementStrategy, RunningMaster};
use yuebing_store::MetricsRegistry;

use crate::config::{ConfigError, ConfigFile};
use yuebing_store::http::AdminServer;

/// The master's admin port when none is given: Mooncake's metrics port.
pub const DEFAULT_METRICS_PORT: u16 = 9003;

/// Where an admin server is to listen, and whether the operator asked for that address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminBind {
    /// `host:port`.
    pub addr: String,
    /// Given by a flag, the environment or the config file (else the default port).
    pub asked: bool,
}

/// Starts an admin server with `start` on `bind`: one the operator asked for must listen (its
/// failure is the command's); on the default port, a port already taken is a warning and the
/// master goes on without it, as Mooncake's master does without its metrics server.
pub async fn start_admin<F>(
    bind: Option<AdminBind>,
    start: impl FnOnce(String) -> F,
) -> yuebing_store::Result<Option<AdminServer>>
where
    F: std::future::Future<Output = yuebing_store::Result<AdminServer>>,
{
    let Some(bind) = bind else {
        return Ok(None);
    };
    match start(bind.addr.clone()).await {
        Ok(server) => Ok(Some(server)),
        Err(e) if !bind.asked => {
            eprintln!("warning: {e}; serving no admin paths (--metrics-port to choose a port)");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The metrics registry of a `yuebing` process: with an admin server (`serving`), a
/// Prometheus registry that its `/metrics` renders, installed as the process's global recorder
/// as well; without one nobody could read it, so nothing is recorded (the off switch:
/// `--metrics-port off`).
pub fn process_registry(serving: bool) -> MetricsRegistry {
    if !serving {
        return MetricsRegistry::off();
    }
    let registry = MetricsRegistry::prometheus();
    if let Err(e) = registry.install_global() {
        tracing::warn!(error = %e, "metrics recorded by other crates go elsewhere");
    }
    registry
}

/// Where an admin HTTP server listens: a port (0: any free one), or `off`. From a flag, the
/// environment or the config file (a number, or the string "off").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsPort {
    /// No admin server.
    Off,
    /// This port (0: any free one).
    Port(u16),
}

impl std::str::FromStr for MetricsPort {
    type Err = String;

    fn from_str(s: &str) -> Result<MetricsPort, String> {
        match s.trim() {
            t if t.eq_ignore_ascii_case("off") => Ok(MetricsPort::Off),
            n => n
                .parse()
                .map(MetricsPort::Port)
                .map_err(|_| format!("{s:?} is not a port (0..65535, 0: any free one) or off")),
        }
    }
}

impl<'de> serde::Deserialize<'de> for MetricsPort {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MetricsPort, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Given {
            Port(u16),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Port(p) => Ok(MetricsPort::Port(p)),
            Given::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Flags of `yuebing master`. Each default is written once, in [`MasterArgs::resolve`] (from
/// [`MasterConfig::default`] for the rules).
#[derive(Args, Debug, Default)]
pub struct MasterArgs {
    /// Address to listen on [default: 127.0.0.1; config: master.bind].
    #[arg(long, env = "YUEBING_MASTER_BIND")]
    pub bind: Option<String>,
    /// Port (0: any free port, reported on stdout) [default: 50051; config: master.port].
    #[arg(long, env = "YUEBING_MASTER_PORT")]
    pub port: Option<u16>,
    /// Directory for the operation log and snapshots; without it the master keeps everything
    /// in memory. With --etcd (where the log is in etcd) only this master's snapshots go
    /// there, so that the state survives losing every master at once [config:
    /// master.data_dir].
    #[arg(long, env = "YUEBING_MASTER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log entries between snapshots [default: 1000000; config: master.snapshot_every].
    #[arg(long, env = "YUEBING_MASTER_SNAPSHOT_EVERY")]
    pub snapshot_every: Option<u64>,
    /// Read lease, ms [default: 10000; config: master.lease_ttl_ms].
    #[arg(long, env = "YUEBING_MASTER_LEASE_TTL_MS")]
    pub lease_ttl_ms: Option<u64>,
    /// Client TTL (missed pings), ms [default: 10000; config: master.client_ttl_ms].
    #[arg(long, env = "YUEBING_MASTER_CLIENT_TTL_MS")]
    pub client_ttl_ms: Option<u64>,
    /// Age after which a put may be pre-empted, ms [default: 30000; config: master.put_discard_ms].
    #[arg(long, env = "YUEBING_MASTER_PUT_DISCARD_MS")]
    pub put_discard_ms: Option<u64>,
    /// Age after which an unfinished put is revoked and its space released, ms [default:
    /// 600000; config: master.put_release_ms].
    #[arg(long, env = "YUEBING_MASTER_PUT_RELEASE_MS")]
    pub put_release_ms: Option<u64>,
    /// Eviction starts above this fraction of capacity [default: 0.90; config:
    /// master.high_watermark].
    #[arg(long, env = "YUEBING_MASTER_HIGH_WATERMARK")]
    pub high_watermark: Option<f64>,
    /// Fraction of capacity one eviction frees [default: 0.05; config: master.eviction_ratio].
    #[arg(long, env = "YUEBING_MASTER_EVICTION_RATIO")]
    pub eviction_ratio: Option<f64>,
    /// Soft pin TTL after the last access, ms [default: 1800000; config: master.soft_pin_ttl_ms].
    #[arg(long, env = "YUEBING_MASTER_SOFT_PIN_TTL_MS")]
    pub soft_pin_ttl_ms: Option<u64>,
    /// Grace of a graceful unmount, ms [default: 30000; config: master.unmount_grace_ms].
    #[arg(long, env = "YUEBING_MASTER_UNMOUNT_GRACE_MS")]
    pub unmount_grace_ms: Option<u64>,
    /// Alignment of offsets in store space, bytes [default: 64; config: master.alignment].
    #[arg(long, env = "YUEBING_MASTER_ALIGNMENT")]
    pub alignment: Option<u64>,
    /// Longest key, bytes [default: 4096; config: master.max_key_len].
    #[arg(long, env = "YUEBING_MASTER_MAX_KEY_LEN")]
    pub max_key_len: Option<usize>,
    /// Replica placement: random or free-ratio-first [default: random; config:
    /// master.placement].
    #[arg(long, env = "YUEBING_MASTER_PLACEMENT")]
    pub placement: Option<PlacementStrategy>,
    /// Copy/move tasks waiting for their clients, at most [default: 10000; config:
    /// master.max_pending_tasks].
    #[arg(long, env = "YUEBING_MASTER_MAX_PENDING_TASKS")]
    pub max_pending_tasks: Option<usize>,
    /// Copy/move tasks running at once, at most [default: 10000; config:
    /// master.max_processing_tasks].
    #[arg(long, env = "YUEBING_MASTER_MAX_PROCESSING_TASKS")]
    pub max_processing_tasks: Option<usize>,
    /// Finished copy/move tasks kept for queries [default: 10000; config:
    /// master.max_finished_tasks].
    #[arg(long, env = "YUEBING_MASTER_MAX_FINISHED_TASKS")]
    pub max_finished_tasks: Option<usize>,
    /// A task not taken by its client within this fails, ms (0: never) [default: 300000;
    /// config: master.pending_task_timeout_ms].
    #[arg(long, env = "YUEBING_MASTER_PENDING_TASK_TIMEOUT_MS")]
    pub pending_task_timeout_ms: Option<u64>,
    /// A task taken but not ended within this fails, ms [default: 300000; config:
    /// master.processing_task_timeout_ms].
    #[arg(long, env = "YUEBING_MASTER_PROCESSING_TASK_TIMEOUT_MS")]
    pub processing_task_timeout_ms: Option<u64>,
    /// Takes of a task whose target is full before it fails [default: 10; config:
    /// master.max_task_retries].
    #[arg(long, env = "YUEBING_MASTER_MAX_TASK_RETRIES")]
    pub max_task_retries: Option<u32>,
    /// Store space one client may hold in grants (placed ahead of its small puts, which then
    /// need one master round trip), bytes; 0 turns grants off [default: 67108864; config:
    /// master.grant_max_bytes].
    #[arg(long, env = "YUEBING_MASTER_GRANT_MAX_BYTES")]
    pub grant_max_bytes: Option<u64>,
    /// Serve the admin HTTP paths (Mooncake's: /metrics, /metrics/summary, /health, /ready,
    /// /role, /ha_status, /get_all_segments, /query_key) on this port of the --bind address
    /// (0: any free port, reported on stdout; off: none) [default: 9003, Mooncake's; config:
    /// master.metrics_port].
    #[arg(long, env = "YUEBING_MASTER_METRICS_PORT")]
    pub metrics_port: Option<MetricsPort>,
    /// Runtime worker threads. The core runs under one lock, so one worker serves it with the
    /// fewest hand-overs between threads; raise it when encoding and decoding calls needs more
    /// than a core [default: 1; config: master.worker_threads].
    #[arg(long, env = "YUEBING_MASTER_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// An elected master's flags (`--etcd`, `--cluster`, …).
    #[command(flatten)]
    pub ha: super::ha::HaArgs,
}

impl MasterArgs {
    /// Where the admin HTTP server listens, unless it is turned off.
    pub fn admin_bind(&self, file: &ConfigFile) -> Result<Option<AdminBind>, ConfigError> {
        let given: Option<MetricsPort> =
            file.resolve("master", "metrics_port", self.metrics_port.map(Some), None)?;
        let port = given.unwrap_or(MetricsPort::Port(DEFAULT_METRICS_PORT));
        let bind: String = file.resolve("master", "bind", self.bind.clone(), "127.0.0.1".into())?;
        Ok(match port {
            MetricsPort::Port(p) => Some(AdminBind {
                addr: format!("{bind}:{p}"),
                asked: given.is_some(),
            }),
            MetricsPort::Off => None,
        })
    }

    /// How many runtime worker threads the master runs on (at least 1).
    pub fn worker_threads(&self, file: &ConfigFile) -> Result<usize, ConfigError> {
        super::worker_threads(file, "master", self.worker_threads, 1)
    }

    /// The server settings and the endpoint to bind; `token` (the cluster's, see
    /// [`ClusterArgs`](super::cluster::ClusterArgs)) is required of every client.
    pub fn resolve(
        self,
        file: &ConfigFile,
        token: Option<Token>,
    ) -> Result<(MasterServerConfig, Endpoint), ConfigError> {
        let d = MasterConfig::default();
        let s = "master";
        let core = MasterConfig {
            lease_ttl_ms: file.resolve(s, "lease_ttl_ms", self.lease_ttl_ms, d.lease_ttl_ms)?,
            client_ttl_ms: file.resolve(s, "client_ttl_ms", self.client_ttl_ms, d.client_ttl_ms)?,
            put_discard_ms: file.resolve(
                s,
                "put_discard_ms",
                self.put_discard_ms,
                d.put_discard_ms,
            )?,
            put_release_ms: file.resolve(
                s,
                "put_release_ms",
                self.put_release_ms,
                d.put_release_ms,
            )?,
            high_watermark: file.resolve(
                s,
                "high_watermark",
                self.high_watermark,
                d.high_watermark,
            )?,
            eviction_ratio: file.resolve(
                s,
                "eviction_ratio",
                self.eviction_ratio,
                d.eviction_ratio,
            )?,
            soft_pin_ttl_ms: file.resolve(
                s,
                "soft_pin_ttl_ms",
                self.soft_pin_ttl_ms,
                d.soft_pin_ttl_ms,
            )?,
            unmount_grace_ms: file.resolve(
                s,
                "unmount_grace_ms",
                self.unmount_grace_ms,
                d.unmount_grace_ms,
            )?,
            alignment: file.resolve(s, "alignment", self.alignment, d.alignment)?,
            max_key_len: file.resolve(s, "max_key_len", self.max_key_len, d.max_key_len)?,
            placement: file.resolve(s, "placement", self.placement, d.placement)?,
            seed: d.seed,
            max_pending_tasks: file.resolve(
                s,
                "max_pending_tasks",
                self.max_pending_tasks,
                d.max_pending_tasks,
            )?,
            max_processing_tasks: file.resolve(
                s,
                "max_processing_tasks",
                self.max_processing_tasks,
                d.max_processing_tasks,
            )?,
            max_finished_tasks: file.resolve(
                s,
                "max_finished_tasks",
                self.max_finished_tasks,
                d.max_finished_tasks,
            )?,
            pending_task_timeout_ms: file.resolve(
                s,
                "pending_task_timeout_ms",
                self.pending_task_timeout_ms,
                d.pending_task_timeout_ms,
            )?,
            processing_task_timeout_ms: file.resolve(
                s,
                "processing_task_timeout_ms",
                self.processing_task_timeout_ms,
                d.processing_task_timeout_ms,
            )?,
            max_task_retries: file.resolve(
                s,
                "max_task_retries",
                self.max_task_retries,
                d.max_task_retries,
            )?,
            grant_max_bytes: file.resolve(
                s,
                "grant_max_bytes",
                self.grant_max_bytes,
                d.grant_max_bytes,
            )?,
        };
        core.validate().map_err(|reason| ConfigError {
            path: "master settings".into(),
            reason,
        })?;
        let mut server = MasterServerConfig {
            core,
            data_dir: Some(file.resolve(s, "data_dir", self.data_dir, PathBuf::new())?)
                .filter(|p| !p.as_os_str().is_empty()),
            snapshot_every: file.resolve(s, "snapshot_every", self.snapshot_every, 1_000_000)?,
            ..MasterServerConfig::default()
        };
        server.rpc.token = token;
        let bind: String = file.resolve(s, "bind", self.bind, "127.0.0.1".to_string())?;
        let port: u16 = file.resolve(s, "port", self.port, 50051)?;
        let endpoint = format!("{bind}:{port}")
            .parse::<Endpoint>()
            .map_err(|e| ConfigError {
                path: "master.bind".into(),
                reason: format!("{bind}:{port}: {e}"),
            })?;
        Ok((server, endpoint))
    }
}

/// Serves until SIGINT or SIGTERM, then shuts down gracefully. Prints one line
/// `yuebing master ready on ADDR` to stdout once it accepts calls; with `admin`, then
/// `yuebing master admin on ADDR` (the admin HTTP server's address).
pub async fn serve(
    mut cfg: MasterServerConfig,
    endpoint: Endpoint,
    admin: Option<AdminBind>,
) -> yuebing_store::Result<()> {
    cfg.metrics = process_registry(admin.is_some());
    let master = RunningMaster::start(cfg, &endpoint).await?;
    let m = &master;
    let admin = start_admin(admin, |bind| async move { m.serve_admin(&bind).await }).await?;
    let r = master.recovery();
    if r.snapshot_seq > 0 || r.replayed > 0 {
        eprintln!(
            "restored: snapshot at {}, {} log entries replayed, {} torn bytes cut",
            r.snapshot_seq, r.replayed, r.truncated_bytes
        );
    }
    println!("yuebing master ready on {}", master.local_endpoint());
    if let Some(server) = &admin {
        println!("yuebing master admin on {}", server.local_addr());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    super::wait_for_signal().await?;
    let report = master.shutdown(Duration::from_secs(5)).await;
    eprintln!("master stopped: {report:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(flag: Option<&str>, file: &str) -> Result<Option<String>, ConfigError> {
        admin_bind(flag, file).map(|b| b.map(|b| b.addr))
    }

    fn admin_bind(flag: Option<&str>, file: &str) -> Result<Option<AdminBind>, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("y.toml");
        std::fs::write(&path, file).unwrap();
        let args = MasterArgs {
            metrics_port: flag.map(|f| f.parse().unwrap()),
            ..MasterArgs::default()
        };
        args.admin_bind(&ConfigFile::load(Some(&path))?)
    }

    /// Only the default port may be skipped when taken.
    #[test]
    fn only_an_admin_address_asked_for_must_listen() {
        assert!(!admin_bind(None, "").unwrap().unwrap().asked);
        assert!(admin_bind(Some("9100"), "").unwrap().unwrap().asked);
        assert!(
            admin_bind(None, "[master]\nmetrics_port = 9100\n")
                .unwrap()
                .unwrap()
                .asked
        );
        assert_eq!("OFF".parse::<MetricsPort>(), Ok(MetricsPort::Off));
    }

    /// Mooncake's metrics port unless told otherwise: a port, 0 for any, or off; from the flag
    /// (or its variable) first, then the file, which takes a number or "off".
    #[test]
    fn the_admin_server_is_on_9003_unless_told_otherwise() {
        assert_eq!(admin(None, "").unwrap().as_deref(), Some("127.0.0.1:9003"));
        assert_eq!(
            admin(Some("0"), "").unwrap().as_deref(),
            Some("127.0.0.1:0")
        );
        assert_eq!(admin(Some("off"), "").unwrap(), None);
        let file = "[master]\nbind = \"10.0.0.1\"\nmetrics_port = 9100\n";
        assert_eq!(admin(None, file).unwrap().as_deref(), Some("10.0.0.1:9100"));
        assert_eq!(
            admin(None, "[master]\nmetrics_port = \"off\"\n").unwrap(),
            None
        );
        assert_eq!(
            admin(Some("9200"), "[master]\nmetrics_port = \"off\"\n")
                .unwrap()
                .as_deref(),
            Some("127.0.0.1:9200")
        );
        assert!(admin(None, "[master]\nmetrics_port = \"sometimes\"\n").is_err());
        assert!(admin(None, "[master]\nmetrics_port = 70000\n").is_err());
        assert!("70000".parse::<MetricsPort>().is_err());
        assert!("".parse::<MetricsPort>().is_err());
    }
}
