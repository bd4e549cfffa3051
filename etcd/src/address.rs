//! Finding the elected master from a client: master addresses of the form
//! `etcd://h:p[,h:p…]/CLUSTER` and a leader source made from them. The same form names the
//! etcd cluster where engines publish their segment descriptors (`--metadata`,
//! [`parse_metadata_address`], Mooncake's `metadata_server`).
//!
//! A store client given such an address asks etcd, not a master, where to send its calls:
//! [`parse_master_address`] turns the text into an [`EtcdConfig`] (the endpoints, the cluster;
//! every other setting its default), and [`leader_source`] connects and follows the cluster's
//! election, publishing the leader's rpc address in the channel that
//! `yuebing_store::ClientConfig::leader` takes. Its background task lives as long as any
//! receiver of that channel does: the caller holds no guard.
//!
//! ```no_run
//! # async fn client() -> Result<(), Box<dyn std::error::Error>> {
//! use yuebing_etcd::address::{leader_source, parse_master_address};
//!
//! let etcd = parse_master_address("etcd://10.0.0.1:2379,10.0.0.2:2379/prod")?;
//! let handle = tokio::runtime::Handle::current();
//! let cfg = yuebing_store::ClientConfig {
//!     leader: Some(leader_source(&etcd, &handle).await?),
//!     ..Default::default()
//! };
//! let client = yuebing_store::Client::start(cfg).await?;
//! # drop(client); Ok(()) }
//! ```

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use yuebing_rpc::Endpoint;

use crate::config::EtcdConfig;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::ha::LeaderWatch;

/// What a master address that names an etcd cluster starts with.
pub const ETCD_SCHEME: &str = "etcd://";

/// The TTL handed to the follower's [`Election`]: it only reads and observes, never
/// campaigns, so no lease of this TTL is ever granted.
const OBSERVER_TTL: Duration = Duration::from_secs(5);

/// Whether `text` (surrounding spaces ignored, the scheme in any case) is an `etcd://`
/// address rather than a list of master addresses. Callers that cannot follow an election (a
/// build without etcd) use it to refuse such an address with a clear error.
pub fn is_etcd_address(text: &str) -> bool {
    let text = text.trim_start();
    text.get(..ETCD_SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(ETCD_SCHEME))
}

/// Parses `etcd://h:p[,h:p…]/CLUSTER` (`;` also separates endpoints, as in Mooncake's
/// addresses) into settings with those endpoints and that cluster, every other setting its
/// default (credentials and TLS files are for the caller to add).
///
/// # Errors
/// [`Error::InvalidConfig`] (−5001) when the text does not start with `etcd://`, names no
/// endpoint, has a malformed endpoint (no port, port 0 or above 65535, a scheme), or no
/// cluster, or a cluster with `/`.
pub fn parse_master_address(text: &str) -> Result<EtcdConfig> {
    parse_address("master address", text)
}

/// Parses a metadata address, `etcd://h:p[,h:p…]/CLUSTER`: the etcd cluster where engines
/// publish their segment descriptors (for `yuebing_etcd::EtcdMetadata`), in the same form and
/// with the same errors as [`parse_master_address`]. One cluster name may serve both.
///
/// # Errors
/// As [`parse_master_address`]'s, naming a metadata address.
pub fn parse_metadata_address(text: &str) -> Result<EtcdConfig> {
    parse_address("metadata address", text)
}

