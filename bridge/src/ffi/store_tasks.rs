//! Copy and move tasks through the C ABI: `yuebing_store_create_copy_task`,
//! `yuebing_store_create_move_task` and `yuebing_store_query_task`, each with its `_async`
//! form, and `yuebing_replica_task_info_free`.

use std::ffi::{c_char, c_void};

use yuebing_store::master::{TaskId, TaskInfo, TaskKind, TaskState};

use super::deliver::{required, Op, UserData};
use super::error::{c_string, entry, yuebing_error, FfiResult};
use super::raw;
use super::store_api::target;
use super::store_batch::keys;
use super::store_whole::wait_into;
use super::types::*;

fn c_task_id(id: TaskId) -> yuebing_replica_task_id {
    let (high, low) = id.halves();
    yuebing_replica_task_id { high, low }
}

fn task_id(id: yuebing_replica_task_id) -> TaskId {
    TaskId::from_halves(id.high, id.low)
}

/// A task's state in its C form, its strings handed over (freed by [`free_task_info`]).
fn c_task_info(info: TaskInfo) -> yuebing_replica_task_info {
    let client = yuebing_replica_task_id {
        high: (info.client.0 >> 64) as u64,
        low: info.client.0 as u64,
    };
    yuebing_replica_task_info {
        id: c_task_id(info.id),
        kind: match info.kind {
            TaskKind::Copy { .. } => YUEBING_REPLICA_TASK_COPY,
            TaskKind::Move { .. } => YUEBING_REPLICA_TASK_MOVE,
        },
        state: match info.state {
            TaskState::Pending => YUEBING_REPLICA_TASK_PENDING,
            TaskState::Processing => YUEBING_REPLICA_TASK_PROCESSING,
            TaskState::Failed => YUEBING_REPLICA_TASK_FAILED,
            TaskState::Success => YUEBING_REPLICA_TASK_SUCCESS,
        },
        created_ms: info.created_ms,
        updated_ms: info.updated_ms,
        client,
        key: c_string(&info.key).into_raw(),
        message: c_string(&info.message).into_raw(),
    }
}

/// Frees the strings of a task's state made by [`c_task_info`] and empties them.
///
/// # Safety
/// `info` is NULL or points to a `yuebing_replica_task_info` that is zeroed or was filled by this
/// library and whose strings were not freed since.
unsafe fn free_task_info(info: *mut yuebing_replica_task_info) {
    if info.is_null() {
        return;
    }
    // SAFETY: valid (the caller's promise); each non-NULL string came from `CString::into_raw`
    // and is freed once: the fields are emptied right after.
    unsafe {
        for p in [(*info).key, (*info).message] {
            if !p.is_null() {
                drop(std::ffi::CString::from_raw(p));
            }
        }
        (*info).key = std::ptr::null_mut();
        (*info).message = std::ptr::null_mut();
    }
}

/// `create_copy_task` of `key` to `n` target nodes.
///
/// # Safety
/// `key` NUL-terminated; `targets` valid for `n` NUL-terminated names; `opts` NULL or
/// readable.
unsafe fn copy_op(
    store: yuebing_store_t,
    key: *const c_char,
    targets: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
) -> FfiResult<Op<TaskId>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (key, targets) = unsafe { (raw::text(key, "key")?, keys(targets, n)?) };
    let call = client.client().create_copy_task(key, &targets, opts);
    Ok(Op::new(client.bridge(), call))
}

/// `create_move_task` of `key` from node `source` to node `target`.
///
/// # Safety
/// `key`, `source` and `to` NUL-terminated; `opts` NULL or readable.
unsafe fn move_op(
    store: yuebing_store_t,
    key: *const c_char,
    (source, to): (*const c_char, *const c_char),
    opts: *const yuebing_options,
) -> FfiResult<Op<TaskId>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    // SAFETY: forwarded contract.
    let (key, source, to) = unsafe {
        (
            raw::text(key, "key")?,
            raw::text(source, "source")?,
            raw::text(to, "target")?,
        )
    };
    let call = client.client().create_move_task(key, source, to, opts);
    Ok(Op::new(client.bridge(), call))
}

/// # Safety
/// `opts` NULL or readable.
unsafe fn query_op(
    store: yuebing_store_t,
    id: yuebing_replica_task_id,
    opts: *const yuebing_options,
) -> FfiResult<Op<TaskInfo>> {
    // SAFETY: forwarded contract.
    let (client, opts) = unsafe { target(store, opts) }?;
    let call = client.client().query_task(task_id(id), opts);
    Ok(Op::new(client.bridge(), call))
}

/// Delivery of a task id to a [`yuebing_replica_task_id_cb`] (zero on failure).
fn deliver_id(
    cb: yuebing_replica_task_id_cb,
    user_data: *mut c_void,
) -> FfiResult<impl FnOnce(i32, *const c_char, Option<TaskId>) + Send + 'static> {
    let (f, ud) = (required(cb)?, UserData::new(user_data));
    // SAFETY: a C callback the caller gave for this call, called once with its user_data.
    Ok(move |code, msg, id: Option<TaskId>| unsafe {
        f(ud.get(), code, msg, id.map(c_task_id).unwrap_or_default())
    })
}

