//! yuebing: move and cache large byte objects (above all the KV cache of LLM inference) between
//! processes and machines.
//!
//! This package re-exports the member crates and holds the `yuebing` command-line tool.
//!
//! # Layout
//! - [`rpc`]: the control plane (`yuebing-rpc`).
//! - [`engine`]: the Transfer Engine (`yuebing-engine`).
//! - [`bench`]: the benchmark programs behind `yuebing bench …`.
//! - [`config`]: settings from flags, `YUEBING_*` variables and a TOML file.

pub use yuebing_engine as engine;
pub use yuebing_rpc as rpc;

pub mod bench;
pub mod config;
