//! yuebing-etcd: yuebing on etcd, for clusters that outgrow one machine (issue 16).
//!
//! This crate is built only with the root package's feature `etcd` (or on its own): its
//! etcd client compiles etcd's protos at build time, which needs `protoc` and the
//! `libprotobuf-dev` includes (see `docs/etcd-provisioning.md`).
//!
//! # Keys
//! Everything of one yuebing cluster lies under `<prefix>/<cluster>/` (default
//! `/yuebing/default/`); segment descriptors at `…/segments/<name>`, the master's operation log
//! at `…/master/log/<first seq>`, what each standby applied at `…/master/standbys/<id>`.
//!
//! # Layout
//! - [`address`]: `etcd://h:p,h:p/CLUSTER` master addresses and the leader source a store
//!   client follows ([`address::leader_source`], for `ClientConfig::leader`).
//! - [`config`]: [`EtcdConfig`] (endpoints `"h:p,h:p"`, credentials, TLS files, prefix and
//!   cluster, timeouts), [`Keys`], and the client made from them on a given runtime.
//! - [`election`]: the master election: [`Election`] (campaign, leader, observe) and the
//!   [`Leadership`] a winner holds while its lease does.
//! - [`error`]: the [`Error`] enum, codes −5000 … −5999, and its conversion into the engine's.
//! - [`ha`]: [`ha::HaMaster`], an elected store master (standby, leader, deposed), its log
//!   sink and gate, and [`ha::LeaderWatch`] for clients that follow the leader.
//! - [`metadata`]: [`EtcdMetadata`], the engine's `MetadataStore` on etcd leases.
//! - [`log`]: [`EtcdLog`], the elected master's operation log (groups appended under the
//!   leader's [`Epoch`], read, watched, truncated) and what each standby has applied.
//! - `keeper`: the task that keeps a descriptor's lease alive (and replaces a lost one).
//! - `task`: a spawned task that stops when its owner drops it.
//! - `watch`: the watch of one descriptor (current state, then each change).
//!
//! The tests run real etcd members on 127.0.0.1 with the launcher of `yuebing-testkit` (its
//! feature `etcd`).
//!
//! # Runtime
//! Everything that spawns (the client's connections, keep-alive tasks) takes a
//! `tokio::runtime::Handle` and spawns only there; background tasks stop when their owner is
//! dropped.

pub mod address;
pub mod config;
pub mod election;
pub mod error;
pub mod ha;
mod keeper;
pub mod log;
pub mod metadata;
mod task;
mod watch;

pub use config::{Credentials, EtcdConfig, Keys, TlsFiles};
pub use election::{Election, LeaderInfo, Leadership};
pub use error::{Error, Result};
pub use log::{Epoch, EtcdLog, Revision};
pub use metadata::EtcdMetadata;
