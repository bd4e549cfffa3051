//! The store client's settings, one documented default each.

use std::time::Duration;

use yuebing_engine::EngineConfig;
use yuebing_rpc::{Endpoint, Token};

use crate::master::PutConfig;
use crate::MetricsRegistry;

/// Settings of a [`Client`](super::Client).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Master addresses, tried in order (failover, not load balancing).
    pub masters: Vec<Endpoint>,
    /// HA mode: the leading master's address as an election reports it (yuebing-etcd's
    /// leader watch), updated as leadership changes. Calls go to the master it names; one
    /// that certainly did not run there (unreachable, not the leader, still catching up)
    /// waits for the next leader, or tries again shortly, within its deadline; one whose
    /// fate is unknown is never sent again. For 10 s after the leader changed, a call that
    /// found no store space or a replica not ready (the nodes had not remounted their space
    /// with the new leader yet; nothing was taken or read) is made again too. `masters` is
    /// used only while it names none. Default none: `masters` in order.
    pub leader: Option<tokio::sync::watch::Receiver<Option<Endpoint>>>,
    /// The cluster token: presented to the masters and used by the client's engine on every
    /// connection it makes or accepts (peers must present it too). `engine.token` must be
    /// unset or the same. Default none.
    pub token: Option<Token>,
    /// Bytes of engine memory mounted as store space (0: a pure client). Default 0.
    pub store_size: u64,
    /// Pre-fault the store space at start. Default true.
    pub prefault: bool,
    /// Registered staging memory for `put` and `get` of plain byte slices (larger values get a
    /// temporary buffer); local-only, like those temporary buffers: peers cannot reach it.
    /// Default 64 MiB.
    pub staging_size: u64,
    /// The client's Transfer Engine. Its `metadata` is where the engine publishes its
    /// descriptor and looks up the nodes it transfers with: the embedded P2P metadata by
    /// default, or a store such as `yuebing_etcd::EtcdMetadata` (a node's store space is
    /// published there before it is mounted).
    pub engine: EngineConfig,
    /// Interval between pings to the master. Default 1 s (the master's TTL defaults to 10 s).
    pub heartbeat: Duration,
    /// Deadline of a call that sets none. Default 30 s.
    pub deadline: Duration,
    /// Safety margin taken off a read lease: a transfer must end this long before the lease
    /// does, or the get fails with `LeaseExpired`. Default 100 ms (at most a quarter of the
    /// lease).
    pub lease_margin: Duration,
    /// Locations of objects read, kept while their read leases last, so that a read of the
    /// same key goes straight to a replica, one round trip instead of two (see
    /// [`Options::uncached`](crate::Options)); at most this many, the least recently used
    /// dropped first (16384 take about 4 MiB at most; more than 4194304 is refused). Default 0:
    /// none kept, each read asks the master. With it, a read may return a value another
    /// client has replaced or removed since, for up to a read lease (a version that was
    /// current at some moment of its lease, never torn bytes); this client's own writes are
    /// always read back.
    pub lease_cache: usize,
    /// Bytes of store space asked of the master at a time as a grant, placed ahead of this
    /// client's small puts: a put of at most a sixteenth of it, with one replica and no
    /// preferred node, writes into a grant at once and needs one master round trip (its
    /// publication) instead of two. The master counts grants as used space and limits them
    /// per client (`master.grant_max_bytes`); they go back when the client drops, or at the
    /// end of its lease. Default 0: no grants, every put places its space at the master.
    pub grant_size: u64,
    /// A node whose transfer just failed is tried last for this long. Default 2 s.
    pub avoid_failed_for: Duration,
    /// Replica settings of `put` when the caller gives none.
    pub put: PutConfig,
    /// Where the client's metrics go: its own, its calls to the masters' and its engine's
    /// (unless `engine.metrics` names another sink). By default a Prometheus registry of its
    /// own, which [`Client::serve_admin`](crate::Client::serve_admin)'s `/metrics` renders;
    /// [`MetricsRegistry::off`] records nothing.
    pub metrics: MetricsRegistry,
}

impl ClientConfig {
    /// Refuses settings a client cannot run with, before it starts anything: a heartbeat of 0
    /// (it would ping without pause) and a default deadline of 0 (every call would time out).
    pub(crate) fn check(&self) -> crate::Result<()> {
        let zero = |name: &str| {
            crate::Error::params(format!("ClientConfig.{name} is 0; it must be positive"))
        };
        if self.heartbeat.is_zero() {
            return Err(zero("heartbeat"));
        }
        if self.deadline.is_zero() {
            return Err(zero("deadline"));
        }
        // The cache's table is sized for all its entries at start.
        if self.lease_cache > MAX_LEASE_CACHE {
            return Err(crate::Error::params(format!(
                "ClientConfig.lease_cache is {}; at most {MAX_LEASE_CACHE} locations are kept",
                self.lease_cache
            )));
        }
        Ok(())
    }
}

/// The most locations a client's lease cache keeps (about 1 GiB at most; its table is made
/// for all of them when the client starts).
pub(crate) const MAX_LEASE_CACHE: usize = 1 << 22;

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            masters: Vec::new(),
            leader: None,
            token: None,
            store_size: 0,
            prefault: true,
            staging_size: 64 << 20,
            engine: EngineConfig::default(),
            heartbeat: Duration::from_secs(1),
            deadline: Duration::from_secs(30),
            lease_margin: Duration::from_millis(100),
            lease_cache: 0,
            grant_size: 0,
            avoid_failed_for: Duration::from_secs(2),
            put: PutConfig::default(),
            metrics: MetricsRegistry::default(),
        }
    }
}
