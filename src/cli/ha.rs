//! `yuebing master --etcd …`: an elected master of a cluster whose operation log lives in
//! etcd (issue 16). The flags exist in every build; serving needs the `etcd` feature, and a
//! build without it says so.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use yuebing_rpc::Endpoint;
use yuebing_store::master::MasterServerConfig;

use crate::config::{ConfigError, ConfigFile};

/// The election and etcd flags of `yuebing master`.
#[derive(Args, Debug, Default)]
pub struct HaArgs {
    /// etcd client endpoints, `host:port,host:port`: run as an elected master of `--cluster`,
    /// its operation log in etcd, instead of a single master (needs a build with the `etcd`
    /// feature) [config: master.etcd].
    #[arg(long, env = "YUEBING_MASTER_ETCD")]
    pub etcd: Option<String>,
    /// The cluster's name: its keys lie under /yuebing/NAME in etcd [default: default; config:
    /// master.cluster].
    #[arg(long, env = "YUEBING_CLUSTER")]
    pub cluster: Option<String>,
    /// TTL of the election lease, ms: a dead leader is replaced about this long after it died
    /// [default: 5000; config: master.election_ttl_ms].
    #[arg(long, env = "YUEBING_MASTER_ELECTION_TTL_MS")]
    pub election_ttl_ms: Option<u64>,
    /// How long, in ms, a standby's applied position may stand still behind the leader's
    /// snapshot before the leader truncates the etcd log past it anyway (a wedged standby
    /// would hold the log forever; it bootstraps from a snapshot if it resumes); 0: never
    /// [default: 300000; config: master.standby_stall_ms].
    #[arg(long, env = "YUEBING_MASTER_STANDBY_STALL_MS")]
    pub standby_stall_ms: Option<u64>,
    /// The address clients reach this master at, published while it leads [default: the
    /// address it binds; config: master.advertise].
    #[arg(long, env = "YUEBING_MASTER_ADVERTISE")]
    pub advertise: Option<String>,
    /// etcd user, with --etcd-password [config: master.etcd_user].
    #[arg(long, env = "YUEBING_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// etcd password (prefer the environment variable to the flag) [config:
    /// master.etcd_password].
    #[arg(long, env = "YUEBING_ETCD_PASSWORD", hide_env_values = true)]
    pub etcd_password: Option<String>,
    /// PEM file of the CA that signed etcd's certificate, for `https://` endpoints [config:
    /// master.etcd_ca].
    #[arg(long, env = "YUEBING_ETCD_CA")]
    pub etcd_ca: Option<PathBuf>,
    /// PEM client certificate for etcd, with --etcd-key [config: master.etcd_cert].
    #[arg(long, env = "YUEBING_ETCD_CERT")]
    pub etcd_cert: Option<PathBuf>,
    /// PEM private key of --etcd-cert [config: master.etcd_key].
    #[arg(long, env = "YUEBING_ETCD_KEY")]
    pub etcd_key: Option<PathBuf>,
}

/// The settings of an elected master, resolved.
#[derive(Debug, Clone)]
pub struct HaSettings {
    /// etcd endpoints, `host:port,host:port`.
    pub endpoints: String,
    /// The cluster's name.
    pub cluster: String,
    /// The election lease's TTL.
    pub ttl: Duration,
    /// The address published while leading (default: the bound one).
    pub advertise: Option<String>,
    /// How long a standby's position may stand still before it stops holding the log back.
    pub standby_stall: Duration,
    /// etcd user and password.
    pub credentials: Option<(String, String)>,
    /// CA, certificate and key files for TLS to etcd.
    pub tls: Option<(Option<PathBuf>, Option<PathBuf>, Option<PathBuf>)>,
}

impl HaArgs {
    /// The elected master's settings, or `None` for a single master (no `--etcd`).
    pub fn resolve(self, file: &ConfigFile) -> Result<Option<HaSettings>, ConfigError> {
        let s = "master";
        let endpoints: String = file.resolve(s, "etcd", self.etcd, String::new())?;
        if endpoints.is_empty() {
            return Ok(None);
        }
        let user: String = file.resolve(s, "etcd_user", self.etcd_user, String::new())?;
        let password: String =
            file.resolve(s, "etcd_password", self.etcd_password, String::new())?;
        let credentials = match (user.is_empty(), password.is_empty()) {
            (true, true) => None,
            (false, false) => Some((user, password)),
            _ => {
                return Err(ConfigError {
                    path: "master.etcd_user".into(),
                    reason: "--etcd-user and --etcd-password go together".into(),
                })
            }
        };
        let path = |key: &str, given: Option<PathBuf>| -> Result<Option<PathBuf>, ConfigError> {
            Ok(Some(file.resolve(s, key, given, PathBuf::new())?)
                .filter(|p| !p.as_os_str().is_empty()))
        };
        let (ca, cert, key) = (
            path("etcd_ca", self.etcd_ca)?,
            path("etcd_cert", self.etcd_cert)?,
            path("etcd_key", self.etcd_key)?,
        );
        let tls = (ca.is_some() || cert.is_some() || key.is_some()).then_some((ca, cert, key));
        let ttl_ms: u64 = file.resolve(s, "election_ttl_ms", self.election_ttl_ms, 5000)?;
        if ttl_ms < 1000 {
            return Err(ConfigError {
                path: "master.election_ttl_ms".into(),
                reason: format!("{ttl_ms} ms: etcd leases last whole seconds, at least 1 s"),
            });
        }
        Ok(Some(HaSettings {
            endpoints,
            cluster: file.resolve(s, "cluster", self.cluster, "default".to_string())?,
            ttl: Duration::from_millis(ttl_ms),
            advertise: Some(file.resolve(s, "advertise", self.advertise, String::new())?)
                .filter(|a| !a.is_empty()),
            standby_stall: Duration::from_millis(file.resolve(
                s,
                "standby_stall_ms",
                self.standby_stall_ms,
                300_000,
            )?),
            credentials,
            tls,
        }))
    }
}

