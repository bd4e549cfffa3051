//! `yuebing._native`: the native module of the `yuebing` Python package, on the bridge
//! (`yuebing-bridge`). Python imports `yuebing`, which re-exports these classes with the
//! exception hierarchy of `yuebing/errors.py`.
//!
//! Every call that waits (a store operation, a transfer, a batch wait) runs on the process's
//! bridge and blocks only the calling Python thread, with the GIL released; between slices of
//! the wait it runs Python's signal handlers, and a handler that raises (Ctrl-C's
//! `KeyboardInterrupt`) cancels the call, waits until its work stopped (so nothing writes into
//! the caller's memory any more) and propagates.
//!
//! # Layout
//! - `runtime`: the process's [`yuebing_bridge::Bridge`], made again in a forked child.
//! - `wait`: waiting for a [`yuebing_bridge::Call`] with the GIL released, signals checked.
//! - `errors`: yuebing's errors as Python exceptions (classes from `yuebing/errors.py`).
//! - `memory`: the caller's memory: a Python buffer held exported, or a raw address.
//! - `pins`: registration of the caller's memory with an engine, for the zero-copy calls;
//!   `pin_table`, its pure core (the table of pins, the waiters, what a call takes now).
//! - `options`: per-call settings from keyword arguments.
//! - `store`: the `Store` class: opening it, writes, reads, and what it knows of its keys.
//! - `engine`: the `Engine` class, its batches of transfers and its `Buffer`s.
//! - `rpc`: the `MessageServer` and `MessageClient` classes: byte messages to a server's Python
//!   callback (the drop-in's `RpcInterface`).
//! - `types`: the small result classes (`ObjectInfo`, `Replicas`, `Location`, `Reservation`, `BatchStatus`,
//!   `TaskStatus`).

mod engine;
mod errors;
mod memory;
mod options;
mod pin_table;
mod pins;
mod rpc;
mod runtime;
mod store;
mod types;
mod wait;

use pyo3::prelude::*;

/// The native module. Import `yuebing`, not this: it adds the exception classes.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::Store>()?;
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::Buffer>()?;
    m.add_class::<rpc::MessageServer>()?;
    m.add_class::<rpc::MessageClient>()?;
    m.add_class::<types::ObjectInfo>()?;
    m.add_class::<types::Replicas>()?;
    m.add_class::<types::ReplicaTask>()?;
    m.add_class::<types::Location>()?;
    m.add_class::<types::Reservation>()?;
    m.add_class::<types::BatchStatus>()?;
    m.add_class::<types::TaskStatus>()?;
    m.add_function(wrap_pyfunction!(errors::error_codes, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FEATURES", features())?;
    Ok(())
}

/// The optional parts this package was built with (`yuebing.FEATURES`), sorted.
fn features() -> Vec<&'static str> {
    let mut built = Vec::new();
    if cfg!(feature = "etcd") {
        built.push("etcd");
    }
    if cfg!(feature = "rdma") {
        built.push("rdma");
    }
    built
}
