//! The small result classes: an object of a listing, where an object's replicas are, a located
//! object, a batch's and a task's status.

use pyo3::prelude::*;
use yuebing_engine::TaskState;

use crate::errors;

/// One object of `Store.list`: its key, size in bytes and number of replicas.
#[pyclass(module = "yuebing._native", frozen, get_all, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectInfo {
    /// The key.
    key: String,
    /// Size in bytes.
    size: u64,
    /// Replicas it has.
    replicas: u32,
}

#[pymethods]
impl ObjectInfo {
    fn __repr__(&self) -> String {
        format!(
            "ObjectInfo(key={:?}, size={}, replicas={})",
            self.key, self.size, self.replicas
        )
    }
}

impl From<yuebing_store::master::ListedObject> for ObjectInfo {
    fn from(o: yuebing_store::master::ListedObject) -> Self {
        ObjectInfo {
            key: o.key,
            size: o.size,
            replicas: o.replicas,
        }
    }
}

/// Where an object's replicas are (`Store.replicas`): its size, each replica as
/// `(node, addr, len)` (the node's segment name, the address in that node's engine, the length)
/// and the read lease the master granted with the answer, in milliseconds.
#[pyclass(module = "yuebing._native", frozen, get_all, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// The object's size in bytes.
    size: u64,
    /// `(node, addr, len)` of each readable replica, in placement order.
    replicas: Vec<(String, u64, u64)>,
    /// How long the read lease lasts (milliseconds).
    lease_ms: u64,
}

#[pymethods]
impl Replicas {
    fn __len__(&self) -> usize {
        self.replicas.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Replicas(size={}, replicas={:?}, lease_ms={})",
            self.size, self.replicas, self.lease_ms
        )
    }
}

impl From<yuebing_store::master::ReplicaList> for Replicas {
    fn from(l: yuebing_store::master::ReplicaList) -> Self {
        Replicas {
            size: l.size,
            replicas: l
                .replicas
                .into_iter()
                .map(|d| (d.node, d.addr, d.len))
                .collect(),
            lease_ms: l.lease_ms,
        }
    }
}

/// A copy or move task as the master reports it (`Store.query_task`): `id` (Mooncake's pair
/// of halves), `kind` (`"REPLICA_COPY"` or `"REPLICA_MOVE"`), `state` (`"PENDING"`,
/// `"PROCESSING"`, `"SUCCESS"` or `"FAILED"`), `key`, `created_ms` and `updated_ms` (ms since
/// the Unix epoch, the master's clock), `client` (the id of the client that runs it, hex) and
/// `message` (why it failed).
#[pyclass(module = "yuebing._native", frozen, get_all, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplicaTask {
    id: (u64, u64),
    kind: &'static str,
    state: &'static str,
    key: String,
    created_ms: u64,
    updated_ms: u64,
    client: String,
    message: String,
}

#[pymethods]
impl ReplicaTask {
    fn __repr__(&self) -> String {
        format!(
            "ReplicaTask(id={:?}, kind={}, state={}, key={:?}, message={:?})",
            self.id, self.kind, self.state, self.key, self.message
        )
    }
}

impl From<yuebing_store::master::TaskInfo> for ReplicaTask {
    fn from(t: yuebing_store::master::TaskInfo) -> Self {
        ReplicaTask {
            id: t.id.halves(),
            kind: t.kind.name(),
            state: t.state.name(),
            key: t.key,
            created_ms: t.created_ms,
            updated_ms: t.updated_ms,
            client: t.client.to_string(),
            message: t.message,
        }
    }
}

/// An object found by `Store.locate` (or `Store.get_or_locate`), not read yet: its `key` and
/// `size`, under the read lease the lookup took. Read it with `Store.read_located` into memory
/// of at least `size` bytes before the lease ends (else `LeaseExpired`: locate it again), as
/// often as wanted.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct Location(pub(crate) yuebing_store::Located);

#[pymethods]
impl Location {
    /// The object's key.
    #[getter]
    fn key(&self) -> &str {
        self.0.key()
    }

