//! The store on one box, in one process: a master, a client that contributes 64 MiB of store
//! space, a put and a get back, and the typed error for putting an existing key.
//!
//! ```sh
//! cargo run --example store_put_get
//! ```

use std::time::Duration;

use yuebing::rpc::Endpoint;
use yuebing::store::master::{MasterServerConfig, RunningMaster};
use yuebing::store::{Client, ClientConfig, Error, Options};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let any_port: Endpoint = "127.0.0.1:0".parse()?;
    let master = RunningMaster::start(MasterServerConfig::default(), &any_port).await?;
    let client = Client::start(ClientConfig {
        masters: vec![master.local_endpoint().clone()],
        store_size: 64 << 20,
        ..ClientConfig::default()
    })
    .await?;

    let value: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    client
        .put("kv/layer0/block7", &value, &Options::default())
        .await?;
    let back = client
        .get(
            "kv/layer0/block7",
            &Options::deadline(Duration::from_millis(100)),
        )
        .await?;
    assert_eq!(back, value);
    println!("put and got back {} bytes", back.len());

    match client
        .put("kv/layer0/block7", b"other", &Options::default())
        .await
    {
        Err(e @ Error::ObjectAlreadyExists { .. }) => {
            println!("a second put of the key: {e} (code {})", e.code())
        }
        other => return Err(format!("expected ObjectAlreadyExists, got {other:?}").into()),
    }
    drop(client);
    master.shutdown(Duration::from_secs(1)).await;
    Ok(())
}
