//! Benchmark programs: closed-loop load, medians over repetitions, tables and `--json`.
//!
//! Every benchmark measures its variants interleaved (each repetition runs every variant once)
//! and compares each against a baseline measured in the same run, as ratios.
//!
//! # Layout
//! - [`command`]: the `yuebing bench` subcommands ([`command::Bench`]) and what each does at
//!   its end (the table, `--json`).
//! - [`args`]: the flags every bench takes; sizes and lists as benches read them.
//! - one module per bench ([`rpc`], [`transfer`], [`master`], [`store`], [`bridge`], [`ha`],
//!   [`disk`]):
//!   its flags (`Bench…Args`), the settings they resolve to, the run and its rows.
//! - [`harness`]: closed loops and medians; [`report`]: rows, tables and the JSON file.

pub mod args;
pub mod bridge;
pub mod command;
pub mod disk;
pub mod ha;
pub mod harness;
pub mod master;
pub mod report;
pub mod rpc;
pub mod store;
pub mod transfer;
