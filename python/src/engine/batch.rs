//! The `Engine`'s batches of transfers: allocate, submit (with a notification), wait, status,
//! cancel, free; and the notifications received. Each starts with `Engine::engine`, which
//! refuses a forked child (`Forked`) before the engine's state is touched.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use yuebing_engine::{BatchId, SegmentHandle, TransferRequest};

use super::{span, Engine};
use crate::errors;
use crate::options::duration;
use crate::pins::Write;
use crate::types::{BatchStatus, TaskStatus};
use crate::wait::run;

fn id(batch: u64) -> BatchId {
    BatchId::from_u64(batch)
}

#[pymethods]
impl Engine {
    /// A new batch for up to `capacity` transfers; returns its id.
    fn allocate_batch(&self, py: Python<'_>, capacity: usize) -> PyResult<u64> {
        let batch = self
            .engine(py)?
            .allocate_batch(capacity)
            .map_err(|err| errors::to_py(py, &err))?;
        Ok(batch.to_u64())
    }

    /// Starts `requests` in `batch`: each `(opcode, local_addr, segment, remote_addr,
    /// length)` with opcode "read" or "write"; the local range must be registered (`register`
    /// or `allocate`) and stay so until its task is final. With `notify` (bytes, ≤ 4 KiB),
    /// the target segment (one for all requests) receives it once every task completed.
    /// Returns the tasks' indices. A bad request (a null address, length 0, a range that
    /// wraps; a "read" into a read-only registration, or a "write" to this engine's own
    /// segment that lands in one) raises `InvalidArgument` naming it, and none starts. The
    /// requests are checked, then started under the registrations' lock once none writes into
    /// read-only memory (`Pins::submit`).
    #[pyo3(signature = (batch, requests, *, notify=None, timeout=None))]
    fn submit(
        &self,
        py: Python<'_>,
        batch: u64,
        requests: Vec<(String, u64, u64, u64, u64)>,
        notify: Option<Vec<u8>>,
        timeout: Option<f64>,
    ) -> PyResult<(usize, usize)> {
        let deadline = timeout.map(|t| duration(py, t, "timeout")).transpose()?;
        let pins = self.pins(py)?;
        let engine = pins.engine();
        let own = engine.engine().own_segment();
        let mut reqs = Vec::with_capacity(requests.len());
        let mut writes = Vec::new();
        for (i, r) in requests.into_iter().enumerate() {
            let (req, write) = request(py, i, r, own, deadline)?;
            reqs.push(req);
            writes.extend(write);
        }
        let start = || match notify {
            None => engine.submit(id(batch), &reqs),
            Some(message) => engine.bridge().usable().and_then(|()| {
                Ok(engine
                    .engine()
                    .submit_with_notify(id(batch), &reqs, message)?)
            }),
        };
        let range = pins.submit(py, batch, &writes, start)?;
        Ok((range.start, range.end))
    }

    /// Blocks until every task of `batch` is final; returns its `BatchStatus`. Ctrl-C stops
    /// the wait, not the transfers (`cancel` does).
    fn wait(&self, py: Python<'_>, batch: u64) -> PyResult<BatchStatus> {
        let engine = self.engine(py)?;
        let (e, batch) = (engine.engine().clone(), id(batch));
        let status = run(py, engine.bridge(), || async move { e.wait(batch).await })?;
        Ok(BatchStatus::new(py, status))
    }

    /// The `BatchStatus` of `batch` now.
    fn status(&self, py: Python<'_>, batch: u64) -> PyResult<BatchStatus> {
        let status = self
            .engine(py)?
            .status(id(batch))
            .map_err(|err| errors::to_py(py, &err))?;
        Ok(BatchStatus::new(py, status))
    }

    /// The `TaskStatus` of task `task` of `batch` now.
    fn task_status(&self, py: Python<'_>, batch: u64, task: usize) -> PyResult<TaskStatus> {
        let status = self
            .engine(py)?
            .task_status(id(batch), task)
            .map_err(|err| errors::to_py(py, &err))?;
        Ok(TaskStatus::new(py, status))
    }

    /// Cancels the unfinished tasks of `batch`; returns how many.
    fn cancel(&self, py: Python<'_>, batch: u64) -> PyResult<usize> {
        self.engine(py)?
            .cancel(id(batch))
            .map_err(|err| errors::to_py(py, &err))
    }

    /// Frees `batch`, whose tasks must all be final (`Busy` otherwise).
    fn free_batch(&self, py: Python<'_>, batch: u64) -> PyResult<()> {
        self.engine(py)?
            .free_batch(id(batch))
            .map_err(|err| errors::to_py(py, &err))
    }

    /// Takes the notifications received so far, oldest first: `[(from_segment, message)]`.
    fn take_notifications<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(String, Bound<'py, PyBytes>)>> {
        let taken = self.engine(py)?.engine().take_notifications();
        Ok(taken
            .into_iter()
            .map(|n| (n.from, PyBytes::new(py, &n.message)))
            .collect())
    }
}

/// Request `i`, `(opcode, local_addr, segment, remote_addr, length)`, as a request, and the
/// range it writes in this engine's registered memory if it does (see [`Write`]): the local
/// side of a read, the target of a write to the engine's own segment (`own`).
fn request(
    py: Python<'_>,
    i: usize,
    (op, local, segment, remote, len): (String, u64, u64, u64, u64),
    own: SegmentHandle,
    deadline: Option<std::time::Duration>,
) -> PyResult<(TransferRequest, Option<Write>)> {
    let what = format!("requests[{i}]");
    let target = SegmentHandle::from_raw(segment);
    let local_range = span(py, local, len, &format!("{what}: local_addr"))?;
    let remote_range = span(py, remote, len, &format!("{what}: remote_addr"))?;
    let (req, writes) = match op.as_str() {
        "read" => (
            TransferRequest::read(local, target, remote, len),
            Some(Write {
                range: local_range,
                what: format!("{what}: the destination of a read"),
                target_of: None,
            }),
        ),
        "write" => (
            TransferRequest::write(local, target, remote, len),
            (target == own).then(|| Write {
                range: remote_range,
                what: format!("{what}: the target of a write to the engine's own segment"),
                target_of: Some(i),
            }),
        ),
        other => {
            return Err(errors::invalid(
                py,
                &format!("{what}: opcode {other:?} is not \"read\" or \"write\""),
            ))
        }
    };
    let req = match deadline {
        Some(d) => req.with_deadline(d),
        None => req,
    };
    Ok((req, writes))
}
