//! etcd with authentication on: an elected master and a client following it through an
//! `etcd://` address reach it with the user and password they are given (the master's
//! `EtcdConfig::credentials`, the client's `YUEBING_ETCD_USER`/`_PASSWORD`), and without them
//! fail with a typed error.

mod common;

use std::time::Duration;

use common::*;
use tokio::runtime::Handle;
use yuebing_etcd::address::{leader_source, parse_master_address, with_access};
use yuebing_etcd::Credentials;
use yuebing_store::{Client, ClientConfig, Options};
use yuebing_testkit::etcd::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_and_clients_reach_an_etcd_with_auth_only_with_credentials() {
    let etcd = EtcdServer::start().await.unwrap();
    let mut admin = etcd.config().connect_on(&Handle::current()).await.unwrap();
    admin.role_add("root").await.unwrap();
    admin.user_add("root", "s3cret", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.auth_enable().await.unwrap();

    // Without credentials etcd refuses: a typed error, not a hang.
    let refused = tokio::time::timeout(
        Duration::from_secs(20),
        yuebing_etcd::ha::HaMaster::start(
            ha_config(etcd.config(), "auth"),
            &"127.0.0.1:0".parse().unwrap(),
            Handle::current(),
        ),
    )
    .await
    .expect("a refusal, not a hang");
    let e = refused.err().expect("no master without credentials");
    assert!(e.code() <= -5000, "{e}");

    let mut with_user = etcd.config();
    with_user.credentials = Some(Credentials {
        user: "root".into(),
        password: "s3cret".into(),
    });
    let master = leader(ha_config(with_user, "auth")).await;

    // A client given `etcd://…/auth` and the variables follows the leader.
    let address = format!("etcd://{}/auth", etcd.endpoint());
    let env = |name: &str| match name {
        "YUEBING_ETCD_USER" => Some("root".to_string()),
        "YUEBING_ETCD_PASSWORD" => Some("s3cret".to_string()),
        _ => None,
    };
    let config = with_access(parse_master_address(&address).unwrap(), env).unwrap();
    let client = Client::start(ClientConfig {
        leader: Some(leader_source(&config, &Handle::current()).await.unwrap()),
        store_size: 8 << 20,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let opts = Options::deadline(Duration::from_secs(20));
    client.put("k", b"behind auth", &opts).await.unwrap();
    assert_eq!(client.get("k", &opts).await.unwrap(), b"behind auth");

    // The same address without the variables: etcd refuses every read, so no leader is ever
    // named (connections are lazy: the source itself is made) and calls wait in vain.
    let bare = with_access(parse_master_address(&address).unwrap(), |_| None).unwrap();
    let mut source = leader_source(&bare, &Handle::current()).await.unwrap();
    let named =
        tokio::time::timeout(Duration::from_secs(3), source.wait_for(Option::is_some)).await;
    assert!(named.is_err(), "a leader named without credentials");
    master.shutdown(Duration::from_secs(1)).await;
}
