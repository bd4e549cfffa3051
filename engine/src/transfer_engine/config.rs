//! [`EngineConfig`]: an engine's settings, one documented default each.

use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::TransferEngine;
use crate::error::Error;
use crate::metadata::MetadataStore;
use crate::request::TransportKind;
use crate::transport::TcpConfig;

/// Engine settings; `EngineConfig::default()` suits one box.
#[derive(Clone)]
pub struct EngineConfig {
    /// The segment's name. [`TransferEngine::start`] sets it to the rpc `host:port` (the P2P
    /// metadata's naming); [`TransferEngine::new`] keeps it.
    pub name: String,
    /// Deadline of a request that sets none.
    pub default_deadline: Duration,
    /// Forces one transport for every request that does not choose its own.
    pub transport: Option<TransportKind>,
    /// Where the control service listens (port 0: any free port); the data port uses the same
    /// host.
    pub bind: String,
    /// The cluster token, presented and required on every connection the engine makes or
    /// accepts: its control service, its tcp data port and its shm side channel.
    pub token: Option<yuebing_rpc::Token>,
    /// The tcp transport's settings.
    pub tcp: TcpConfig,
    /// Where the tcp data port listens; default: the control service's host, any free port.
    /// Fixing it lets a restarted engine keep its data port, so that stale requests reach it
    /// and are refused by instance id rather than by a closed port.
    pub data_bind: Option<String>,
    /// Notifications received and not yet taken, at most; past it senders get
    /// `NotificationQueueFull`.
    pub notify_queue_len: usize,
    /// Serve and use the shm transport for same-host peers.
    pub shm: bool,
    /// Where [`TransferEngine::start`] publishes the engine's descriptor and looks peers up.
    /// Default `None`: the embedded P2P metadata (each engine serves its own descriptor, a
    /// peer's is asked of it). A store that keeps descriptors (etcd's) gets this engine's
    /// descriptor, under the same name, when it starts and again whenever it changes, and a
    /// `remove` when it is dropped or [`TransferEngine::withdraw`]n; where the store can
    /// watch, open peers are watched, so that a restarted or vanished peer is noticed before
    /// a request fails on it.
    pub metadata: Option<Arc<dyn MetadataStore>>,
    /// The TTL of the descriptor published in `metadata` (an etcd lease: a dead engine's
    /// descriptor disappears about this long after its keep-alives stop). Default 10 s.
    pub metadata_ttl: Duration,
    /// Where the engine's counts go (`yuebing_engine_*`: transfers, bytes and failures per
    /// transport and direction, transfers under way); off by default.
    pub metrics: yuebing_rpc::MetricsSink,
    /// The rdma transport (cargo feature `rdma`): `Some` (the default) starts it on this
    /// machine's NICs, or on the verbs it names; where no NIC can be used the engine logs why
    /// and runs on tcp and shm. `None`: no rdma.
    #[cfg(feature = "rdma")]
    pub rdma: Option<crate::transport::rdma::RdmaConfig>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("EngineConfig");
        d.field("name", &self.name)
            .field("default_deadline", &self.default_deadline)
            .field("transport", &self.transport)
            .field("bind", &self.bind)
            .field("token", &self.token)
            .field("tcp", &self.tcp)
            .field("data_bind", &self.data_bind)
            .field("notify_queue_len", &self.notify_queue_len)
            .field("shm", &self.shm)
            .field(
                "metadata",
                &self.metadata.as_ref().map_or("p2p", |_| "a store"),
            )
            .field("metadata_ttl", &self.metadata_ttl)
            .field("metrics", &self.metrics);
        #[cfg(feature = "rdma")]
        d.field("rdma", &self.rdma);
        d.finish()
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            name: "local".into(),
            default_deadline: Duration::from_secs(30),
            transport: None,
            bind: "127.0.0.1:0".into(),
            token: None,
            tcp: TcpConfig::default(),
            data_bind: None,
            notify_queue_len: 1024,
            shm: true,
            metadata: None,
            metadata_ttl: Duration::from_secs(10),
            metrics: yuebing_rpc::MetricsSink::off(),
            #[cfg(feature = "rdma")]
            rdma: Some(crate::transport::rdma::RdmaConfig::default()),
        }
    }
}

