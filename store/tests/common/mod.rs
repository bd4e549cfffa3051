//! What the store's client tests share: a master on 127.0.0.1 and a client of it, and the serve
//! gate of a master whose election the test plays.
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
