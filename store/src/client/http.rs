//! A client's own admin HTTP server, served only when asked ([`Client::serve_admin`]), so that
//! several clients on one machine never collide: Mooncake's client paths and a readiness probe.
//!
//! | path | answer |
//! |---|---|
//! | `/health` | Mooncake's JSON `{"status": "healthy" \| "not_initialized" \| "master_unreachable", "code": n}`: 200 when healthy, else 503 |
//! | `/ready` | 200 `ready` while the master confirmed this client with its store space mounted within four heartbeats, else 503 |
//! | `/metrics` | Prometheus text of the client's registry (`ClientConfig::metrics`): its store space and put/get latency by size class (`yuebing_client_*`), its calls to the masters (`yuebing_rpc_client_*`), what its engine moved (`yuebing_engine_*`: transfers, bytes, failures by code, per transport and direction), the process's (`yuebing_process_*`); 404 where the metrics go to an application's own recorder |
//!
//! The server holds the client weakly: once the client is dropped, every path answers 503.

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{Client, ClientHealth, Inner, Options};
use crate::error::Result;
use crate::http::AdminServer;

impl Client {
    /// Serves this client's admin paths (see the module docs: `/health`, `/ready`,
    /// `/metrics`) on `bind` (`host:port`; port 0 picks one) until the returned server is
    /// dropped, on the client's runtime. Nothing is served unless asked.
    pub fn serve_admin(
        &self,
        bind: &str,
    ) -> impl std::future::Future<Output = Result<AdminServer>> + Send + use<> {
        let app = Router::new()
            .route("/health", get(health))
            .route("/ready", get(ready))
            .route("/metrics", get(metrics))
            .with_state(Arc::downgrade(&self.inner));
        let bind = bind.to_string();
        let handle = self.inner.engine.handle().clone();
        async move {
            yuebing_rpc::in_runtime(&handle, async move { crate::http::serve(app, &bind).await })
                .await
        }
    }
}

type Held = State<Weak<Inner>>;

fn text(status: StatusCode, body: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

fn gone() -> Response {
    text(StatusCode::SERVICE_UNAVAILABLE, "the client is gone\n")
}

/// A client of `inner` without a heartbeat of its own (the caller's keeps beating).
fn client_of(inner: Arc<Inner>) -> Client {
    Client {
        inner,
        _heartbeat: Arc::new(super::heartbeat::Heartbeat::none()),
    }
}

async fn health(State(held): Held) -> Response {
    let Some(inner) = held.upgrade() else {
        return gone();
    };
    let deadline = inner.cfg.heartbeat.max(Duration::from_secs(1));
    let health = client_of(inner)
        .health_check(Options {
            deadline: Some(deadline),
            ..Options::default()
        })
        .await;
    let status = match health {
        ClientHealth::Healthy => "healthy",
        ClientHealth::Closed => "not_initialized",
        ClientHealth::MasterUnreachable => "master_unreachable",
    };
    let code = match health {
        ClientHealth::Healthy => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = serde_json::json!({"status": status, "code": health.code()});
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Whether the master confirmed the client within four heartbeats (the longest gap between
/// two confirmations of a healthy client: an interval and a ping's bound of three) and it is
/// open.
fn is_ready(inner: &Inner) -> bool {
    !inner.closed.load(std::sync::atomic::Ordering::Acquire)
        && inner.standing.is_current(inner.cfg.heartbeat * 4)
}

async fn ready(State(held): Held) -> Response {
    match held.upgrade() {
        Some(inner) if is_ready(&inner) => text(StatusCode::OK, "ready\n"),
        Some(_) => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        None => gone(),
    }
}

async fn metrics(State(held): Held) -> Response {
    let Some(inner) = held.upgrade() else {
        return gone();
    };
    let ready = is_ready(&inner);
    let spaces = client_of(inner.clone()).spaces();
    inner
        .metrics
        .standing(ready, spaces.iter().map(|(_, _, len)| *len));
    crate::http::exposition(inner.metrics.registry(), "client")
}
