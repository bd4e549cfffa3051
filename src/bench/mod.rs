//! Benchmark programs: closed-loop load, medians over repetitions, tables and `--json`.
//!
//! Every benchmark measures its variants interleaved (each repetition runs every variant once)
//! and compares each against a baseline measured in the same run, as ratios.

pub mod args;
pub mod bridge;
pub mod ha;
pub mod harness;
pub mod master;
pub mod report;
pub mod rpc;
pub mod store;
pub mod transfer;
