//! What the store's client tests share: a master on 127.0.0.1 and a client of it, the serve
//! gate of a master whose election the test plays, and the calls a master served.
#![allow(dead_code)] // each test file uses a part

use std::sync::Arc;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster, ServeGate};
use yuebing_store::{Client, ClientConfig, Error};
use yuebing_testkit::Switch;

/// A master on an ephemeral port and a client with 8 MiB of store space.
pub(crate) async fn master_and_client() -> (RunningMaster, Client) {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let client = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    (master, client)
}

/// A serve gate that asks `switch`: calls are served while it is open, and refused with
/// `NotLeader` (naming no leader) while it is closed.
pub(crate) fn gate(switch: &Arc<Switch>) -> Arc<dyn ServeGate> {
    let switch = switch.clone();
    Arc::new(move || switch.check(|| Error::NotLeader { leader: None }))
}

/// Calls the master `m` served so far, by method.
pub(crate) async fn calls(m: &RunningMaster) -> std::collections::BTreeMap<String, u64> {
    let c = yuebing_store::master::MasterClient::new(
        m.local_endpoint().clone(),
        yuebing_store::master::ClientId(1),
    );
    let stats = c.call_stats().await.unwrap();
    stats
        .methods
        .into_iter()
        .map(|m| (m.method, m.calls))
        .collect()
}
