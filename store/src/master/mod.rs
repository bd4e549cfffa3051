//! The store master: the metadata of every object (which nodes hold which replicas), never
//! the bytes.
//!
//! - [`core`]: the pure state machine ([`Master`]) — put/get/remove rules, leases, eviction,
//!   client expiry; inputs take `now`, effects are drained.
//! - [`alloc`]: offsets inside one mounted range.
//! - [`log`]: durable [`Record`]s, [`LogEntry`]s and [`Effect`]s.
//! - [`snapshot`]: the durable state as a value, and replay of snapshot + log.
//! - [`config`], [`types`]: settings and the words of the interface.
//! - [`task`]: copy and move tasks — their words, and the core's table of them.
//! - [`ha`]: the pure parts of high availability — the replicated log's groups, a standby's
//!   tail, a leader's lease.
//! - [`oplog`]: where durable records go — the data directory's log, or a [`LogSink`] (an
//!   elected master's replicated log).
//! - `disk`: the data directory — log segments with group-commit fsync, snapshots, recovery.
//! - [`presence`]: the keys of completed objects, which existence checks read without the
//!   core's lock.
//! - [`admin`]: the admin HTTP server (Mooncake's paths on the metrics port).
//! - `telemetry`: the master's metrics (counters of what it did, gauges of what it holds).
//! - `api`: the master's calls, defined once (one table makes the service, the handler and
//!   the client's methods); [`service`]: the tarpc [`MasterService`] and its wire types; [`server`]: a running
//!   master (core behind one lock, log, driver); [`client`]: [`MasterClient`].

pub mod admin;
pub mod alloc;
mod api;
pub mod client;
pub mod config;
pub mod core;
mod disk;
pub mod grant;
pub mod ha;
mod keymap;
pub mod log;
mod object;
pub mod oplog;
pub mod pattern;
pub mod presence;
pub mod server;
pub mod service;
pub mod snapshot;
mod space;
pub mod task;
mod telemetry;
pub mod types;

pub use self::client::MasterClient;
pub use self::config::{MasterConfig, PlacementStrategy};
pub use self::core::Master;
pub use self::disk::Recovery;
pub use self::grant::{GrantDesc, GrantId, GrantedPut};
pub use self::log::{Effect, LogEntry, Record, FORMAT_VERSION};
pub use self::object::{Pin, Replicas};
pub use self::oplog::LogSink;
pub use self::pattern::KeyPattern;
pub use self::server::{wall_ms, MasterServerConfig, RunningMaster, ServeGate};
pub use self::service::{Health, MasterService, SERVICE};
pub use self::snapshot::Snapshot;
pub use self::space::Replica;
pub use self::task::{TaskId, TaskInfo, TaskKind, TaskState, TaskWork};
pub use self::types::{
    CallStats, ClientId, ListedObject, MethodCalls, Millis, MountId, MountSpec, PingResult,
    PutConfig, ReplicaDesc, ReplicaList, SegmentInfo, Stats, Write,
};
