//! Settings every store client command shares: where the masters are, and how to transfer.
//!
//! Masters are either a list of addresses, tried in order, or `etcd://h:p[,h:p…]/CLUSTER`:
//! the leader elected in that cluster (`yuebing master --etcd … --cluster CLUSTER`), found
//! through etcd and followed as leadership changes. The latter needs a build with the `etcd`
//! feature; without it the address is refused with a [`ConfigError`] that says how to build one.
//!
//! Segment descriptors (where each engine's memory is) are served by the engines themselves by
//! default (`--metadata p2p`), or published in etcd (`--metadata etcd://h:p[,h:p…]/CLUSTER`,
//! Mooncake's `metadata_server`): each engine's under a lease it keeps alive, so a dead node's
//! disappears, and watched by its peers. The same `etcd` feature is needed.

use clap::Args;
use tokio::runtime::Handle;
use yuebing_bridge::masters::{self, Masters};
use yuebing_engine::{EngineConfig, RdmaNics, TransportKind};
use yuebing_rpc::Token;
use yuebing_store::ClientConfig;

use crate::config::{ConfigError, ConfigFile};

/// Flags of commands that act as a store client (`node`, `store …`).
#[derive(Args, Debug, Default, Clone)]
pub struct ClientArgs {
    /// Master addresses, comma-separated, tried in order; or etcd://h:p[,h:p]/CLUSTER: the
    /// leader elected in CLUSTER, found through etcd (needs a build with the `etcd` feature)
    /// [default: 127.0.0.1:50051; config: client.masters].
    #[arg(long = "master", env = "YUEBING_MASTERS", global = true)]
    pub masters: Option<String>,
    /// Force a transport for every transfer: tcp, shm or rdma (default: chosen per peer) [config:
    /// client.transport].
    #[arg(long, env = "YUEBING_TRANSPORT", global = true)]
    pub transport: Option<String>,
    /// Address of this client's engine (port 0: any) [default: 127.0.0.1:0; config:
    /// client.bind].
    #[arg(long, env = "YUEBING_CLIENT_BIND", global = true)]
    pub bind: Option<String>,
    /// Where engines publish and look up segment descriptors: p2p (each engine serves its
    /// own) or etcd://h:p[,h:p]/CLUSTER (in etcd, on leases; needs a build with the `etcd`
    /// feature) [default: p2p; config: client.metadata].
    #[arg(long, env = "YUEBING_METADATA", global = true)]
    pub metadata: Option<String>,
    /// The RDMA NICs this client's engine uses: auto (every active one), off, or names,
    /// comma-separated (mlx5_0,mlx5_1); a build without the `rdma` feature takes only auto or
    /// off [default: auto; config: client.rdma_nics].
    #[arg(long, env = "YUEBING_RDMA_NICS", global = true)]
    pub rdma_nics: Option<String>,
    /// Locations of objects read kept while their read leases last, so that a read of the
    /// same key goes straight to its replica (another client's write of it may go unseen for
    /// up to a lease); 0 keeps none [default: 0; config: client.lease_cache].
    #[arg(long, env = "YUEBING_LEASE_CACHE", global = true)]
    pub lease_cache: Option<usize>,
    /// Store space the master sets aside for this client's small puts at a time (a put of at
    /// most a sixteenth of it needs one master round trip instead of two), e.g. 16M; 0: none
    /// [default: 0; config: client.grant_size].
    #[arg(long, env = "YUEBING_GRANT_SIZE", global = true)]
    pub grant_size: Option<String>,
}

/// Parses `--rdma-nics` (the engine's [`RdmaNics`]) into `engine`'s rdma setting.
fn apply_rdma_nics(text: &str, engine: &mut EngineConfig) -> Result<(), ConfigError> {
    text.parse::<RdmaNics>()
        .and_then(|nics| engine.set_rdma_nics(nics))
        .map_err(|e| bad("rdma_nics", e.to_string()))
}

fn bad(key: &str, reason: String) -> ConfigError {
    ConfigError {
        path: format!("client.{key}"),
        reason,
    }
}

/// Parses `--master`'s value, `h:p,h:p` or `etcd://h:p[,h:p…]/CLUSTER`, with the one parser
/// the bridge, its C ABI and Python use too ([`Masters::parse`]).
pub fn parse_masters(text: &str) -> Result<Masters, ConfigError> {
    Masters::parse(text).map_err(|e| bad("masters", e.to_string()))
}

/// Where engines publish and look up segment descriptors, as `--metadata` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Metadata {
    /// The embedded P2P metadata: each engine serves its own descriptor.
    P2p,
    /// `etcd://h:p[,h:p…]/CLUSTER`: descriptors in that etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(Box<yuebing_etcd::EtcdConfig>),
}

