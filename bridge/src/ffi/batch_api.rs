//! `yuebing_batch_*`: an engine's batches of transfers — allocate, submit, wait (blocking or
//! callback), status, cancel, free.

use std::ffi::c_void;

use yuebing_engine::{BatchStatus, SegmentHandle, TaskState, TransferRequest};

use super::deliver::{self, Op};
use super::error::{entry, yuebing_error, Failure, FfiResult};
use super::handles::{self, BatchObject, Kind, Object};
use super::raw;
use super::store_ops::check_range;
use super::types::*;

/// Reads a request argument.
///
/// # Safety
/// `p` is NULL or readable.
pub(crate) unsafe fn read_request(p: *const yuebing_request) -> FfiResult<yuebing_request> {
    match p.is_null() {
        true => Err(Failure::invalid("request is NULL")),
        // SAFETY: non-NULL and readable (the caller's promise).
        false => Ok(unsafe { p.read() }),
    }
}

/// The engine's request for a C one: an unknown opcode or an overflowing range is refused.
pub(crate) fn request(r: &yuebing_request) -> FfiResult<TransferRequest> {
    check_range(r.source, r.length)?;
    check_range(r.target_offset, r.length)?;
    let segment = SegmentHandle::from_raw(r.segment);
    match r.opcode {
        YUEBING_OP_READ => Ok(TransferRequest::read(
            r.source,
            segment,
            r.target_offset,
            r.length,
        )),
        YUEBING_OP_WRITE => Ok(TransferRequest::write(
            r.source,
            segment,
            r.target_offset,
            r.length,
        )),
        other => Err(Failure::invalid(format!("unknown opcode {other}"))),
    }
}

/// A `YUEBING_TASK_*` value.
fn state(s: TaskState) -> u32 {
    match s {
        TaskState::Waiting => YUEBING_TASK_WAITING,
        TaskState::Pending => YUEBING_TASK_PENDING,
        TaskState::Completed => YUEBING_TASK_COMPLETED,
        TaskState::Failed => YUEBING_TASK_FAILED,
        TaskState::Timeout => YUEBING_TASK_TIMEOUT,
        TaskState::Canceled => YUEBING_TASK_CANCELED,
    }
}

/// The C form of a batch's status.
fn c_status(s: BatchStatus) -> yuebing_batch_status {
    yuebing_batch_status {
        state: state(s.state),
        error: s.error.as_ref().map_or(0, |e| e.code()),
        tasks: s.tasks as u64,
        completed: s.completed as u64,
        bytes: s.bytes,
    }
}

/// Allocates a batch for up to `capacity` transfers; it goes to `batch_out`. Free it with
/// `yuebing_batch_free` once its transfers are final.
///
/// # Safety
/// `batch_out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_new(
    engine: yuebing_engine_t,
    capacity: usize,
    batch_out: *mut yuebing_batch_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(batch_out, "batch_out")?;
        let e = handles::engine(engine)?;
        let id = e.engine.allocate_batch(capacity)?;
        let object = BatchObject {
            engine: e.engine.clone(),
            id,
        };
        let h = match handles::insert(Object::Batch(object)) {
            Ok(h) => h,
            Err(f) => {
                let _ = e.engine.free_batch(id);
                return Err(f);
            }
        };
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(batch_out, h) };
        Ok(())
    })
}

/// Frees a batch whose transfers are all final (else the engine's error, and the batch stays).
///
/// # Safety
/// `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_free(
    batch: yuebing_batch_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let b = handles::batch(batch)?;
        b.engine.free_batch(b.id)?;
        handles::remove(batch, Kind::Batch)?;
        Ok(())
    })
}

