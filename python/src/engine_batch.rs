//! The `Engine`'s batches of transfers: allocate, submit (with a notification), wait, status,
//! cancel, free; and the notifications received. Each starts with `Engine::engine`, which
//! refuses a forked child (`Forked`) before the engine's state is touched.

use pyo3::prelude::*;
use yuebing_engine::{BatchId, Notification, SegmentHandle, TransferRequest};

use crate::engine::{span, Engine};
use crate::errors;
use crate::options::duration;
use crate::pins::Write;
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

/// `Engine.submit`: the requests checked, and started under the registrations' lock once none
/// writes into read-only memory (`Pins::submit`).
pub(crate) fn submit(
    e: &Engine,
    py: Python<'_>,
    batch: u64,
    requests: Vec<(String, u64, u64, u64, u64)>,
    notify: Option<Vec<u8>>,
    timeout: Option<f64>,
) -> PyResult<(usize, usize)> {
    let deadline = timeout.map(|t| duration(py, t, "timeout")).transpose()?;
    let pins = e.pins(py)?;
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