/// Parses `etcd://h:p[,h:p…]/CLUSTER`, its errors naming the address `what`.
fn parse_address(what: &str, text: &str) -> Result<EtcdConfig> {
    let bad = |why: String| Error::InvalidConfig {
        reason: format!("{what} {text:?}: {why}; expected etcd://host:port[,host:port…]/CLUSTER"),
    };
    let trimmed = text.trim();
    if !is_etcd_address(trimmed) {
        return Err(bad("does not start with etcd://".into()));
    }
    let rest = &trimmed[ETCD_SCHEME.len()..];
    let (hosts, cluster) = rest
        .split_once('/')
        .ok_or_else(|| bad("names no cluster (…/CLUSTER)".into()))?;
    if cluster.is_empty() {
        return Err(bad("names no cluster (…/CLUSTER)".into()));
    }
    if cluster.contains('/') {
        return Err(bad(format!("the cluster {cluster:?} contains '/'")));
    }
    if hosts.contains("://") {
        return Err(bad("an endpoint carries a scheme".into()));
    }
    let hosts = hosts.replace(';', ",");
    if hosts.split(',').all(|h| h.trim().is_empty()) {
        return Err(bad("names no etcd endpoint".into()));
    }
    let config = EtcdConfig::new(&hosts)
        .map_err(|e| bad(e.to_string()))?
        .with_cluster(cluster);
    let config = with_access(config, |name| std::env::var(name).ok())?;
    config.validate().map_err(|e| bad(e.to_string()))?;
    Ok(config)
}

/// The environment variables that give an `etcd://` address its credentials and TLS files,
/// the same the elected master's `--etcd-*` flags read.
pub const ACCESS_VARS: [&str; 5] = [
    "YUEBING_ETCD_USER",
    "YUEBING_ETCD_PASSWORD",
    "YUEBING_ETCD_CA",
    "YUEBING_ETCD_CERT",
    "YUEBING_ETCD_KEY",
];

