//! yuebing-store: the distributed object store.
//!
//! # Layout
//! - [`args`]: the checks of calls' arguments, shared by the client (before any round trip),
//!   the master and the command line.
//! - [`client`]: the store client.
//! - [`disk_tier`]: a node's disk tier: objects in checksummed, append-only segment files.
//! - [`error`]: the [`Error`] enum, codes −1 … −1999 (Mooncake's store codes where they match).
//! - `files`: what the store's files share: headers, numbered names, the directory lock.
//! - [`metrics_registry`]: where metrics go ([`MetricsRegistry`]): a Prometheus registry of
//!   yuebing's own, an application's recorder, or nowhere.
//! - `process`: the process's gauges (resident memory, open file descriptors).
//! - [`http`]: the admin HTTP server ([`http::AdminServer`]) of the master and of clients.
//! - [`master`]: the master's metadata core as a pure state machine, its log and snapshots.
//!
//! The fuzz tests of what the master reads from disk (`master::disk::decode_fuzz`) use
//! yuebing-testkit's byte mutations and its counting allocator, installed in the unit-test
//! binary.

pub mod args;
pub mod client;
pub mod disk_tier;
pub mod error;
mod files;
pub mod http;
pub mod master;
pub mod metrics_registry;
mod process;

pub use client::{
    Client, ClientConfig, ClientHealth, Fetched, Fragment, Located, Options, Reservation, SpaceId,
};
pub use error::{Error, Result, WireError};
pub use master::Write;
pub use metrics_registry::MetricsRegistry;

#[cfg(test)]
yuebing_testkit::install_counting_allocator!();

/// Compile-time checks: the master, its client and the store client are shared freely between
/// threads, and the futures of their public methods may be spawned anywhere.
#[allow(dead_code)]
fn _store_types_are_send_sync_and_their_futures_send(
    m: master::RunningMaster,
    c: &Client,
    mc: &master::MasterClient,
    ep: &yuebing_rpc::Endpoint,
) {
    use master::{MasterClient, MasterServerConfig, RunningMaster};
    use tokio::runtime::Handle;
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<RunningMaster>();
    send_sync::<Client>();
    send_sync::<MasterClient>();
    let cfg = MasterServerConfig::default();
    send(&RunningMaster::start(cfg.clone(), ep));
    send(&RunningMaster::start_on(cfg, ep, Handle::current()));
    let client_cfg = ClientConfig::default();
    send(&Client::start(client_cfg.clone()));
    send(&Client::start_on(client_cfg, Handle::current()));
    let opts = Options::default();
    send(&c.put("k", b"v", &opts));
    send(&c.get("k", &opts));
    send(&c.get_into("k", 0, 1, &opts));
    send(&c.put_from("k", 0, 1, &opts));
    send(&c.exist("k", &opts));
    send(&c.batch_get(&["k"], &opts));
    send(&mc.exist("k"));
    send(&m.shutdown(std::time::Duration::ZERO));
}