/// Asks the master to add a replica of `key` on each of `n` target nodes (engine segment
/// names: `yuebing_engine_name` of a node's engine, or a node `yuebing_store_replicas` lists),
/// run in the background by the client holding a source replica; the task's id goes to `out`
/// (Mooncake's `create_copy_task`). Follow it with `yuebing_store_query_task`.
///
/// # Safety
/// `key` NUL-terminated; `targets` valid for `n` NUL-terminated names; `opts` NULL or
/// readable; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_create_copy_task(
    store: yuebing_store_t,
    key: *const c_char,
    targets: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    out: *mut yuebing_replica_task_id,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { copy_op(store, key, targets, n, opts) }?;
        wait_into(out, op, c_task_id)
    })
}

/// `yuebing_store_create_copy_task` in callback form. Returns 0 and then calls `cb` exactly
/// once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_create_copy_task`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_create_copy_task_async(
    store: yuebing_store_t,
    key: *const c_char,
    targets: *const *const c_char,
    n: usize,
    opts: *const yuebing_options,
    cb: yuebing_replica_task_id_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver_id(cb, user_data)?;
        // SAFETY: forwarded contract.
        let op = unsafe { copy_op(store, key, targets, n, opts) }?;
        op.then(call_out, deliver)
    })
}

/// Asks the master to move `key`'s replica on node `source` to node `target`, in the
/// background; the task's id goes to `out` (Mooncake's `create_move_task`).
///
/// # Safety
/// `key`, `source` and `target` NUL-terminated; `opts` NULL or readable; `out` writable;
/// `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_create_move_task(
    store: yuebing_store_t,
    key: *const c_char,
    source: *const c_char,
    target: *const c_char,
    opts: *const yuebing_options,
    out: *mut yuebing_replica_task_id,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { move_op(store, key, (source, target), opts) }?;
        wait_into(out, op, c_task_id)
    })
}

/// `yuebing_store_create_move_task` in callback form. Returns 0 and then calls `cb` exactly
/// once, or returns an error and never calls it.
///
/// # Safety
/// As `yuebing_store_create_move_task`; `user_data` usable on the callback thread; `call_out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_create_move_task_async(
    store: yuebing_store_t,
    key: *const c_char,
    source: *const c_char,
    target: *const c_char,
    opts: *const yuebing_options,
    cb: yuebing_replica_task_id_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let deliver = deliver_id(cb, user_data)?;
        // SAFETY: forwarded contract.
        let op = unsafe { move_op(store, key, (source, target), opts) }?;
        op.then(call_out, deliver)
    })
}

/// Where task `id` is, in `out` (yours: free its strings with `yuebing_replica_task_info_free`).
/// `YUEBING_ERR_TASK_NOT_FOUND` for an unknown id (Mooncake's `query_task`).
///
/// # Safety
/// `opts` NULL or readable; `out` writable; `err` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_query_task(
    store: yuebing_store_t,
    id: yuebing_replica_task_id,
    opts: *const yuebing_options,
    out: *mut yuebing_replica_task_info,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        // SAFETY: forwarded contract.
        let op = unsafe { query_op(store, id, opts) }?;
        wait_into(out, op, c_task_info)
    })
}

/// `yuebing_store_query_task` in callback form: the state is lent to the callback (NULL on
/// failure). Returns 0 and then calls `cb` exactly once, or returns an error and never calls
/// it.
///
/// # Safety
/// As `yuebing_store_query_task`; `user_data` usable on the callback thread; `call_out` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn yuebing_store_query_task_async(
    store: yuebing_store_t,
    id: yuebing_replica_task_id,
    opts: *const yuebing_options,
    cb: yuebing_replica_task_info_cb,
    user_data: *mut c_void,
    call_out: *mut yuebing_call_t,
    err: *mut yuebing_error,
) -> i32 {
    entry(err, || {
        let (f, ud) = (required(cb)?, UserData::new(user_data));
        // SAFETY: forwarded contract.
        let op = unsafe { query_op(store, id, opts) }?;
        op.then(call_out, move |code, msg, info| {
            let mut lent = info.map(c_task_info);
            let p = lent.as_ref().map_or(std::ptr::null(), |i| i as *const _);
            // SAFETY: the caller's callback, called once with its user_data; `lent` outlives
            // the call, and its strings are freed once, after it.
            unsafe {
                f(ud.get(), code, msg, p);
                if let Some(i) = lent.as_mut() {
                    free_task_info(i);
                }
            }
        })
    })
}

/// Frees the strings of a task's state handed over by `yuebing_store_query_task` and empties
/// them; NULL or a zeroed one is a no-op.
///
/// # Safety
/// `info` is NULL or a `yuebing_replica_task_info` filled by this library (or zeroed), not freed
/// since.
#[no_mangle]
pub unsafe extern "C" fn yuebing_replica_task_info_free(info: *mut yuebing_replica_task_info) {
    // SAFETY: forwarded.
    unsafe { free_task_info(info) }
}
