//! What the store's client tests share: a master on 127.0.0.1 and a client of it.

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig};

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
