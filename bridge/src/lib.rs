//! yuebing-bridge: yuebing for callers that are not async Rust — plain threads and
//! callback-driven code — on a runtime the bridge owns.
//!
//! Mooncake writes its flows as `async_simple::coro::Lazy<T>` and bridges them with
//! `syncAwait(lazy)` at synchronous boundaries and `lazy.start(callback)` for callers that want
//! a callback. A Rust future is already lazy; the bridge adds the rest:
//!
//! | Mooncake (C++)                 | yuebing                                              |
//! |--------------------------------|------------------------------------------------------|
//! | `Lazy<T>`                      | [`Call<T>`]: an operation started on the bridge      |
//! | `syncAwait(lazy)`              | [`Call::wait`], [`Call::wait_timeout`], [`Call::wait_for`] (in slices), `BlockingClient::get` … |
//! | `lazy.start(callback)`         | [`Call::then`]                                       |
//! | (none)                         | [`Call::cancel`], [`Canceller`]                      |
//! | `tl::expected<T, ErrorCode>`   | [`Result<T>`] with a stable numeric [`Error::code`] |
//! | `MooncakeStore` / `Client` (sync) | [`BlockingClient`]                                |
//! | `TransferEngine` (sync calls)  | [`BlockingEngine`]                                   |
//! | C API (`transfer_engine_c.h`, raw pointers as handles) | [`ffi`]: `include/yuebing.h`, checked 64-bit handles, blocking and `_async` forms |
//!
//! # Rules that hold in every calling context
//! - **Blocking works from a plain thread**, which runs a blocking call itself inside the
//!   bridge runtime's context (no hand-off to a worker and back), and from a task of another
//!   runtime: a worker of a multi-thread runtime is handed back to it while it waits
//!   (`block_in_place`); a current-thread runtime's thread simply waits (its other tasks wait
//!   with it). No bridge can rescue a wait on work that a sibling future of the same task
//!   must drive: don't.
//! - **A blocking call from a bridge thread** (a runtime worker, a callback-pool thread, or a
//!   thread inside a supplied runtime) returns [`Error::WouldBlockBridge`] at once — never a
//!   hang — and cancels the call.
//! - **Callbacks run on the callback pool**, never on a runtime worker, with no bridge lock
//!   held, so a callback that blocks stalls no transfer; a panicking one is caught and logged.
//! - **Each callback runs exactly once**: on success, error, cancel, a deadline, or shutdown
//!   (each call's task owns a once-guard that delivers `Shutdown` if the task is dropped
//!   unrun). A call that ended before [`Call::then`] still runs its callback. The outcome of a
//!   cancelled or timed-out call comes only once its work has stopped, so the caller's buffers
//!   are untouched from then on.
//! - **Shutdown** ([`Bridge::shutdown`], or dropping the last handle) returns only after every
//!   pending callback has returned, and no callback runs after it. Dropping the last handle
//!   inside a runtime or a callback shuts down in the background instead of blocking.
//! - **Cancel** is idempotent, thread-safe, and a no-op after completion.
//! - **After `fork()`** the child's calls get [`Error::Forked`]: build a new bridge there.
//!
//! # Layout
//! - `bridge`: [`Bridge`] (owned or supplied runtime, shutdown, the blocking rules).
//! - `call`: [`Call`] and its once-guard.
//! - `here`: a blocking call run on the thread that waits for it.
//! - [`pid`]: the process's id, kept until a `fork()` (the check every call makes).
//! - `callbacks`: the callback pool and the marking of bridge threads.
//! - `waiter`: [`Waiter`], how a blocking caller watches for its outcome before it sleeps.
//! - `store`: [`BlockingClient`], the store client's blocking and `*_call` forms.
//! - `engine`: [`BlockingEngine`], the transfer engine's.
//! - `master`: [`BlockingMaster`], the master's `health` and `stats`.
//! - [`messages`]: byte messages to a server's handler or callback, each once (the service
//!   under Mooncake's Python `RpcInterface`).
//! - [`masters`]: [`Masters`], where a store client finds its masters: `"h:p,h:p"`, or
//!   `"etcd://h:p,h:p/CLUSTER"` (feature `etcd`: the elected leader, followed through etcd).
//! - [`error`]: the [`Error`] enum, codes −4000 … −4999, and every layer's table of codes and
//!   names.
//! - `etcd_codes`: etcd's table of codes, also in a build without the `etcd` feature.
//! - [`ffi`]: the C ABI (`include/yuebing.h`).

mod bridge;
mod call;
mod callbacks;
mod engine;
pub mod error;
mod etcd_codes;
pub mod ffi;
mod here;
mod master;
pub mod masters;
pub mod messages;
pub mod pid;
mod store;
mod waiter;

pub use bridge::{Bridge, BridgeConfig};
pub use call::{Call, Canceller};
pub use engine::BlockingEngine;
pub use error::{Error, Result};
pub use master::BlockingMaster;
pub use masters::Masters;
pub use store::{BlockingClient, Each};
pub use waiter::Waiter;

/// Compile-time checks: the bridge's handles are shared freely between threads.
#[allow(dead_code)]
fn _bridge_types_are_send_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Bridge>();
    send_sync::<BlockingClient>();
    send_sync::<BlockingEngine>();
    send_sync::<BlockingMaster>();
    send_sync::<Canceller>();
    send_sync::<messages::MessageServer>();
    send_sync::<messages::MessageClient>();
    fn send<T: Send + 'static>() {}
    send::<Call<Vec<u8>>>();
}
