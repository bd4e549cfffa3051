//! The C ABI of yuebing (`include/yuebing.h`, generated from this module by a pinned
//! cbindgen): handles for bridges, store clients, engines, batches, calls and master
//! connections, and every bridged operation in a blocking form (`yuebing_X`) and a callback
//! form (`yuebing_X_async`).
//!
//! # Conventions (the header repeats them)
//! - Every fallible function returns an `int32_t` code: 0 on success, else a negative code
//!   (`YUEBING_ERR_*`, the same numbers as the Rust errors; `yuebing_error_name` names any
//!   code). Each takes a last `yuebing_error *err`, which may be NULL; when given it is filled
//!   (code and message) on every return. `yuebing_last_error_message()` holds the message of
//!   the last call on this thread.
//! - On failure a function writes none of its outputs (other than `err`). `err` and
//!   `call_out` must stay valid until the function returns, even when an `_async` call's
//!   callback has already run.
//! - Handles are 64-bit values checked on every use: 0, a destroyed handle, a handle of
//!   another kind or one destroyed twice is `YUEBING_ERR_INVALID_HANDLE`, never undefined
//!   behaviour. Wild (non-NULL but invalid) pointers remain the caller's responsibility.
//! - Invalid arguments — NULL where a pointer is required, a NULL buffer with a non-zero
//!   length, a length or range that overflows, unknown flags or enum values, text that is not
//!   UTF-8 — are `YUEBING_ERR_INVALID_ARGUMENT`, and nothing happens.
//! - A callback form returns 0 and then calls its callback exactly once (success, error,
//!   cancel, deadline or shutdown), on one of the bridge's callback threads, never on the
//!   calling thread's stack and never with a lock held; or it returns an error and never calls
//!   it: the callback is in place before the call starts, so its outcome always reaches the
//!   callback threads before a destroy of the bridge can return. Arguments handed to a
//!   callback are valid only until it returns. A callback may start
//!   new callback-form calls but must not call a blocking form (`YUEBING_ERR_WOULD_BLOCK_BRIDGE`)
//!   or destroy its bridge. Callbacks must not unwind (C++ exceptions, longjmp) into the
//!   library.
//! - Inputs are read before the function returns (byte values are copied); memory given by
//!   address (`get_into`, `put_from`, transfers) must be registered with the engine and is
//!   touched until the call ends — its blocking form returns or its callback runs.
//! - Bytes, listings and replicas the library hands over are freed with `yuebing_buf_free`,
//!   `yuebing_list_free` and `yuebing_replicas_free`, a task's state with
//!   `yuebing_replica_task_info_free`; a location handle with `yuebing_location_free`, a reservation
//!   with `yuebing_reservation_free`, an admin server with `yuebing_admin_free`.

#![allow(non_camel_case_types)]

pub mod admin_api;
pub mod batch_api;
pub mod bridge_api;
pub mod deliver;
pub mod engine_api;
pub mod error;
mod handles;
pub mod master_api;
mod raw;
pub mod store_api;
pub mod store_batch;
pub mod store_located;
pub mod store_ops;
pub mod store_reserved;
pub mod store_tasks;
pub mod store_whole;
pub mod types;
