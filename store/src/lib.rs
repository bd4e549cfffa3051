//! yuebing-store: the distributed object store.
//!
//! # Layout
//! - [`args`]: the checks of calls' arguments, shared by the client (before any round trip),
//!   the master and the command line.
//! - [`client`]: the store client.
//! - [`error`]: the [`Error`] enum, codes −1 … −1999 (Mooncake's store codes where they match).
//! - [`master`]: the master's metadata core as a pure state machine, its log and snapshots.
//!
//! The fuzz tests of what the master reads from disk (`master::disk::decode_fuzz`) use
//! yuebing-testkit's byte mutations and its counting allocator, installed in the unit-test
//! binary.

pub mod args;
pub mod client;
pub mod error;
pub mod master;

pub use client::{Client, ClientConfig, ClientHealth, Fetched, Located, Options};
pub use error::{Error, Result, WireError};
pub use master::Write;

#[cfg(test)]
yuebing_testkit::install_counting_allocator!();
