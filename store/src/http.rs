//! The admin HTTP server of the master and of clients that ask for one: a router served on
//! the caller's runtime through axum, bound to an explicit address, stopped when dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;

use crate::error::{Error, Result};

/// The content type of `/metrics`: Prometheus' text format, version 0.0.4.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `/metrics` of `registry` (whose: `master`, `client`): its Prometheus text, or 404 where
/// the metrics go to an application's own recorder.
pub(crate) fn exposition(
    registry: &crate::MetricsRegistry,
    whose: &str,
) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    match registry.render() {
        Some(body) => (StatusCode::OK, [(header::CONTENT_TYPE, EXPOSITION)], body).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("this {whose}'s metrics go to the application's recorder\n"),
        )
            .into_response(),
    }
}

/// A running admin server; dropping it stops it (its port is free again shortly after;
/// [`AdminServer::stop`] waits for that).
pub struct AdminServer {
    addr: SocketAddr,
    /// The accept loop; aborting it drops the listener. Connections already accepted run
    /// to their end.
    task: tokio::task::JoinHandle<()>,
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

    /// Stops it and waits (at most a second) until its listener is closed, for a caller that
    /// binds the same port next (a client set up again). Blocks the calling thread: call it
    /// from a plain thread, not from a runtime's task.
    pub fn stop(self) {
        self.task.abort();
        let until = Instant::now() + Duration::from_secs(1);
        while !self.task.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
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
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the admin server stopped");
        }
    });
    Ok(AdminServer { addr, task })
}
