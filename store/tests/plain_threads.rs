//! A master and a store client started on runtimes they were given, and driven from plain
//! threads that have no tokio runtime of their own (as the bridge's callers will be).

use std::time::Duration;

use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterClient, MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Error, Options};

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_master_and_a_client_work_from_plain_threads() {
    let (master_rt, client_rt) = (runtime(1), runtime(2));
    let (on_master, on_client) = (master_rt.handle().clone(), client_rt.handle().clone());
    let outcome = std::thread::spawn(move || {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "no ambient runtime"
        );
        futures::executor::block_on(async move {
            let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
            let cfg = MasterServerConfig::default();
            let master = RunningMaster::start_on(cfg, &bind, on_master.clone()).await?;
            let at = master.local_endpoint().clone();
            let client = Client::start_on(
                ClientConfig {
                    masters: vec![at.clone()],
                    store_size: 16 << 20,
                    ..ClientConfig::default()
                },
                on_client,
            )
            .await?;
            let opts = Options::default();
            client.put("kv/0", b"hello", &opts).await?;
            assert_eq!(client.get("kv/0", &opts).await?, b"hello");
            assert!(client.exist("kv/0", &opts).await?);
            // A second plain thread uses the same client.
            let other = client.clone();
            let got = std::thread::spawn(move || {
                futures::executor::block_on(other.get("kv/0", &Options::default()))
            })
            .join()
            .unwrap()?;
            assert_eq!(got, b"hello");
            // A master client of its own, on the master's runtime.
            let direct = MasterClient::new_on(at, client.id(), on_master);
            assert!(direct.exist("kv/0").await?);
            drop((client, direct));
            master.shutdown(Duration::from_secs(1)).await;
            Ok::<_, Error>(())
        })
    })
    .join()
    .unwrap();
    outcome.unwrap();
}