    /// The object's size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn __repr__(&self) -> String {
        format!("Location(key={:?}, size={})", self.0.key(), self.0.size())
    }
}

/// Space reserved for one object by `Store.batch_reserve`, not readable yet: `key`, `size`,
/// and `sealed` (its publication or revocation has started: it takes no more writes). Write it
/// with `Store.batch_write_reserved`, then `Store.batch_publish` or `Store.batch_revoke` it.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct Reservation(pub(crate) yuebing_store::Reservation);

#[pymethods]
impl Reservation {
    /// The object's key.
    #[getter]
    fn key(&self) -> &str {
        self.0.key()
    }

    /// The object's size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.0.size()
    }

    /// Whether its publication or revocation has started.
    #[getter]
    fn sealed(&self) -> bool {
        self.0.sealed()
    }

    fn __repr__(&self) -> String {
        format!(
            "Reservation(key={:?}, size={}, sealed={})",
            self.0.key(),
            self.0.size(),
            self.0.sealed()
        )
    }
}

/// A task state's name: "waiting", "pending", "completed", "failed", "timeout", "canceled".
pub(crate) fn state_name(s: TaskState) -> &'static str {
    match s {
        TaskState::Waiting => "waiting",
        TaskState::Pending => "pending",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Timeout => "timeout",
        TaskState::Canceled => "canceled",
    }
}

/// The status of a batch of transfers (`Engine.wait`, `Engine.status`).
#[pyclass(module = "yuebing._native", frozen, get_all)]
pub(crate) struct BatchStatus {
    /// "waiting" or "pending" while a task is unfinished; "completed" when all completed;
    /// else the worst final state ("failed", then "timeout", then "canceled").
    state: &'static str,
    /// Tasks submitted.
    tasks: usize,
    /// Tasks completed.
    completed: usize,
    /// Bytes moved over all tasks.
    bytes: u64,
    /// The first error of the worst state (a `YuebingError` instance), or `None`.
    error: Option<Py<PyAny>>,
    /// Why the batch's notification was not delivered, or `None`.
    notify_error: Option<Py<PyAny>>,
}

#[pymethods]
impl BatchStatus {
    /// Whether no task of the batch will change any more.
    #[getter]
    fn done(&self) -> bool {
        !matches!(self.state, "waiting" | "pending")
    }

    fn __repr__(&self) -> String {
        format!(
            "BatchStatus(state={:?}, tasks={}, completed={}, bytes={})",
            self.state, self.tasks, self.completed, self.bytes
        )
    }
}

impl BatchStatus {
    pub(crate) fn new(py: Python<'_>, s: yuebing_engine::BatchStatus) -> BatchStatus {
        BatchStatus {
            state: state_name(s.state),
            tasks: s.tasks,
            completed: s.completed,
            bytes: s.bytes,
            error: s.error.map(|e| engine_error(py, e)),
            notify_error: s.notify_error.map(|e| engine_error(py, e)),
        }
    }
}

/// The status of one task of a batch (`Engine.task_status`).
#[pyclass(module = "yuebing._native", frozen, get_all)]
pub(crate) struct TaskStatus {
    /// "waiting", "pending", "completed", "failed", "timeout" or "canceled".
    state: &'static str,
    /// Bytes moved so far.
    bytes: u64,
    /// Bytes asked for.
    length: u64,
    /// Why it failed (a `YuebingError` instance), or `None`.
    error: Option<Py<PyAny>>,
}

#[pymethods]
impl TaskStatus {
    fn __repr__(&self) -> String {
        format!(
            "TaskStatus(state={:?}, bytes={}, length={})",
            self.state, self.bytes, self.length
        )
    }
}

impl TaskStatus {
    pub(crate) fn new(py: Python<'_>, s: yuebing_engine::TaskStatus) -> TaskStatus {
        TaskStatus {
            state: state_name(s.state),
            bytes: s.bytes,
            length: s.len,
            error: s.error.map(|e| engine_error(py, e)),
        }
    }
}

fn engine_error(py: Python<'_>, e: yuebing_engine::Error) -> Py<PyAny> {
    errors::engine(py, e).into_value(py).into_any()
}
