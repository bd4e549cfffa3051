//! yuebing-store: the distributed object store.
//!
//! # Layout
//! - [`error`]: the [`Error`] enum, codes −1 … −1999 (Mooncake's store codes where they match).
//! - [`master`]: the master's metadata core as a pure state machine, its log and snapshots.

pub mod client;
pub mod error;
pub mod master;

pub use client::{Client, ClientConfig, Options};
pub use error::{Error, Result, WireError};
