//! What the `Store` knows of its keys and of itself: existence and sizes, replicas, removal,
//! copy and move tasks, listing, health and statistics.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use yuebing_store::master::TaskId;
use yuebing_store::ClientHealth;

use super::Store;
use crate::errors;
use crate::options;
use crate::types::{self, ObjectInfo, ReplicaTask};
use crate::wait::run_store;

#[pymethods]
impl Store {
    /// Whether `key` exists (a completed object).
    #[pyo3(signature = (key, *, timeout=None))]
    fn exist(&self, py: Python<'_>, key: &str, timeout: Option<f64>) -> PyResult<bool> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.exist(key, &opts))
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

    /// Drops the replicas of `keys` on node `node` (all their replicas when `node` is "")
    /// where nothing uses the object: no read lease, no write in progress, no access for a
    /// lease TTL; an object left with no replica is removed. Returns the keys cleared.
    #[pyo3(signature = (keys, node="", *, timeout=None))]
    fn batch_replica_clear(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        node: &str,
        timeout: Option<f64>,
    ) -> PyResult<Vec<String>> {
        let opts = options::call(py, timeout)?;
        self.run(py, |c| c.batch_replica_clear(&keys, node, &opts))
    }

    /// Asks the master to add a replica of `key` on each of `targets` (node names), run in the
    /// background by a client holding a source replica; returns the task's id, a pair of ints
    /// (Mooncake's `create_copy_task`). Follow it with `query_task`.
    #[pyo3(signature = (key, targets, *, timeout=None))]
    fn create_copy_task(
        &self,
        py: Python<'_>,
        key: &str,
        targets: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<(u64, u64)> {
        let opts = options::call(py, timeout)?;
        let id = self.run(py, |c| c.create_copy_task(key, &targets, &opts))?;
        Ok(id.halves())
    }

    /// Asks the master to move `key`'s replica on node `source` to node `target`, in the
    /// background; returns the task's id (Mooncake's `create_move_task`).
    #[pyo3(signature = (key, source, target, *, timeout=None))]
    fn create_move_task(
        &self,
        py: Python<'_>,
        key: &str,
        source: &str,
        target: &str,
        timeout: Option<f64>,
    ) -> PyResult<(u64, u64)> {
        let opts = options::call(py, timeout)?;
        let id = self.run(py, |c| c.create_move_task(key, source, target, &opts))?;
        Ok(id.halves())
    }

    /// Where a copy or move task is: a `ReplicaTask`. An unknown id raises `TaskNotFound`.
    #[pyo3(signature = (task_id, *, timeout=None))]
    fn query_task(
        &self,
        py: Python<'_>,
        task_id: (u64, u64),
        timeout: Option<f64>,
    ) -> PyResult<ReplicaTask> {
        let opts = options::call(py, timeout)?;
        let id = TaskId::from_halves(task_id.0, task_id.1);
        self.run(py, |c| c.query_task(id, &opts))
            .map(ReplicaTask::from)
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
        self.run(py, |c| c.remove_by_regex(pattern, force, &opts))
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
        let health = run_store(py, client, |c| {
            let check = c.health_check(&opts);
            async move { Ok(check.await) }
        })?;
        Ok(health.code())
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
}
