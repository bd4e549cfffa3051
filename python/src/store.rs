//! `yuebing.Store`: a client of a running yuebing store (a `yuebing master` and its nodes),
//! over the bridge's [`BlockingClient`]. Every Python method is here (PyO3 takes one
//! `#[pymethods]` block); how single values and caller memory reach the client is in
//! `store_values`; the bodies of the batches over caller memory and of the plain-bytes batch
//! put and upsert, and the settings and start of a new store, are in `store_batch`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use yuebing_bridge::BlockingClient;
use yuebing_engine::RemoteAccess;
use yuebing_store::master::PutConfig;
use yuebing_store::Client;
use yuebing_store::{ClientHealth, Fetched, Write};

use crate::engine::Engine;
use crate::errors;
use crate::memory::{Access, Memory};
use crate::options::{self, Replicas};
use crate::pins::Pins;
use crate::runtime::ForkSafe;
use crate::store_batch::{self, Settings};
use crate::store_values;
use crate::types::{self, Location, ObjectInfo};
use crate::wait::wait;

/// A client of a yuebing store: put and get byte values by key, zero-copy from and into your
/// own memory, one key or a batch at a time.
///
/// `Store(masters, *, token=None, store_size=0, staging_size="64MiB", timeout=30.0,
/// prefault=True, bind="127.0.0.1:0", transport=None, replicas=1, engine=None)` connects to the
/// master(s) (`"host:port"`, a comma-separated list, or a list; tried in order; or
/// `"etcd://host:port[,host:port]/CLUSTER"`, the master elected in that cluster, found through
/// etcd and followed when leadership changes: a package built with the `etcd` feature, else
/// `EtcdNotBuilt`) and, with
/// `store_size` > 0, contributes that much of this process's memory as store space. Sizes are
/// ints or text ("64MiB", "1G"); times are seconds. With `engine` (a `yuebing.Engine`, started
/// with the same `token`) the store runs on that engine instead of one of its own: its segment
/// is the engine's, its registrations are shared, and the engine stays usable after `close`.
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
}

