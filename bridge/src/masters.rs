//! Where a bridged store client finds its masters, as its caller writes them: a list of
//! addresses (`"h:p,h:p"`, tried in order) or `"etcd://h:p[,h:p…]/CLUSTER"`, the leader
//! elected in that cluster, found through etcd and followed as leadership changes. The latter
//! needs the bridge's cargo feature `etcd`; without it such an address is refused with
//! [`Error::EtcdNotBuilt`].
//!
//! This is the one parser of master addresses: the bridge's Rust callers, its C ABI
//! (`yuebing_store_config.master`), Python's `Store(masters)` and the `yuebing` command line
//! (`--master`, `YUEBING_MASTERS`, `client.masters`) all call [`Masters::parse`]. Items of a
//! list are trimmed and empty ones skipped (`"h:1, h:2,"` is two masters); a list naming no
//! address at all is refused. It lives here, not lower, because the `etcd://` form needs
//! `yuebing-etcd`, which depends on `yuebing-store`: the bridge is the lowest crate that can
//! see both forms in every build.

use yuebing_rpc::Endpoint;
use yuebing_store::ClientConfig;

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::{Error, Result};

/// Where a store client finds its masters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Masters {
    /// Master addresses, tried in order.
    List(Vec<Endpoint>),
    /// The leader elected in an etcd cluster (`etcd://h:p,h:p/CLUSTER`).
    #[cfg(feature = "etcd")]
    Etcd(Box<yuebing_etcd::EtcdConfig>),
}

/// What an address that names an etcd cluster starts with (in any case).
const ETCD_SCHEME: &str = "etcd://";

/// Whether `text` is an `etcd://` address, in every build.
pub fn is_etcd_address(text: &str) -> bool {
    text.trim_start()
        .get(..ETCD_SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(ETCD_SCHEME))
}

impl Masters {
    /// Parses `"h:p,h:p"` or `"etcd://h:p[,h:p…]/CLUSTER"` (surrounding spaces ignored).
    ///
    /// # Errors
    /// A list naming no address is `InvalidParams` (−600), a malformed address the rpc
    /// layer's `InvalidEndpoint` (−2012); a malformed etcd address `EtcdInvalidConfig`
    /// (−5001); any etcd address in a build without the feature [`Error::EtcdNotBuilt`].
    pub fn parse(text: &str) -> Result<Masters> {
        if is_etcd_address(text) {
            return etcd(text);
        }
        let list = text
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::parse::<Endpoint>)
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err(Error::Store(yuebing_store::Error::InvalidParams {
                reason: format!("the master address {text:?} names no endpoint"),
            }));
        }
        Ok(Masters::List(list))
    }

    /// Puts these masters into `cfg`: the list, or a source of the leader (its etcd client
    /// and the task that follows the election on `handle`'s runtime, living as long as the
    /// client made from `cfg` does).
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub async fn apply(
        self,
        cfg: &mut ClientConfig,
        handle: &tokio::runtime::Handle,
    ) -> Result<()> {
        match self {
            Masters::List(list) => cfg.masters = list,
            #[cfg(feature = "etcd")]
            Masters::Etcd(etcd) => {
                let source = yuebing_etcd::address::leader_source(&etcd, handle).await?;
                cfg.masters.clear();
                cfg.leader = Some(source);
            }
        }
        Ok(())
    }

    /// [`Masters::apply`] on `bridge`'s runtime, as a [`Call`] that ends with `cfg`.
    pub fn apply_call(self, bridge: &Bridge, mut cfg: ClientConfig) -> Call<ClientConfig> {
        let handle = bridge.handle().clone();
        bridge.call(async move {
            self.apply(&mut cfg, &handle).await?;
            Ok::<_, Error>(cfg)
        })
    }
}

impl std::str::FromStr for Masters {
    type Err = Error;

    fn from_str(text: &str) -> Result<Masters> {
        Masters::parse(text)
    }
}

#[cfg(feature = "etcd")]
fn etcd(text: &str) -> Result<Masters> {
    let config = yuebing_etcd::address::parse_master_address(text)?;
    Ok(Masters::Etcd(Box::new(config)))
}

#[cfg(not(feature = "etcd"))]
fn etcd(text: &str) -> Result<Masters> {
    Err(Error::EtcdNotBuilt {
        address: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_are_refused() {
        let want = vec!["127.0.0.1:1".parse().unwrap(), "h:2".parse().unwrap()];
        assert_eq!(
            Masters::parse(" 127.0.0.1:1, h:2,").unwrap(),
            Masters::List(want)
        );
        assert_eq!(Masters::parse(" , ").unwrap_err().code(), -600);
        assert_eq!(Masters::parse("h:1,nope").unwrap_err().code(), -2012);
    }

    #[test]
    fn empty_items_and_whitespace_are_skipped_and_an_empty_list_refused() {
        let want: Vec<Endpoint> = vec!["h:1".parse().unwrap(), "h:2".parse().unwrap()];
        for text in ["h:1,h:2", " h:1 ,\th:2\n", ",h:1,,h:2,", "h:1, ,h:2"] {
            assert_eq!(
                Masters::parse(text).unwrap(),
                Masters::List(want.clone()),
                "{text:?}"
            );
        }
        assert_eq!(
            "h:1".parse::<Masters>().unwrap(),
            Masters::List(want[..1].to_vec())
        );
        for empty in ["", "   ", ",", " ,, "] {
            let e = Masters::parse(empty).unwrap_err();
            assert_eq!(e.code(), -600, "{empty:?}: {e}");
            assert!(e.to_string().contains("names no endpoint"), "{e}");
        }
        // One malformed item refuses the whole list, naming it.
        for bad in ["h:1,h", "h:1,h:x", "h:1,h:99999"] {
            let e = Masters::parse(bad).unwrap_err();
            assert_eq!(e.code(), -2012, "{bad:?}: {e}");
        }
    }

    #[test]
    fn etcd_addresses_are_told_apart_in_any_case() {
        for etcd in ["etcd://h:1/c", "  ETCD://h:1/c", "Etcd://"] {
            assert!(is_etcd_address(etcd), "{etcd:?}");
        }
        for list in ["h:1,h:2", "etcd:/h:1/c", "etcd", "ét"] {
            assert!(!is_etcd_address(list), "{list:?}");
        }
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn etcd_addresses_need_the_feature() {
        let e = Masters::parse("etcd://127.0.0.1:2379/c").unwrap_err();
        assert_eq!(e.code(), -4012);
        assert_eq!(e.name(), "EtcdNotBuilt");
        assert!(e.to_string().contains("--features etcd"), "{e}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_addresses_parse_and_bad_ones_are_refused() {
        match Masters::parse("etcd://127.0.0.1:2379,h:2/prod").unwrap() {
            Masters::Etcd(c) => {
                assert_eq!(c.endpoints, ["127.0.0.1:2379", "h:2"]);
                assert_eq!(c.cluster, "prod");
            }
            other => panic!("{other:?}"),
        }
        for bad in ["etcd://h:1", "etcd:///c", "etcd://h:0/c", "etcd://h:1/a/b"] {
            let e = Masters::parse(bad).unwrap_err();
            assert_eq!(e.code(), -5001, "{bad}: {e}");
            assert_eq!(e.name(), "EtcdInvalidConfig");
        }
    }
}
