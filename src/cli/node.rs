//! `yuebing node`: a store client that contributes store space and serves transfers until it
//! is stopped.

use clap::Args;
use yuebing_rpc::Size;
use yuebing_store::{Client, ClientConfig};

use super::client_args::ClientArgs;
use crate::config::{ConfigError, ConfigFile};

/// Flags of `yuebing node`.
#[derive(Args, Debug, Default)]
pub struct NodeArgs {
    /// Master addresses and transfer settings.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Store space to contribute, e.g. 2G [default: 1G; config: node.store_size].
    #[arg(long, env = "YUEBING_NODE_STORE_SIZE")]
    pub store_size: Option<String>,
    /// Ping interval in ms [default: 1000; config: node.heartbeat_ms].
    #[arg(long, env = "YUEBING_NODE_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Runtime worker threads. With one, lone small tcp requests are answered without waking
    /// a parked thread (see the README); more serve many peers in parallel [default: one per
    /// core; config: node.worker_threads].
    #[arg(long, env = "YUEBING_NODE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Serve the node's admin HTTP paths (/health, /ready, /metrics) on this port of the host
    /// of --bind (0: any free port, reported on stdout; off: none); off unless given, so that
    /// several nodes on one machine never collide [config: node.metrics_port].
    #[arg(long, env = "YUEBING_NODE_METRICS_PORT")]
    pub metrics_port: Option<super::master::MetricsPort>,
}

impl NodeArgs {
    /// The node's runtime worker threads if set (`None`: tokio's default, one per core or
    /// `TOKIO_WORKER_THREADS`).
    pub fn worker_threads(&self, file: &ConfigFile) -> Result<Option<usize>, ConfigError> {
        let set: Option<usize> = file.resolve(
            "node",
            "worker_threads",
            self.worker_threads.map(Some),
            None,
        )?;
        set.map(|n| super::at_least_one_worker("node", n))
            .transpose()
    }

    /// Where the admin HTTP server listens (`host:port`, the host of `--bind`), if asked for.
    pub fn admin_bind(&self, file: &ConfigFile) -> Result<Option<String>, ConfigError> {
        let port = file.resolve(
            "node",
            "metrics_port",
            self.metrics_port,
            super::master::MetricsPort::Off,
        )?;
        let bind: String = file.resolve(
            "client",
            "bind",
            self.client.bind.clone(),
            "127.0.0.1:0".into(),
        )?;
        let host = bind.rsplit_once(':').map_or(bind.as_str(), |(h, _)| h);
        Ok(match port {
            super::master::MetricsPort::Port(p) => Some(format!("{host}:{p}")),
            super::master::MetricsPort::Off => None,
        })
    }

    /// The client configuration of the node, with the cluster `token` (an `etcd://` master
    /// address gets a leader source on `handle`'s runtime).
    pub async fn resolve(
        &self,
        file: &ConfigFile,
        token: Option<yuebing_rpc::Token>,
        handle: &tokio::runtime::Handle,
    ) -> Result<ClientConfig, ConfigError> {
        let mut cfg = self.client.resolve(file, token, handle).await?;
        let size: String =
            file.resolve("node", "store_size", self.store_size.clone(), "1G".into())?;
        cfg.store_size = size
            .parse::<Size>()
            .and_then(Size::positive)
            .map_err(|e| ConfigError {
                path: "node.store_size".into(),
                reason: e.to_string(),
            })?
            .bytes();
        cfg.heartbeat = std::time::Duration::from_millis(
            file.resolve("node", "heartbeat_ms", self.heartbeat_ms, 1000)?
                .max(1),
        );
        Ok(cfg)
    }
}

/// Runs a node until SIGINT or SIGTERM: prints `yuebing node ready NAME` once its space is
/// mounted (NAME: its engine's segment name, which the master hands out in replicas); with
/// `admin`, then `yuebing node admin on ADDR` (its admin HTTP server). Without `admin` it
/// records no metrics.
pub async fn run(mut cfg: ClientConfig, admin: Option<String>) -> yuebing_store::Result<()> {
    cfg.metrics = super::master::process_registry(admin.is_some());
    let client = Client::start(cfg).await?;
    let admin = match admin {
        Some(bind) => Some(client.serve_admin(&bind).await?),
        None => None,
    };
    println!("yuebing node ready {}", client.engine().name());
    if let Some(server) = &admin {
        println!("yuebing node admin on {}", server.local_addr());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    super::wait_for_signal().await?;
    // Tell the master at once that no new replica may come here (else it notices at the TTL).
    let leave = yuebing_store::Options::deadline(std::time::Duration::from_secs(5));
    if let Err(e) = client.close(&leave).await {
        tracing::warn!(error = %e, "could not unmount the store space; the master will expire it");
    }
    // Where descriptors are stored (`--metadata etcd://…`), take this node's out before the
    // process ends (else it expires with its lease). Nothing to do with P2P metadata.
    if let Err(e) = client.engine().withdraw().await {
        tracing::warn!(error = %e, "could not withdraw the node's descriptor; it will expire");
    }
    drop(client);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store_size(text: &str) -> Result<u64, ConfigError> {
        let args = NodeArgs {
            store_size: Some(text.into()),
            ..NodeArgs::default()
        };
        let handle = tokio::runtime::Handle::current();
        let cfg = args.resolve(&ConfigFile::default(), None, &handle).await?;
        Ok(cfg.store_size)
    }

    /// `--store-size` takes sizes as Python's `Store(store_size=…)` does (`1T` was refused).
    #[tokio::test]
    async fn store_sizes_parse_as_everywhere_and_zero_is_refused() {
        for (text, want) in [("1G", 1 << 30), ("1T", 1 << 40), ("64 mi", 64 << 20)] {
            assert_eq!(store_size(text).await.unwrap(), want, "{text}");
        }
        for bad in ["0", "1.5G", "4KBB", "16777216T"] {
            let err = store_size(bad).await.unwrap_err();
            assert_eq!(err.path, "node.store_size", "{bad}");
        }
    }
}