/// Which RDMA NICs an engine uses, as `--rdma-nics`, Python's `rdma_nics=` and the Mooncake
/// drop-in's `rdma_devices` name them: `auto` (or nothing), `off`, or NIC names,
/// comma-separated (`mlx5_0,mlx5_1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaNics {
    /// Every active NIC of this machine.
    Auto,
    /// No rdma.
    Off,
    /// These NICs only.
    Named(Vec<String>),
}

impl std::str::FromStr for RdmaNics {
    type Err = Error;

    /// Reads `auto`, `off` or a list of names; a list naming none, or a name with a character
    /// no NIC name has (only ASCII letters, digits, `_`, `-` and `.`), is `InvalidArgument`.
    fn from_str(text: &str) -> Result<RdmaNics, Error> {
        let keyword = |word: &str, k: &str| word.eq_ignore_ascii_case(k);
        match text.trim() {
            "" => Ok(RdmaNics::Auto),
            t if keyword(t, "auto") => Ok(RdmaNics::Auto),
            t if keyword(t, "off") => Ok(RdmaNics::Off),
            list => {
                let names: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect();
                let bad_name = names.iter().find(|n| {
                    keyword(n, "auto")
                        || keyword(n, "off")
                        || !n
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                });
                match (names.is_empty(), bad_name) {
                    (true, _) => Err(Error::invalid(format!("rdma NICs {text:?} name no NIC"))),
                    (_, Some(n)) => Err(Error::invalid(format!("{n:?} is not an rdma NIC name"))),
                    _ => Ok(RdmaNics::Named(names)),
                }
            }
        }
    }
}

impl EngineConfig {
    /// Sets the rdma transport to use `nics`, with `RdmaConfig`'s defaults for the rest (or
    /// none, for `Off`). A build without the cargo feature `rdma` has
    /// no rdma either way, so it takes `Auto` and `Off` and refuses names with
    /// `InvalidArgument`.
    pub fn set_rdma_nics(&mut self, nics: RdmaNics) -> Result<(), Error> {
        #[cfg(feature = "rdma")]
        {
            use crate::transport::rdma::RdmaConfig;
            self.rdma = match nics {
                RdmaNics::Auto => Some(RdmaConfig::default()),
                RdmaNics::Off => None,
                RdmaNics::Named(nics) => Some(RdmaConfig {
                    nics,
                    ..RdmaConfig::default()
                }),
            };
            Ok(())
        }
        #[cfg(not(feature = "rdma"))]
        match nics {
            RdmaNics::Auto | RdmaNics::Off => Ok(()),
            RdmaNics::Named(_) => Err(Error::invalid(
                "rdma NICs named, but this build has no rdma transport (cargo feature `rdma`)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_nics_parse_and_bad_ones_are_refused() {
        assert_eq!("auto".parse::<RdmaNics>().unwrap(), RdmaNics::Auto);
        assert_eq!("".parse::<RdmaNics>().unwrap(), RdmaNics::Auto);
        assert_eq!("off".parse::<RdmaNics>().unwrap(), RdmaNics::Off);
        assert_eq!(" OFF ".parse::<RdmaNics>().unwrap(), RdmaNics::Off);
        assert_eq!("Auto".parse::<RdmaNics>().unwrap(), RdmaNics::Auto);
        assert_eq!(
            "mlx5_0, mlx5_1".parse::<RdmaNics>().unwrap(),
            RdmaNics::Named(vec!["mlx5_0".into(), "mlx5_1".into()])
        );
        for bad in [",", "mlx5_0,a b", "rm -rf", "auto,mlx5_0", "mlx5_0,off"] {
            let err = bad.parse::<RdmaNics>().unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { .. }),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn rdma_nics_set_the_transport_or_are_refused_without_it() {
        let mut e = EngineConfig::default();
        let named = e.set_rdma_nics(RdmaNics::Named(vec!["mlx5_1".into()]));
        #[cfg(feature = "rdma")]
        {
            named.unwrap();
            assert_eq!(e.rdma.as_ref().unwrap().nics, ["mlx5_1"]);
            e.set_rdma_nics(RdmaNics::Off).unwrap();
            assert!(e.rdma.is_none());
            e.set_rdma_nics(RdmaNics::Auto).unwrap();
            assert!(e.rdma.as_ref().unwrap().nics.is_empty());
        }
        #[cfg(not(feature = "rdma"))]
        {
            assert!(named
                .unwrap_err()
                .to_string()
                .contains("cargo feature `rdma`"));
            e.set_rdma_nics(RdmaNics::Auto).unwrap();
            e.set_rdma_nics(RdmaNics::Off).unwrap();
        }
    }
}
