//! The admin HTTP server of the master and of clients that ask for one: a router served on
//! the caller's runtime through axum, bound to an explicit address, stopped when dropped.

use std::net::SocketAddr;

use axum::Router;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::{Error, Result};

/// A running admin server; dropping it stops it.
pub struct AdminServer {
    addr: SocketAddr,
    _stop: DropGuard,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// The bound address (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Serves `app` on `bind` (`host:port`; port 0 picks one), on the current runtime, until the
/// returned server is dropped. An address that cannot be bound is `InvalidParams`.
pub(crate) async fn serve(app: Router, bind: &str) -> Result<AdminServer> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| Error::params(format!("admin server: cannot listen on {bind}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| Error::Internal {
        reason: format!("admin server: {e}"),
    })?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the admin server stopped");
        }
    });
    Ok(AdminServer {
        addr,
        _stop: stop.drop_guard(),
    })
}