impl Store {
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
    /// [`wait`]): making a put copies its value into staging memory, and may register a
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
        let client = self.client(py)?;
        let started = py.detach(|| client.call(call(client.client())));
        wait(py, started)
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
        prefault=true, bind=store_batch::DEFAULT_BIND, transport=None, replicas=1, engine=None))]
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
        replicas: u32,
        engine: Option<&Bound<'_, Engine>>,
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
            replicas,
            engine,
        };
        let (cfg, masters) = store_batch::client_config(py, settings)?;
        let put_default = cfg.put.clone();
        let (client, pins) = store_batch::start(py, cfg, masters, engine)?;
        Ok(Store {
            client: ForkSafe::new(client),
            pins: ForkSafe::new(pins),
            put_default,
            closed: AtomicBool::new(false),
        })
    }

    /// Stores `value` (bytes, bytearray, memoryview, a numpy array: any C-contiguous buffer)
    /// under `key`. An existing key raises `ObjectAlreadyExists` and keeps its value (see
    /// `upsert`). `replicas`, `preferred` (segment names), `soft_pin` and `hard_pin` override
    /// the store's replica settings for this put. An immutable value (`bytes`, or a
    /// memoryview of one) of 64 KiB or more is sent from its own memory, without a copy; any
    /// other is copied first (for no copy from mutable memory, use `put_from`).
    #[pyo3(signature = (key, value, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_value(py, key, value, opts)
    }

    /// Stores `value` under `key`, replacing an existing value (as `put` otherwise).
    #[pyo3(signature = (key, value, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_value(py, key, value, opts.with_write(Write::Upsert))
    }

    /// Stores the first `size` bytes (all when omitted) of `buffer` under `key` without copying
    /// them: `buffer` is any C-contiguous buffer, or an int address (a tensor's `data_ptr()`)
    /// with `size`, which must stay valid until the call returns. Memory not registered with
    /// `register_buffer` is registered for the call's duration.
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_memory(py, key, (buffer, size), opts)
    }

    /// As `put_from`, replacing an existing value (zero-copy from `buffer`, or an int address
    /// with `size`).
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_memory(py, key, (buffer, size), opts.with_write(Write::Upsert))
    }

    /// Stores the concatenation of `parts` under `key`: each part is any C-contiguous buffer
    /// (bytes, bytearray, memoryview, a numpy array of any dtype), taken by its length in
    /// bytes; the value is copied once into registered memory. An existing key raises
    /// `ObjectAlreadyExists` and keeps its value (see `upsert_parts`).
    #[pyo3(signature = (key, *parts, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn put_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_parts_value(py, key, parts, opts)
    }

    /// As `put_parts`, replacing an existing value.
    #[pyo3(signature = (key, *parts, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn upsert_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<()> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        self.put_parts_value(py, key, parts, opts.with_write(Write::Upsert))
    }

    /// The value of `key` as bytes. A missing key raises `ObjectNotFound` (a `KeyError`).
    #[pyo3(signature = (key, *, timeout=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let opts = options::call(py, timeout)?;
        self.get_value(py, key, &opts)
    }

    /// Reads `key` into `buffer` without a copy and returns the value's size. `buffer` is any
    /// writable C-contiguous buffer (a bytearray, a numpy array), or an int address with
    /// `size`; a read-only one, or memory in a read-only registration (`register_buffer` of a
    /// `bytes`, a read-only mmap), raises `InvalidArgument` and nothing is written. A buffer
    /// smaller than the value raises `InvalidParams` and nothing is written. Memory not
    /// registered with `register_buffer` is registered for the call's duration.
    #[pyo3(signature = (key, buffer, size=None, *, timeout=None))]
    fn get_into(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        self.client(py)?;
        let mem = Memory::from_py(buffer, size, Access::Write, "buffer")?;
        self.read_into(py, mem, |c, addr, len| c.get_into(key, addr, len, &opts))
    }

    /// Finds `key` and takes its read lease (as `get` does: until it ends, `remove` without
    /// `force` raises `ObjectHasLease`), without reading it: a `Location` with the value's
    /// `size`, to read with `read_located` into memory sized for it. A missing key raises
    /// `ObjectNotFound`.
    #[pyo3(signature = (key, *, timeout=None))]
    fn locate(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<Location> {
        let opts = options::call(py, timeout)?;
        Ok(Location(self.run(py, |c| c.locate(key, &opts))?))
    }

    /// The value of `key` as bytes when it has at most `inline_max` bytes (the default: what
    /// `get` reads in one call), else its `Location`, not read yet (read it with
    /// `read_located`): one round trip either way, and no copy of a large value.
    #[pyo3(signature = (key, inline_max=store_values::INLINE_MAX, *, timeout=None))]
    fn get_or_locate(
        &self,
        py: Python<'_>,
        key: &str,
        inline_max: u64,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let opts = options::call(py, timeout)?;
        match self.run(py, |c| c.get_or_locate(key, inline_max, &opts))? {
            Fetched::Value(value) => Ok(PyBytes::new(py, &value).into_any().unbind()),
            Fetched::Located(found) => Ok(Py::new(py, Location(found))?.into_any()),
        }
    }

    /// Reads a located object into `buffer` without a copy and returns its size, as
    /// `get_into` reads a key (any writable C-contiguous buffer, or an int address with
    /// `size`). A buffer smaller than the object raises `InvalidParams` and nothing is
    /// written; a read that cannot end inside the location's lease raises `LeaseExpired`. The
    /// location stays usable: read it again while its lease lasts.
    #[pyo3(signature = (location, buffer, size=None, *, timeout=None))]
    fn read_located(
        &self,
        py: Python<'_>,
        location: &Bound<'_, Location>,
        buffer: &Bound<'_, PyAny>,
        size: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        self.client(py)?;
        let found = &location.get().0;
        let mem = Memory::from_py(buffer, size, Access::Write, "buffer")?;
        self.read_into(py, mem, |c, addr, len| {
            c.read_located(found, addr, len, &opts)
        })
    }

    /// Whether `key` exists (a completed object).
    #[pyo3(signature = (key, *, timeout=None))]
    fn exist(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<bool> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.exist(key, &opts))
    }

    /// The size in bytes of `key`'s value.
    #[pyo3(signature = (key, *, timeout=None))]
    fn get_size(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.get_size(key, &opts))
    }

    /// Removes `key`. A reader's lease (every `get` takes one) makes it raise `ObjectHasLease`
    /// until the lease ends, unless `force`.
    #[pyo3(signature = (key, force=false, *, timeout=None))]
    fn remove(&self, py: Python<'_>, key: &str, force: bool, timeout: Option<f64>) -> PyResult<()> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.remove(key, force, &opts))
    }

    /// Removes every object (`force`: leased ones too); returns how many.
    #[pyo3(signature = (force=false, *, timeout=None))]
    fn remove_all(&self, py: Python<'_>, force: bool, timeout: Option<f64>) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.remove_all(force, &opts))
    }

    /// Removes every object whose key the regular expression `pattern` matches somewhere
    /// (anchor it, `^…$`, for whole keys; `force`: leased ones too); returns how many. A bad
    /// pattern raises `InvalidParams`.
    #[pyo3(signature = (pattern, force=false, *, timeout=None))]
    fn remove_by_regex(
        &self,
        py: Python<'_>,
        pattern: &str,
        force: bool,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        wait(
            py,
            self.client(py)?.call(
                self.client(py)?
                    .client()
                    .remove_by_regex(pattern, force, &opts),
            ),
        )
    }

    /// Removes each key (`force`: even while a reader holds a lease); one entry per key:
    /// `None` when removed, or the `YuebingError` instance (not raised) of a failed item
    /// (`ObjectNotFound`, `ObjectHasLease`, …).
    #[pyo3(signature = (keys, force=false, *, timeout=None))]
    fn batch_remove(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        force: bool,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let each = self.run(py, |c| c.batch_remove(&keys, force, &opts))?;
        errors::items(py, each, |py, ()| Ok(py.None()))
    }

    /// Where `key`'s replicas are: a `Replicas` with the value's `size`, its `replicas` as
    /// `(node, addr, len)` and the `lease_ms` of the read lease this takes, as a `get` does
    /// (until it ends, `remove` without `force` raises `ObjectHasLease`). A missing key
    /// raises `ObjectNotFound`.
    #[pyo3(signature = (key, *, timeout=None))]
    fn replicas(
        &self,
        py: Python<'_>,
        key: &str,
        timeout: Option<f64>,
    ) -> PyResult<types::Replicas> {
        let opts = options::call(py, timeout)?;
        let list = self.run(py, |c| c.replicas(key, &opts))?;
        Ok(types::Replicas::from(list))
    }

    /// `replicas` of each key; one entry per key: a `Replicas`, or the `YuebingError`
    /// instance (not raised) of a failed item (`ObjectNotFound` for a missing key).
    #[pyo3(signature = (keys, *, timeout=None))]
    fn batch_replicas(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let each = self.run(py, |c| c.batch_replicas(&keys, &opts))?;
        errors::items(py, each, |py, list| {
            Ok(Py::new(py, types::Replicas::from(list))?.into_any())
        })
    }

    /// Mooncake's `health_check`: 0 healthy (a master answers and is ready), 1 closed (also
    /// after `close`), 2 no master answered within the call's timeout. It raises only for a
    /// bad `timeout` (ValueError) and, in a forked child, `Forked` for a store the parent
    /// made and did not close (make a new Store in the child); a closed store answers 1.
    #[pyo3(signature = (*, timeout=None))]
    fn health_check(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<i32> {
        let opts = options::call(py, timeout)?;
        if self.closed() {
            return Ok(ClientHealth::Closed.code());
        }
        let client = self.client.get(py)?;
        let check = client.client().health_check(&opts);
        Ok(wait(py, client.call(async move { Ok(check.await) }))?.code())
    }

    /// The objects whose keys start with `prefix`, sorted by key, at most `limit`.
    #[pyo3(signature = (prefix="", limit=1000, *, timeout=None))]
    fn list(
        &self,
        py: Python<'_>,
        prefix: &str,
        limit: u64,
        timeout: Option<f64>,
    ) -> PyResult<Vec<ObjectInfo>> {
        let opts = options::call(py, timeout)?;
        let listed = self.run(py, |c| c.list(prefix, limit, &opts))?;
        Ok(listed.into_iter().map(ObjectInfo::from).collect())
    }

    /// The master's counts: objects, pending_writes, bytes_used, bytes_capacity, nodes,
    /// mounts, clients, evicted, fragmentation, last_seq.
    #[pyo3(signature = (*, timeout=None))]
    fn stats<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        let opts = options::call(py, timeout)?;
        let s = self.run(py, |c| c.stats(&opts))?;
        let d = PyDict::new(py);
        d.set_item("objects", s.objects)?;
        d.set_item("pending_writes", s.pending_writes)?;
        d.set_item("bytes_used", s.bytes_used)?;
        d.set_item("bytes_capacity", s.bytes_capacity)?;
        d.set_item("nodes", s.nodes)?;
        d.set_item("mounts", s.mounts)?;
        d.set_item("clients", s.clients)?;
        d.set_item("evicted", s.evicted)?;
        d.set_item("fragmentation", s.fragmentation)?;
        d.set_item("last_seq", s.last_seq)?;
        Ok(d)
    }

    /// Stores each `(keys[i], values[i])`; returns one entry per key: `None` when stored, or
    /// the `YuebingError` instance (not raised) of a failed item.
    #[pyo3(signature = (keys, values, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        store_batch::batch_put(self, py, keys, values, &opts)
    }

    /// As `batch_put`, replacing existing values; one entry per key: `None`, or the
    /// `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, values, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_upsert(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        store_batch::batch_put(self, py, keys, values, &opts.with_write(Write::Upsert))
    }

    /// Stores each key from its buffer (or int address with `sizes[i]`) without copying;
    /// returns one entry per key: `None`, or the `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        store_batch::batch_put_from(self, py, keys, buffers, sizes, &opts)
    }

    /// As `batch_put_from`, replacing existing values; one entry per key: `None`, or the
    /// `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None, replicas=None,
        preferred=None, soft_pin=false, hard_pin=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_upsert_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = self.put_options(
            py,
            timeout,
            Replicas::of(replicas, preferred, soft_pin, hard_pin),
        )?;
        store_batch::batch_put_from(
            self,
            py,
            keys,
            buffers,
            sizes,
            &opts.with_write(Write::Upsert),
        )
    }

    /// The value of each key; one entry per key: bytes, or the `YuebingError` instance (not
    /// raised) of a failed item (`ObjectNotFound` for a missing key).
    #[pyo3(signature = (keys, *, timeout=None))]
    fn batch_get(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let each = self.run(py, |c| c.batch_get(&keys, &opts))?;
        errors::items(py, each, |py, v| {
            Ok(PyBytes::new(py, &v).into_any().unbind())
        })
    }

    /// Reads each key into its buffer (or int address with `sizes[i]`) without a copy; one
    /// entry per key: the value's size, or the `YuebingError` instance of a failed item.
    #[pyo3(signature = (keys, buffers, sizes=None, *, timeout=None))]
    fn batch_get_into(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffers: Vec<Bound<'_, PyAny>>,
        sizes: Option<Vec<Option<u64>>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        store_batch::batch_get_into(self, py, keys, buffers, sizes, &opts)
    }

    /// Whether each key exists; one entry per key: a bool, or the `YuebingError` instance of a
    /// failed item.
    #[pyo3(signature = (keys, *, timeout=None))]
    fn batch_exist(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let each = self.run(py, |c| c.batch_exist(&keys, &opts))?;
        errors::items(py, each, |py, b| {
            Ok(pyo3::types::PyBool::new(py, b)
                .to_owned()
                .into_any()
                .unbind())
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
        wait(py, client.call(client.client().close(&opts)))
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
