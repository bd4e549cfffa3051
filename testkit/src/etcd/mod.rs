//! etcd for tests (feature `etcd`): real members on 127.0.0.1 and a proxy that cuts a client
//! off.
//!
//! - [`EtcdServer`]: one member with etcd's default timing (a lease asked for TTL 1 gets 2 s).
//! - [`EtcdCluster`]: several members with fast elections (`--heartbeat-interval 50
//!   --election-timeout 500`), each killed, stopped or restarted on its own.
//! - [`TcpProxy`]: forwards `127.0.0.1:<port>` to one member, until [`TcpProxy::cut`].
//!
//! Ports come from [`crate::ports`] (random below 32768, never handed out twice, never
//! 2379/2380, etcd's defaults); a member that finds its port taken anyway exits at once and the
//! start is retried on other ports. Every address is on 127.0.0.1. Each member logs to a file in
//! its temp directory, which goes away with the server. Members run under a
//! [`crate::process::Guard`]: killed (SIGKILL) and reaped when their owner is dropped, and
//! killed by the kernel if the test process dies first (`PR_SET_PDEATHSIG`).
//!
//! A client of the members is the caller's: [`EtcdCluster::endpoints`] lists where they
//! listen (`127.0.0.1:<port>`), for `yuebing_etcd::EtcdConfig::new(&endpoints.join(","))`.
//!
//! The etcd binary is `$YUEBING_ETCD_BIN`, else `/usr/bin/etcd`, else `etcd` on the `PATH`;
//! without one, starting fails with an error that says to run `scripts/test.sh`, which
//! installs Debian's `etcd-server`.

mod cluster;
mod member;
mod proxy;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use cluster::{EtcdCluster, EtcdServer};
pub use proxy::TcpProxy;

use crate::error::{Error, Result};

/// The etcd binary the harness runs (see the module documentation).
pub fn etcd_binary() -> Result<PathBuf> {
    find_binary(
        std::env::var_os("YUEBING_ETCD_BIN"),
        Path::new("/usr/bin/etcd"),
        std::env::var_os("PATH"),
    )
}

/// What to tell someone whose machine has no usable etcd.
const INSTALL: &str = "run scripts/test.sh, which installs Debian's etcd-server";

/// The binary named by `chosen` if set, else `usual` if it exists, else `etcd` on `path`.
fn find_binary(chosen: Option<OsString>, usual: &Path, path: Option<OsString>) -> Result<PathBuf> {
    if let Some(chosen) = chosen {
        let chosen = PathBuf::from(chosen);
        return if chosen.is_file() {
            Ok(chosen)
        } else {
            Err(Error::process(format!(
                "YUEBING_ETCD_BIN={} is not a file: unset it, or {INSTALL}",
                chosen.display()
            )))
        };
    }
    if usual.is_file() {
        return Ok(usual.to_path_buf());
    }
    let on_path = path.and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    });
    on_path.ok_or_else(|| {
        Error::process(format!(
            "no etcd binary ({}, `etcd` on the PATH, or $YUEBING_ETCD_BIN): {INSTALL}",
            usual.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_etcd_says_how_to_install_it() {
        let nowhere = Path::new("/nonexistent/etcd");
        let err = find_binary(None, nowhere, Some("/nonexistent/bin".into())).unwrap_err();
        assert!(matches!(err, Error::Process { .. }), "{err:?}");
        assert!(err.to_string().contains("scripts/test.sh"), "{err}");
        let err = find_binary(Some(nowhere.into()), nowhere, None).unwrap_err();
        assert!(err.to_string().contains("scripts/test.sh"), "{err}");
        let here = std::env::current_exe().unwrap();
        assert_eq!(
            find_binary(Some(here.clone().into()), nowhere, None).unwrap(),
            here
        );
        assert_eq!(find_binary(None, &here, None).unwrap(), here);
    }
}
