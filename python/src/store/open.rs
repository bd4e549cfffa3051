//! Opening a `Store`: its keyword arguments, its client's settings, and its start on an
//! engine of its own or a shared `Engine`.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use yuebing_bridge::masters::is_etcd_address;
use yuebing_bridge::{BlockingClient, BlockingEngine, Masters};
use yuebing_rpc::Token;
use yuebing_store::ClientConfig;

use crate::engine::Engine;
use crate::errors;
use crate::options;
use crate::pins::Pins;
use crate::runtime;
use crate::wait::wait;

/// `Store(bind=...)`'s default: an ephemeral port of the loopback interface.
pub(crate) const DEFAULT_BIND: &str = "127.0.0.1:0";

/// The keyword arguments of `Store(...)`.
pub(crate) struct Settings<'a, 'py> {
    pub(crate) masters: &'a Bound<'py, PyAny>,
    pub(crate) token: Option<String>,
    pub(crate) store_size: Option<&'a Bound<'py, PyAny>>,
    pub(crate) staging_size: Option<&'a Bound<'py, PyAny>>,
    pub(crate) timeout: f64,
    pub(crate) prefault: bool,
    pub(crate) bind: &'a str,
    pub(crate) transport: Option<&'a str>,
    /// The RDMA NICs of its own engine ("auto", "off" or names).
    pub(crate) rdma_nics: Option<&'a str>,
    pub(crate) replicas: u32,
    /// Locations of objects read kept while their leases last (`ClientConfig::lease_cache`).
    pub(crate) lease_cache: usize,
    /// Store space asked for ahead of small puts (`ClientConfig::grant_size`).
    pub(crate) grant_size: Option<&'a Bound<'py, PyAny>>,
    /// An `Engine` to run on (then `bind`, `transport` and `rdma_nics` are the engine's).
    pub(crate) engine: Option<&'a Engine>,
}

/// Where the masters are: `"host:port"`, a comma-separated list or a list of them, or one
/// `"etcd://host:port[,host:port]/CLUSTER"` (the elected leader, found through etcd).
fn masters(py: Python<'_>, masters: &Bound<'_, PyAny>) -> PyResult<Masters> {
    let text: String = match masters.cast::<PyString>() {
        Ok(text) => text.to_str()?.to_string(),
        Err(_) => {
            let list: Vec<String> = masters.extract().map_err(|_| {
                PyTypeError::new_err(
                    "masters must be \"host:port\", a comma-separated list, a list, or \
                     \"etcd://host:port[,host:port]/CLUSTER\"",
                )
            })?;
            if list.len() > 1 && list.iter().any(|m| is_etcd_address(m)) {
                return Err(errors::invalid(
                    py,
                    "masters: an etcd:// address names every master: give it alone",
                ));
            }
            list.join(",")
        }
    };
    if text.split(',').all(|m| m.trim().is_empty()) {
        return Err(errors::invalid(py, "masters: no master address given"));
    }
    Masters::parse(&text).map_err(|e| errors::to_py(py, &e))
}

/// The client configuration `settings` ask for, and where its masters are (put into it by
/// [`start`]).
pub(crate) fn client_config(
    py: Python<'_>,
    s: Settings<'_, '_>,
) -> PyResult<(ClientConfig, Masters)> {
    let rpc = |e: yuebing_rpc::Error| errors::to_py(py, &e.into());
    let masters = masters(py, s.masters)?;
    let token = s.token.map(Token::new).transpose().map_err(rpc)?;
    let transport = crate::engine::transport_kind(py, s.transport)?;
    if s.engine.is_some()
        && (s.transport.is_some() || s.rdma_nics.is_some() || s.bind != DEFAULT_BIND)
    {
        return Err(errors::invalid(
            py,
            "bind, transport and rdma_nics are the engine's settings: give them to \
             yuebing.Engine(...)",
        ));
    }
    if s.replicas == 0 {
        return Err(errors::invalid(py, "replicas must be at least 1"));
    }
    let defaults = ClientConfig::default();
    let size = |obj: Option<&Bound<'_, PyAny>>, what, default| match obj {
        None => Ok(default),
        Some(o) => options::size(o, what),
    };
    let mut cfg = ClientConfig {
        token,
        store_size: size(s.store_size, "store_size", 0)?,
        staging_size: size(s.staging_size, "staging_size", defaults.staging_size)?,
        lease_cache: s.lease_cache,
        grant_size: size(s.grant_size, "grant_size", defaults.grant_size)?,
        prefault: s.prefault,
        deadline: options::duration(py, s.timeout, "timeout")?,
        engine: crate::engine::engine_config(py, s.bind, transport, s.rdma_nics)?,
        ..defaults
    };
    cfg.put.replica_num = s.replicas;
    Ok((cfg, masters))
}

/// Starts the client of a new store whose masters are `masters`: with an engine of its own,
/// or (`engine`) on that `Engine`, whose registrations it then shares. Returns the client and
/// the registrations of its engine.
pub(crate) fn start(
    py: Python<'_>,
    cfg: ClientConfig,
    masters: Masters,
    engine: Option<&Engine>,
) -> PyResult<(BlockingClient, Arc<Pins>)> {
    match engine {
        None => {
            let bridge = runtime::bridge(py)?;
            let cfg = wait(py, masters.apply_call(&bridge, cfg))?;
            let client = wait(py, BlockingClient::start_call(&bridge, cfg))?;
            let own = BlockingEngine::from_engine(&bridge, client.client().engine().clone());
            Ok((client, Arc::new(Pins::new(own))))
        }
        Some(engine) => {
            // On the engine's bridge: in a forked child that refuses with `Forked` rather than
            // waiting on the parent's runtime, whose threads do not exist there.
            let shared = engine.engine(py)?;
            let cfg = wait(py, masters.apply_call(shared.bridge(), cfg))?;
            let call =
                BlockingClient::with_engine_call(shared.bridge(), cfg, shared.engine().clone());
            let client = wait(py, call)?;
            Ok((client, Arc::clone(engine.pins(py)?)))
        }
    }
}
