//! etcd for tests (feature `testing`): real members on 127.0.0.1 and a proxy that cuts a client
//! off.
//!
//! - [`EtcdServer`]: one member with etcd's default timing (a lease asked for TTL 1 gets 2 s).
//! - [`EtcdCluster`]: several members with fast elections (`--heartbeat-interval 50
//!   --election-timeout 500`), each killed, stopped or restarted on its own.
//! - [`TcpProxy`]: forwards `127.0.0.1:<port>` to one member, until [`TcpProxy::cut`].
//!
//! Ports are chosen at random below 32768 (outside the range the kernel hands to outgoing
//! connections), tried with a bind first, never handed out twice in one process, and never
//! 2379/2380, etcd's defaults; a member that finds its port taken anyway exits at once and the
//! start is retried on other ports. Every address is on 127.0.0.1. Each member logs to a file in
//! its temp directory, which goes away with the server. Members are killed (SIGKILL) and reaped
//! when their owner is dropped, and get SIGKILL from the kernel if the test process dies first
//! (`PR_SET_PDEATHSIG`).
//!
//! The etcd binary is `$YUEBING_ETCD_BIN`, else `/usr/bin/etcd`, else `etcd` on the `PATH`;
//! without one, starting fails with an error that says to run `scripts/test.sh`, which
//! installs Debian's `etcd-server`.

mod cluster;
mod member;
mod ports;
mod proxy;

use std::path::PathBuf;

pub use cluster::{EtcdCluster, EtcdServer};
pub use proxy::TcpProxy;

use crate::error::{Error, Result};

/// The etcd binary the harness runs (see the module documentation).
pub fn etcd_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("YUEBING_ETCD_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::Process {
                reason: format!("YUEBING_ETCD_BIN={} is not a file", path.display()),
            })
        };
    }
    let usual = PathBuf::from("/usr/bin/etcd");
    if usual.is_file() {
        return Ok(usual);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    });
    on_path.ok_or_else(|| Error::Process {
        reason: "no etcd binary (/usr/bin/etcd, `etcd` on the PATH, or $YUEBING_ETCD_BIN): \
                 run scripts/test.sh, which installs Debian's etcd-server"
            .into(),
    })
}
