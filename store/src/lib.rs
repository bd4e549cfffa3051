//! yuebing-store: the distributed object store.
//!
//! # Layout
//! - [`args`]: the checks of calls' arguments, shared by the client (before any round trip),
//!   the master and the command line.
//! - [`client`]: the store client.
//! - [`error`]: the [`Error`] enum, codes −1 … −1999 (Mooncake's store codes where they match).
//! - [`master`]: the master's metadata core as a pure state machine, its log and snapshots.
//! - `fuzz_support` (tests only): a counting allocator and byte mutations for the fuzz tests of
//!   what the master reads from disk (`master::disk::decode_fuzz`).

pub mod args;
pub mod client;
pub mod error;
/// The fuzz tests' allocator and mutations, one file for the three crates (each crate's
/// unit-test binary installs its own copy of the counting allocator).
#[cfg(test)]
#[path = "../../rpc/src/fuzz_support.rs"]
mod fuzz_support;
pub mod master;

pub use client::{Client, ClientConfig, ClientHealth, Fetched, Located, Options};
pub use error::{Error, Result, WireError};
pub use master::Write;