/// Parses `--metadata`'s value: `p2p` or `etcd://h:p[,h:p…]/CLUSTER`.
pub fn parse_metadata(text: &str) -> Result<Metadata, ConfigError> {
    if masters::is_etcd_address(text) {
        return etcd_metadata(text);
    }
    match text.trim() {
        t if t.eq_ignore_ascii_case("p2p") => Ok(Metadata::P2p),
        other => Err(bad(
            "metadata",
            format!("{other:?} is neither p2p nor etcd://host:port[,host:port…]/CLUSTER"),
        )),
    }
}

#[cfg(feature = "etcd")]
fn etcd_metadata(text: &str) -> Result<Metadata, ConfigError> {
    yuebing_etcd::address::parse_metadata_address(text)
        .map(|c| Metadata::Etcd(Box::new(c)))
        .map_err(|e| bad("metadata", e.to_string()))
}

#[cfg(not(feature = "etcd"))]
fn etcd_metadata(text: &str) -> Result<Metadata, ConfigError> {
    Err(needs_etcd("metadata", text, "segment descriptors in etcd"))
}

/// The error of an `etcd://` address in a build without etcd.
#[cfg(not(feature = "etcd"))]
fn needs_etcd(key: &str, text: &str, what: &str) -> ConfigError {
    bad(
        key,
        format!(
            "{text:?}: {what} needs a yuebing built with the `etcd` feature: `cargo build \
             --release --features etcd` (it needs protoc and libprotobuf-dev; see \
             docs/etcd-provisioning.md)"
        ),
    )
}

impl Metadata {
    /// Puts this metadata into `cfg`'s engine: nothing for P2P (the default), or an
    /// `EtcdMetadata` whose connections and lease keep-alives live on `handle`'s runtime.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub async fn apply(self, cfg: &mut ClientConfig, handle: &Handle) -> Result<(), ConfigError> {
        match self {
            Metadata::P2p => cfg.engine.metadata = None,
            #[cfg(feature = "etcd")]
            Metadata::Etcd(etcd) => {
                let store = yuebing_etcd::EtcdMetadata::connect_on(&etcd, handle.clone())
                    .await
                    .map_err(|e| bad("metadata", format!("etcd: {e} ({})", e.code())))?;
                cfg.engine.metadata = Some(std::sync::Arc::new(store));
            }
        }
        Ok(())
    }
}

impl ClientArgs {
    /// A client configuration (store size 0) from these flags, presenting the cluster `token`;
    /// an `etcd://` master address gets a leader source, an `etcd://` metadata address an
    /// `EtcdMetadata`, both on `handle`'s runtime.
    pub async fn resolve(
        &self,
        file: &ConfigFile,
        token: Option<Token>,
        handle: &Handle,
    ) -> Result<ClientConfig, ConfigError> {
        let mut cfg = self.resolve_local(file, token)?;
        let (masters, metadata) = (self.masters(file)?, self.metadata(file)?);
        masters
            .apply(&mut cfg, handle)
            .await
            .map_err(|e| bad("masters", format!("etcd: {e} ({})", e.code())))?;
        metadata.apply(&mut cfg, handle).await?;
        Ok(cfg)
    }

    /// Where segment descriptors live, from `--metadata` / `YUEBING_METADATA` /
    /// `client.metadata`.
    pub fn metadata(&self, file: &ConfigFile) -> Result<Metadata, ConfigError> {
        let metadata: String =
            file.resolve("client", "metadata", self.metadata.clone(), "p2p".into())?;
        parse_metadata(&metadata)
    }

    /// Where the masters are, from `--master` / `YUEBING_MASTERS` / `client.masters`.
    pub fn masters(&self, file: &ConfigFile) -> Result<Masters, ConfigError> {
        let masters: String = file.resolve(
            "client",
            "masters",
            self.masters.clone(),
            "127.0.0.1:50051".into(),
        )?;
        parse_masters(&masters)
    }

