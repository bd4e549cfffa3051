//! `yuebing.Store`: a client of a running yuebing store (a `yuebing master` and its nodes),
//! over the bridge's [`BlockingClient`]. Its Python methods are grouped as the Rust client's
//! calls are, each group one `#[pymethods]` block with the helpers it alone uses:
//!
//! - this file: the class, opening and closing it, and the memory registered with its engine;
//! - [`open`]: the settings of a new store and its start (on an engine of its own or a shared
//!   `Engine`);
//! - [`write`]: puts and upserts, one key or a batch, copied or from the caller's memory;
//! - [`read`]: gets, into new `bytes` or the caller's memory, and the located reads;
//! - [`sessions`]: ranged sessions, a batch located or reserved once and moved in ranges;
//! - [`space`]: store space mounted and unmounted while the store runs;
//! - [`keys`]: what the store knows of its keys: existence, sizes, replicas, removal,
//!   listing, health and statistics;
//! - [`ranges`]: the caller's memory of a zero-copy batch, held registered for the call.

mod keys;
mod open;
mod ranges;
mod read;
mod sessions;
mod space;
mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use yuebing_bridge::BlockingClient;
use yuebing_engine::RemoteAccess;
use yuebing_store::master::PutConfig;
use yuebing_store::Client;

use self::open::Settings;
use crate::engine::Engine;
use crate::memory::{Access, Memory};
use crate::options::{self, Replicas};
use crate::pins::Pins;
use crate::runtime::ForkSafe;
use crate::wait;

/// A client of a yuebing store: put and get byte values by key, zero-copy from and into your
/// own memory, one key or a batch at a time.
///
/// `Store(masters, *, token=None, store_size=0, staging_size="64MiB", timeout=30.0,
/// prefault=True, bind="127.0.0.1:0", transport=None, rdma_nics=None, replicas=1,
/// engine=None, lease_cache=0, grant_size=0)` connects to the
/// master(s) (`"host:port"`, a comma-separated list, or a list; tried in order; or
/// `"etcd://host:port[,host:port]/CLUSTER"`, the master elected in that cluster, found through
/// etcd and followed when leadership changes: a package built with the `etcd` feature, else
/// `EtcdNotBuilt`) and, with
/// `store_size` > 0, contributes that much of this process's memory as store space. Sizes are
/// ints or text ("64MiB", "1G"); times are seconds. With `engine` (a `yuebing.Engine`, started
/// with the same `token`) the store runs on that engine instead of one of its own: its segment
/// is the engine's, its registrations are shared, and the engine stays usable after `close`.
/// `rdma_nics` chooses the RDMA NICs of its own engine: None or "auto" (every active one),
/// "off", or names, comma-separated ("mlx5_0,mlx5_1"); a package built without the `rdma`
/// feature (see `yuebing.FEATURES`) takes "auto" and "off" only. Where no NIC can be used,
/// peers on other hosts are reached over tcp: `Store.engine.transports` says whether rdma is
/// in use.
///
/// Fewer round trips to the master, both off by default: `lease_cache=N` keeps the locations
/// of up to N objects read while their read leases last, so that reading one again goes
/// straight to its replica (another client's later write of it may go unseen for up to a
/// lease; this Store's own writes are always read back; `uncached=True` on a read asks the
/// master). `grant_size` (e.g. "16MiB") has the master set that much store space aside for
/// this Store at a time: a put of at most a sixteenth of it, with one replica, writes there
/// at once and needs one round trip instead of two; the space counts as used while this
/// Store holds it.
///
/// Every call blocks only its thread, with the GIL released, and Ctrl-C cancels it
/// (`KeyboardInterrupt`). Errors are `yuebing.YuebingError` subclasses carrying `.code` and
/// `.name` (`ObjectNotFound`, `ObjectAlreadyExists`, …). A Store is safe to share between
/// threads. After `os.fork()` the child's calls on an inherited Store raise `Forked`: make a
/// new Store in the child.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct Store {
    client: ForkSafe<BlockingClient>,
    pins: ForkSafe<Arc<Pins>>,
    put_default: PutConfig,
    closed: AtomicBool,
    /// The admin HTTP server of `serve_admin`, stopped at `close`; a forked child leaves it
    /// alone (its stop would wake tasks of the parent's runtime).
    admin: ForkSafe<std::sync::Mutex<Option<yuebing_store::http::AdminServer>>>,
}

impl Store {
    /// Stops the admin server, if one runs; its port is free once this returns.
    fn stop_admin(&self, py: Python<'_>) -> PyResult<()> {
        let server = self.lock_admin(py)?.take();
        if let Some(server) = server {
            py.detach(|| server.stop());
        }
        Ok(())
    }

