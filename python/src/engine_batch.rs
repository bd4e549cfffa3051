//! The `Engine`'s batches of transfers: allocate, submit (with a notification), wait, status,
//! cancel, free; and the notifications received. Each starts with `Engine::engine`, which
//! refuses a forked child (`Forked`) before the engine's state is touched.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use yuebing_engine::{BatchId, Notification, SegmentHandle, TransferRequest};

use crate::engine::Engine;
use crate::errors;
use crate::options::duration;
use crate::types::{BatchStatus, TaskStatus};
use crate::wait::wait;

fn id(batch: u64) -> BatchId {
    BatchId::from_u64(batch)
}

/// `Engine.allocate_batch`.
pub(crate) fn allocate(e: &Engine, py: Python<'_>, capacity: usize) -> PyResult<u64> {
    let batch = e
        .engine(py)?
        .allocate_batch(capacity)
        .map_err(|err| errors::to_py(py, &err))?;
    Ok(batch.to_u64())
}

/// One `(opcode, local_addr, segment, remote_addr, length)` as a request.
fn request(
    (op, local, segment, remote, len): (String, u64, u64, u64, u64),
    deadline: Option<std::time::Duration>,
) -> PyResult<TransferRequest> {
    let target = SegmentHandle::from_raw(segment);
    let req = match op.as_str() {
        "read" => TransferRequest::read(local, target, remote, len),
        "write" => TransferRequest::write(local, target, remote, len),
        other => {
            return Err(PyValueError::new_err(format!(
                "opcode {other:?} is not \"read\" or \"write\""
            )))
        }
    };
    Ok(match deadline {
        Some(d) => req.with_deadline(d),
        None => req,
    })
}

/// `Engine.submit`.
pub(crate) fn submit(
    e: &Engine,
    py: Python<'_>,
    batch: u64,
    requests: Vec<(String, u64, u64, u64, u64)>,
    notify: Option<Vec<u8>>,
    timeout: Option<f64>,
) -> PyResult<(usize, usize)> {
    let deadline = timeout.map(|t| duration(t, "timeout")).transpose()?;
    let requests = requests
        .into_iter()
        .map(|r| request(r, deadline))
        .collect::<PyResult<Vec<_>>>()?;
    let engine = e.engine(py)?;
    let started = match notify {
        None => engine.submit(id(batch), &requests),
        Some(message) => engine.bridge().usable().and_then(|()| {
            Ok(engine
                .engine()
                .submit_with_notify(id(batch), &requests, message)?)
        }),
    };
    let range = started.map_err(|err| errors::to_py(py, &err))?;
    Ok((range.start, range.end))
}

/// `Engine.wait`.
pub(crate) fn wait_batch(e: &Engine, py: Python<'_>, batch: u64) -> PyResult<BatchStatus> {
    let status = wait(py, e.engine(py)?.wait_call(id(batch)))?;
    Ok(BatchStatus::new(py, status))
}

/// `Engine.status`.
pub(crate) fn status(e: &Engine, py: Python<'_>, batch: u64) -> PyResult<BatchStatus> {
    let status = e
        .engine(py)?
        .status(id(batch))
        .map_err(|err| errors::to_py(py, &err))?;
    Ok(BatchStatus::new(py, status))
}

/// `Engine.task_status`.
pub(crate) fn task_status(
    e: &Engine,
    py: Python<'_>,
    batch: u64,
    task: usize,
) -> PyResult<TaskStatus> {
    let status = e
        .engine(py)?
        .task_status(id(batch), task)
        .map_err(|err| errors::to_py(py, &err))?;
    Ok(TaskStatus::new(py, status))
}

/// `Engine.cancel`.
pub(crate) fn cancel(e: &Engine, py: Python<'_>, batch: u64) -> PyResult<usize> {
    e.engine(py)?
        .cancel(id(batch))
        .map_err(|err| errors::to_py(py, &err))
}

/// `Engine.free_batch`.
pub(crate) fn free(e: &Engine, py: Python<'_>, batch: u64) -> PyResult<()> {
    e.engine(py)?
        .free_batch(id(batch))
        .map_err(|err| errors::to_py(py, &err))
}

/// `Engine.take_notifications`.
pub(crate) fn notifications(e: &Engine, py: Python<'_>) -> PyResult<Vec<Notification>> {
    Ok(e.engine(py)?.engine().take_notifications())
}