    /// Every setting but the masters.
    fn resolve_local(
        &self,
        file: &ConfigFile,
        token: Option<Token>,
    ) -> Result<ClientConfig, ConfigError> {
        let s = "client";
        let transport = match file
            .resolve(s, "transport", self.transport.clone(), String::new())?
            .as_str()
        {
            "" | "auto" => None,
            other => Some(
                other
                    .parse::<TransportKind>()
                    .map_err(|e| bad("transport", format!("{e}, or auto")))?,
            ),
        };
        let bind = file.resolve(s, "bind", self.bind.clone(), "127.0.0.1:0".into())?;
        let mut engine = EngineConfig {
            bind,
            transport,
            ..EngineConfig::default()
        };
        let nics = file.resolve(s, "rdma_nics", self.rdma_nics.clone(), "auto".into())?;
        apply_rdma_nics(&nics, &mut engine)?;
        let grant_size: String =
            file.resolve(s, "grant_size", self.grant_size.clone(), "0".into())?;
        Ok(ClientConfig {
            token,
            engine,
            lease_cache: file.resolve(s, "lease_cache", self.lease_cache, 0)?,
            grant_size: grant_size
                .parse::<yuebing_rpc::Size>()
                .map_err(|e| bad("grant_size", e.to_string()))?
                .bytes(),
            ..ClientConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_round_trips_are_asked_for_by_flag_and_bad_sizes_name_their_setting() {
        let file = ConfigFile::default();
        let args = ClientArgs {
            lease_cache: Some(4096),
            grant_size: Some("16M".into()),
            ..ClientArgs::default()
        };
        let cfg = args.resolve_local(&file, None).unwrap();
        assert_eq!((cfg.lease_cache, cfg.grant_size), (4096, 16 << 20));
        let off = ClientArgs::default().resolve_local(&file, None).unwrap();
        assert_eq!((off.lease_cache, off.grant_size), (0, 0));
        let bad = ClientArgs {
            grant_size: Some("lots".into()),
            ..ClientArgs::default()
        };
        assert_eq!(
            bad.resolve_local(&file, None).unwrap_err().path,
            "client.grant_size"
        );
    }

    #[test]
    fn bad_rdma_nics_name_their_setting() {
        let mut e = EngineConfig::default();
        apply_rdma_nics("off", &mut e).unwrap();
        for bad in [",", "mlx5_0,a b"] {
            let err = apply_rdma_nics(bad, &mut e).unwrap_err();
            assert_eq!(err.path, "client.rdma_nics", "{bad:?}");
        }
    }

    #[test]
    fn master_lists_parse_and_bad_ones_are_refused() {
        let want: Vec<yuebing_rpc::Endpoint> =
            vec!["127.0.0.1:1".parse().unwrap(), "h:2".parse().unwrap()];
        assert_eq!(
            parse_masters("127.0.0.1:1, h:2").unwrap(),
            Masters::List(want.clone())
        );
        // The bridge's rules: empty items are skipped, a list naming none is refused.
        assert_eq!(
            parse_masters(" 127.0.0.1:1,, h:2 ,").unwrap(),
            Masters::List(want)
        );
        for bad in ["127.0.0.1:1,nope", "", " , "] {
            let err = parse_masters(bad).unwrap_err();
            assert_eq!(err.path, "client.masters", "{bad:?}");
        }
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_addresses_name_the_cluster_and_bad_ones_are_refused() {
        match parse_masters("etcd://127.0.0.1:2379,127.0.0.1:2380/prod").unwrap() {
            Masters::Etcd(c) => {
                assert_eq!(c.endpoints, ["127.0.0.1:2379", "127.0.0.1:2380"]);
                assert_eq!(c.cluster, "prod");
            }
            other => panic!("{other:?}"),
        }
        for bad in ["etcd://h:1", "etcd:///c", "etcd://h:0/c", "etcd://h:1/a/b"] {
            let err = parse_masters(bad).unwrap_err();
            assert_eq!(err.path, "client.masters", "{bad}");
            assert!(err.reason.contains("etcd://host:port"), "{err}");
        }
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn etcd_addresses_need_the_etcd_feature() {
        let err = parse_masters("etcd://127.0.0.1:2379/prod").unwrap_err();
        assert_eq!(err.path, "client.masters");
        assert!(err.reason.contains("--features etcd"), "{err}");
        let err = parse_metadata("etcd://127.0.0.1:2379/prod").unwrap_err();
        assert_eq!(err.path, "client.metadata");
        assert!(err.reason.contains("--features etcd"), "{err}");
    }

    #[test]
    fn metadata_is_p2p_by_default_and_unknown_kinds_are_refused() {
        let args = ClientArgs::default();
        assert_eq!(
            args.metadata(&ConfigFile::default()).unwrap(),
            Metadata::P2p
        );
        assert_eq!(parse_metadata(" P2P ").unwrap(), Metadata::P2p);
        for bad in ["", "etcd", "http://h:1/c", "127.0.0.1:2379"] {
            let err = parse_metadata(bad).unwrap_err();
            assert_eq!(err.path, "client.metadata", "{bad}");
        }
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_metadata_addresses_name_the_cluster_and_bad_ones_are_refused() {
        match parse_metadata("etcd://127.0.0.1:2379,127.0.0.1:2380/prod").unwrap() {
            Metadata::Etcd(c) => {
                assert_eq!(c.endpoints, ["127.0.0.1:2379", "127.0.0.1:2380"]);
                assert_eq!(c.cluster, "prod");
            }
            other => panic!("{other:?}"),
        }
        for bad in ["etcd://h:1", "etcd:///c", "etcd://h:0/c", "etcd://h:1/a/b"] {
            let err = parse_metadata(bad).unwrap_err();
            assert_eq!(err.path, "client.metadata", "{bad}");
            assert!(err.reason.contains("metadata address"), "{err}");
        }
    }
}
