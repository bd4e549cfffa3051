//! yuebing: move and cache large byte objects (above all the KV cache of LLM inference) between
//! processes and machines.
//!
//! This package re-exports the member crates and holds the `yuebing` command-line tool.
//!
//! # Layout
//! - [`rpc`]: the control plane (`yuebing-rpc`).
//! - [`engine`]: the Transfer Engine (`yuebing-engine`).
//! - [`store`]: the object store (`yuebing-store`): its master and its client.
//! - `etcd` (feature `etcd`, off by default): yuebing on etcd (`yuebing-etcd`), for scale-out.
//! - [`bridge`]: blocking and callback calls for callers that are not async Rust
//!   (`yuebing-bridge`).
//! - [`bench`]: the benchmark programs behind `yuebing bench …`.
//! - [`cli`]: subcommands such as `yuebing master`.
//! - [`config`]: settings from flags, `YUEBING_*` variables and a TOML file.

pub use yuebing_bridge as bridge;
pub use yuebing_engine as engine;
#[cfg(feature = "etcd")]
pub use yuebing_etcd as etcd;
pub use yuebing_rpc as rpc;
pub use yuebing_store as store;

pub mod bench;
pub mod cli;
pub mod config;