/// Validates `n` requests and starts them all (none starts if one is invalid); the index of
/// the first new task goes to `first_task_out` (NULL: not wanted). Each request's local range
/// is touched until its task is final.
///
/// # Safety
/// `requests` valid for `n` elements; `first_task_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_submit(
    batch: yuebing_batch_t,
    requests: *const yuebing_request,
    n: usize,
    first_task_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let b = handles::batch(batch)?;
        // SAFETY: valid for `n` elements (the caller's promise).
        let c = unsafe { raw::array(requests, n, "requests") }?;
        let requests = c.iter().map(request).collect::<FfiResult<Vec<_>>>()?;
        let tasks = b.engine.submit(b.id, &requests)?;
        // SAFETY: NULL or writable.
        unsafe { raw::write(first_task_out, tasks.start as u64) };
        Ok(())
    })
}

fn wait_op(batch: yuebing_batch_t) -> FfiResult<Op<BatchStatus>> {
    let b = handles::batch(batch)?;
    let (engine, id) = (b.engine.engine().clone(), b.id);
    Ok(Op::new(
        b.engine.bridge(),
        async move { engine.wait(id).await },
    ))
}

/// Blocks until every task of the batch is final; its status goes to `status_out` (NULL: not
/// wanted).
///
/// # Safety
/// `status_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_wait(
    batch: yuebing_batch_t,
    status_out: *mut yuebing_batch_status,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let status = wait_op(batch)?.wait()?;
        // SAFETY: NULL or writable.
        unsafe { raw::write(status_out, c_status(status)) };
        Ok(())
    })
}

/// Waits for the batch (callback form: the callback gets its status once every task is final).
/// Returns 0 and then calls `cb` exactly once, or returns an error and never calls it.
///
/// # Safety
/// `user_data` usable on the callback thread; `call_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_wait_async(
    batch: yuebing_batch_t,
    cb: yuebing_batch_status_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver::by_pointer(cb, user_data, c_status)?;
        wait_op(batch)?.then(call_out, deliver)
    })
}

/// The batch's status now, in `status_out`.
///
/// # Safety
/// `status_out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_get_status(
    batch: yuebing_batch_t,
    status_out: *mut yuebing_batch_status,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        raw::check_out(status_out, "status_out")?;
        let b = handles::batch(batch)?;
        let status = b.engine.status(b.id)?;
        // SAFETY: checked non-NULL; writable.
        unsafe { raw::write(status_out, c_status(status)) };
        Ok(())
    })
}

/// One task's status now: its `YUEBING_TASK_*` state in `state_out`, bytes moved so far in
/// `bytes_out`, and its error's code (0 if none) in `error_out`; any of them may be NULL.
///
/// # Safety
/// The outputs and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_task_status(
    batch: yuebing_batch_t,
    task: u64,
    state_out: *mut u32,
    bytes_out: *mut u64,
    error_out: *mut i32,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let b = handles::batch(batch)?;
        let task = usize::try_from(task).map_err(|_| Failure::invalid("task index"))?;
        let t = b.engine.task_status(b.id, task)?;
        // SAFETY: each NULL or writable (the caller's promise).
        unsafe {
            raw::write(state_out, state(t.state));
            raw::write(bytes_out, t.bytes);
            raw::write(error_out, t.error.as_ref().map_or(0, |e| e.code()));
        }
        Ok(())
    })
}

/// Cancels the batch's unfinished tasks; how many goes to `canceled_out` (NULL: not wanted).
/// Idempotent; a task cancelled while under way is final only once its transfer stopped. The
/// batch stays usable: tasks submitted after the cancel returned run normally, and a submit
/// racing it may be canceled or not, but always ends (the batch's aggregate status keeps
/// counting the canceled tasks; each task's own is in `yuebing_batch_task_status`).
///
/// # Safety
/// `canceled_out` and `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_batch_cancel(
    batch: yuebing_batch_t,
    canceled_out: *mut u64,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let b = handles::batch(batch)?;
        let n = b.engine.cancel(b.id)?;
        // SAFETY: NULL or writable.
        unsafe { raw::write(canceled_out, n as u64) };
        Ok(())
    })
}