/// Serves as an elected master until SIGINT or SIGTERM (then resigns and stops), or until it
/// stops serving for good (deposed, its log failed: an error, for its supervisor to restart
/// it). Prints `yuebing master ready on ADDR` once its rpc server accepts calls (as a standby);
/// with `admin`, then `yuebing master admin on ADDR` (the admin HTTP server's address, whose
/// `/role` and `/ready` follow the election).
#[cfg(feature = "etcd")]
pub async fn serve(
    ha: HaSettings,
    cfg: MasterServerConfig,
    endpoint: Endpoint,
    admin: Option<super::master::AdminBind>,
) -> yuebing_store::Result<()> {
    use yuebing_etcd::ha::{HaConfig, HaMaster};
    use yuebing_etcd::{Credentials, EtcdConfig, TlsFiles};

    let etcd_err = |e: yuebing_etcd::Error| yuebing_store::Error::Remote {
        code: e.code(),
        message: e.to_string(),
    };
    let mut etcd = EtcdConfig::new(&ha.endpoints)
        .map_err(etcd_err)?
        .with_cluster(ha.cluster.clone());
    etcd.credentials = ha
        .credentials
        .map(|(user, password)| Credentials { user, password });
    etcd.tls = ha.tls.map(|(ca, cert, key)| TlsFiles {
        ca,
        cert,
        key,
        domain: None,
    });
    let mut config = HaConfig::new(etcd);
    config.ttl = ha.ttl;
    config.master = MasterServerConfig {
        metrics: super::master::process_registry(admin.is_some()),
        ..cfg
    };
    config.advertise = ha.advertise;
    config.standby_stall = ha.standby_stall;
    let master = HaMaster::start(config, &endpoint, tokio::runtime::Handle::current())
        .await
        .map_err(etcd_err)?;
    let m = &master;
    let admin =
        super::master::start_admin(admin, |bind| async move { m.serve_admin(&bind).await }).await?;
    if let Some(bound) = master.local_endpoint() {
        // The same ready lines as a single master's; the role goes to stderr.
        println!("yuebing master ready on {bound}");
        if let Some(server) = &admin {
            println!("yuebing master admin on {}", server.local_addr());
        }
        eprintln!(
            "elected master of cluster {:?}: a standby until it wins",
            ha.cluster
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let outcome = tokio::select! {
        signal = super::wait_for_signal() => Ok(signal),
        why = master.stopped() => Err(why),
    };
    match outcome {
        Ok(signal) => {
            signal?;
            master.shutdown(Duration::from_secs(5)).await;
            eprintln!("master stopped");
            Ok(())
        }
        Err(why) => Err(yuebing_store::Error::Remote {
            code: -1010,
            message: format!("this master stopped serving: {why}"),
        }),
    }
}

/// A build without the `etcd` feature cannot run an elected master.
#[cfg(not(feature = "etcd"))]
pub async fn serve(
    _: HaSettings,
    _: MasterServerConfig,
    _: Endpoint,
    _: Option<super::master::AdminBind>,
) -> yuebing_store::Result<()> {
    Err(yuebing_store::Error::InvalidParams {
        reason: "this yuebing was built without etcd support: build it with \
                 `cargo build --release --features etcd` to run an elected master"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(args: HaArgs, file: &ConfigFile) -> HaSettings {
        args.resolve(file).unwrap().expect("an elected master")
    }

    #[test]
    fn the_standby_stall_defaults_to_five_minutes_and_reads_the_flag_then_the_file() {
        let etcd = || HaArgs {
            etcd: Some("127.0.0.1:2379".into()),
            ..HaArgs::default()
        };
        let none = ConfigFile::default();
        assert_eq!(
            resolved(etcd(), &none).standby_stall,
            Duration::from_secs(300)
        );
        let flag = HaArgs {
            standby_stall_ms: Some(0),
            ..etcd()
        };
        assert_eq!(resolved(flag, &none).standby_stall, Duration::ZERO);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("yuebing.toml");
        std::fs::write(&path, "[master]\nstandby_stall_ms = 60000\n").unwrap();
        let file = ConfigFile::load(Some(&path)).unwrap();
        assert_eq!(
            resolved(etcd(), &file).standby_stall,
            Duration::from_secs(60)
        );
        // Without --etcd there is no elected master to configure.
        assert!(HaArgs::default().resolve(&file).unwrap().is_none());
    }
}