    fn lock_admin(
        &self,
        py: Python<'_>,
    ) -> PyResult<std::sync::MutexGuard<'_, Option<yuebing_store::http::AdminServer>>> {
        Ok(self
            .admin
            .get(py)?
            .lock()
            .unwrap_or_else(|p| p.into_inner()))
    }

    /// The client, unless this is a forked child (`Forked`) or the store was closed.
    pub(crate) fn client(&self, py: Python<'_>) -> PyResult<&BlockingClient> {
        let client = self.client.get(py)?;
        match self.closed.load(Ordering::Acquire) {
            true => Err(PyValueError::new_err("the store is closed")),
            false => Ok(client),
        }
    }

    /// The registrations of the client's engine, unless this is a forked child (`Forked`).
    pub(crate) fn pins(&self, py: Python<'_>) -> PyResult<&Pins> {
        Ok(self.pins.get(py)?)
    }

    /// Makes `call` on the store's client and waits for it, both with the GIL released (see
    /// [`wait::run_store`]): making a put copies its value into staging memory, and may register a
    /// temporary buffer when staging is full.
    pub(crate) fn run<T, F>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Client) -> F + Send,
    ) -> PyResult<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = yuebing_store::Result<T>> + Send + 'static,
    {
        wait::run_store(py, self.client(py)?, call)
    }

    /// The options of a put with these keyword arguments.
    pub(crate) fn put_options(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        replicas: Replicas,
    ) -> PyResult<yuebing_store::Options> {
        options::put(py, timeout, replicas, &self.put_default)
    }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (masters, *, token=None, store_size=None, staging_size=None, timeout=30.0,
        prefault=true, bind=open::DEFAULT_BIND, transport=None, rdma_nics=None, replicas=1,
        engine=None, lease_cache=0, grant_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        masters: &Bound<'_, PyAny>,
        token: Option<String>,
        store_size: Option<&Bound<'_, PyAny>>,
        staging_size: Option<&Bound<'_, PyAny>>,
        timeout: f64,
        prefault: bool,
        bind: &str,
        transport: Option<&str>,
        rdma_nics: Option<&str>,
        replicas: u32,
        engine: Option<&Bound<'_, Engine>>,
        lease_cache: usize,
        grant_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Store> {
        let engine = engine.map(Bound::get);
        let settings = Settings {
            masters,
            token,
            store_size,
            staging_size,
            timeout,
            prefault,
            bind,
            transport,
            rdma_nics,
            replicas,
            lease_cache,
            grant_size,
            engine,
        };
        let (cfg, masters) = open::client_config(py, settings)?;
        let put_default = cfg.put.clone();
        let (client, pins) = open::start(py, cfg, masters, engine)?;
        Ok(Store {
            client: ForkSafe::new(client),
            pins: ForkSafe::new(pins),
            put_default,
            closed: AtomicBool::new(false),
            admin: ForkSafe::new(std::sync::Mutex::new(None)),
        })
    }

    /// Registers `buffer` (any C-contiguous buffer, or an int address with `size`) with the
    /// store's engine until `unregister_buffer`, so that `put_from` and `get_into` on it (or on
    /// any part of it) skip the registration. A Python buffer is held meanwhile: it can be
    /// neither freed nor resized. Returns its address. Overlapping a registered range raises
    /// `AddressOverlapped`. Read-only memory (a `bytes`, a read-only mmap or memoryview) is a
    /// source only: `get_into` or `batch_get_into` into it raises `InvalidArgument`. An int
    /// address is taken as writable memory.
    #[pyo3(signature = (buffer, size=None))]
    fn register_buffer(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
    ) -> PyResult<u64> {
        self.client(py)?;
        let mem = Memory::from_py(buffer, size, Access::Read, "buffer")?;
        self.pins(py)?.register(py, mem, RemoteAccess::LOCAL_ONLY)
    }

    /// Ends a registration made by `register_buffer` (give the buffer or its address). Calls
    /// using it now fail; none touches the memory once this returns. An address that was not
    /// registered raises `AddressNotRegistered`.
    fn unregister_buffer(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<()> {
        let addr = crate::engine::address_of(buffer, "buffer")?;
        self.pins(py)?.unregister(py, addr)
    }

    /// The store's Transfer Engine (its segment is `segment_name`): register memory, open
    /// peers' segments and transfer with it.
    #[getter]
    fn engine(&self) -> Engine {
        Engine::shared(self.pins.clone())
    }

    /// The name of this client's engine segment (`host:port`): where its store space lives.
    #[getter]
    fn segment_name(&self) -> String {
        self.client
            .any_process()
            .client()
            .engine()
            .name()
            .to_string()
    }

    /// The name this client's node goes by in the cluster: its segment name, the `node` of
    /// the replicas in its store space (Mooncake's `get_hostname`).
    #[getter]
    fn hostname(&self) -> String {
        self.client.any_process().hostname().to_string()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Leaves the cluster gracefully: the master places no new replica in this store's space
    /// (its replicas stay readable while this process lives). Later calls raise ValueError.
    /// Closing twice does nothing.
    #[pyo3(signature = (*, timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let opts = options::call(py, timeout)?;
        let client = self.client.get(py)?;
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_admin(py)?;
        wait::run_store(py, client, |c| c.close(&opts))
    }

    /// Serves this store's admin HTTP paths on `bind` ("host:port"; port 0 picks one):
    /// `/health` (Mooncake's client JSON), `/ready` (200 while the master confirmed this store
    /// with its space mounted within three heartbeats, else 503) and `/metrics` (Prometheus
    /// text). Returns the address it listens on. Served until `close`; asking again replaces
    /// the server. Nothing is served unless asked, so several stores on one machine never
    /// collide.
    #[pyo3(signature = (bind="127.0.0.1:0"))]
    fn serve_admin(&self, py: Python<'_>, bind: &str) -> PyResult<String> {
        // The one before stops first, so that the same address can be asked for again.
        self.stop_admin(py)?;
        let server = self.run(py, |c| c.serve_admin(bind))?;
        let addr = server.local_addr().to_string();
        let mut held = self.lock_admin(py)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(PyValueError::new_err("the store is closed"));
        }
        *held = Some(server);
        Ok(addr)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py, None)
    }

    fn __repr__(&self) -> String {
        let state = match self.closed() {
            true => " closed",
            false => "",
        };
        format!("<yuebing.Store segment={}{state}>", self.segment_name())
    }
}