/// `config` with the credentials and TLS files that `lookup` finds under [`ACCESS_VARS`]
/// (unset or empty: `config`'s own stay): a user goes with a password, a certificate with its
/// key; a CA or a certificate turns the endpoints to `https://`. Only the environment is read:
/// an elected master's `--etcd-*` flags read the same variables, but a value given as a flag
/// or in its config file does not reach the `etcd://` addresses of other processes.
///
/// # Errors
/// [`Error::InvalidConfig`] for a user without a password (or the reverse), or a certificate
/// without a key (or the reverse).
pub fn with_access(
    mut config: EtcdConfig,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<EtcdConfig> {
    let [user, password, ca, cert, key] =
        ACCESS_VARS.map(|name| lookup(name).filter(|v| !v.is_empty()));
    let bad = |reason: &str| Error::InvalidConfig {
        reason: reason.to_string(),
    };
    match (user, password) {
        (Some(user), Some(password)) => {
            config.credentials = Some(crate::config::Credentials { user, password });
        }
        // Unset: whatever `config` has stays.
        (None, None) => {}
        _ => {
            return Err(bad(
                "YUEBING_ETCD_USER and YUEBING_ETCD_PASSWORD go together",
            ))
        }
    }
    if cert.is_some() != key.is_some() {
        return Err(bad("YUEBING_ETCD_CERT and YUEBING_ETCD_KEY go together"));
    }
    if ca.is_some() || cert.is_some() {
        config.tls = Some(crate::config::TlsFiles {
            ca: ca.map(Into::into),
            cert: cert.map(Into::into),
            key: key.map(Into::into),
            ..Default::default()
        });
        for endpoint in &mut config.endpoints {
            if !endpoint.contains("://") {
                *endpoint = format!("https://{endpoint}");
            }
        }
    }
    Ok(config)
}

/// The leader of `config`'s cluster as its election reports it, for
/// `yuebing_store::ClientConfig::leader`: `None` until a leader is known, then the last
/// leader seen, until another wins. The client, its connections and the task that follows
/// the election live on `handle`'s runtime; the task ends, and the etcd client with it, once
/// every receiver of the channel is dropped.
///
/// # Errors
/// Bad settings ([`Error::InvalidConfig`]); with credentials, a refusal or a timeout while
/// authenticating. etcd being down is no error here: connections are made lazily, and the
/// client's calls wait for a leader within their deadline.
pub async fn leader_source(
    config: &EtcdConfig,
    handle: &Handle,
) -> Result<watch::Receiver<Option<Endpoint>>> {
    let election = Election::connect_on(config, OBSERVER_TTL, handle.clone()).await?;
    Ok(LeaderWatch::detached(election, handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn credentials_and_tls_come_from_the_environment_in_pairs() {
        let base = || EtcdConfig::new("h1:2379,h2:2379").unwrap();
        let plain = with_access(base(), vars(&[])).unwrap();
        assert!(plain.credentials.is_none() && plain.tls.is_none());
        let auth = with_access(
            base(),
            vars(&[("YUEBING_ETCD_USER", "u"), ("YUEBING_ETCD_PASSWORD", "p")]),
        )
        .unwrap();
        assert_eq!(auth.credentials.unwrap().user, "u");
        let e = with_access(base(), vars(&[("YUEBING_ETCD_USER", "u")])).unwrap_err();
        assert_eq!(e.code(), -5001);
        let tls = with_access(base(), vars(&[("YUEBING_ETCD_CA", "/ca.pem")])).unwrap();
        assert_eq!(tls.endpoints, ["https://h1:2379", "https://h2:2379"]);
        assert_eq!(
            tls.tls.unwrap().ca.unwrap(),
            std::path::Path::new("/ca.pem")
        );
        let e = with_access(base(), vars(&[("YUEBING_ETCD_CERT", "/c.pem")])).unwrap_err();
        assert!(e.to_string().contains("CERT"), "{e}");
    }

    #[test]
    fn etcd_addresses_parse() {
        let c = parse_master_address(" etcd://127.0.0.1:2379,h2:2380/prod ").unwrap();
        assert_eq!(c.endpoints, ["127.0.0.1:2379", "h2:2380"]);
        assert_eq!(c.cluster, "prod");
        assert_eq!(c.prefix, crate::config::DEFAULT_PREFIX);
        assert_eq!(
            c.keys().unwrap().election(),
            "/yuebing/prod/master/election"
        );
        let c = parse_master_address("ETCD://[::1]:1;h:2/c-1").unwrap();
        assert_eq!(c.endpoints, ["[::1]:1", "h:2"]);
        assert_eq!(c.cluster, "c-1");
    }

    #[test]
    fn malformed_etcd_addresses_are_refused() {
        for bad in [
            "127.0.0.1:2379",
            "etcd://",
            "etcd:///c",
            "etcd://,/c",
            "etcd://h:1",
            "etcd://h:1/",
            "etcd://h:1/a/b",
            "etcd://h/c",
            "etcd://h:0/c",
            "etcd://h:65536/c",
            "etcd://h:x/c",
            "etcd://http://h:1/c",
            "etcd://:1/c",
        ] {
            let err = parse_master_address(bad).unwrap_err();
            assert_eq!(err.code(), -5001, "{bad:?}: {err}");
            assert!(err.to_string().contains("etcd://host:port"), "{err}");
        }
        let err = parse_master_address("etcd://h:1/a/b").unwrap_err();
        assert!(err.to_string().contains("contains '/'"), "{err}");
        let err = parse_metadata_address("etcd://h:1").unwrap_err();
        assert!(err.to_string().starts_with("invalid"), "{err}");
        assert!(err.to_string().contains("metadata address"), "{err}");
        let c = parse_metadata_address("etcd://127.0.0.1:2379/prod").unwrap();
        assert_eq!(c.keys().unwrap().segment("n"), "/yuebing/prod/segments/n");
    }

    #[test]
    fn only_etcd_schemes_are_etcd_addresses() {
        assert!(is_etcd_address("etcd://h:1/c"));
        assert!(is_etcd_address("  Etcd://"));
        assert!(!is_etcd_address("h:1,h:2"));
        assert!(!is_etcd_address("etcd:/h:1/c"));
        assert!(!is_etcd_address("ét"));
    }
}
