//! The master's admin HTTP server: Mooncake's paths on the master's metrics port, same
//! meaning, so that operators' probes and SGLang's `check_server` carry over.
//!
//! | path | answer |
//! |---|---|
//! | `/health` | JSON: `status`, `role`, `ha_state`, `service_ready` (always 200) |
//! | `/ready` | 200 `ready` while this master serves (leader or single, caught up), else 503 |
//! | `/role` | `leader` or `standby` |
//! | `/ha_status` | `serving`, `leader_warmup` (won, not serving yet) or `standby` |
//! | `/get_all_segments` | the nodes with store space, one a line |
//! | `/query_key?key=K` | JSON `{"success":true,"data":[{buffer_address,size,transport_endpoint}]}`, or 404 with the error's code (no lease is granted) |
//! | `/metrics` | Prometheus text of the master's registry (`MasterServerConfig::metrics`): its counts and gauges (`yuebing_master_*`), its rpc server's calls, errors, calls in flight and latency per service and method (`yuebing_rpc_server_*`), the process's (`yuebing_process_*`); 404 where the metrics go to an application's own recorder |
//! | `/metrics/summary` | one line, with Mooncake's names (`master_key_count`, ...) |
//!
//! The state paths answer 503 where this master does not serve (a standby), as Mooncake's.
//! Served on the master's runtime through axum; bound to an explicit address.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub use crate::http::AdminServer;

use super::server::Shared;
use super::service::Health;
use crate::error::{Error, Result};

/// Serves `shared`'s admin paths on `bind` (`host:port`; port 0 picks one) until the returned
/// server is dropped.
pub(crate) async fn start(shared: Arc<Shared>, bind: &str) -> Result<AdminServer> {
    let app = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/role", get(role))
        .route("/ha_status", get(ha_status))
        .route("/get_all_segments", get(all_segments))
        .route("/query_key", get(query_key))
        .route("/metrics", get(metrics))
        .route("/metrics/summary", get(summary))
        .with_state(shared);
    crate::http::serve(app, bind).await
}

/// Mooncake's role of a master in `health`: `leader` for one that serves or may (a single
/// master, an elected leader), `standby` otherwise.
fn role_of(h: &Health) -> &'static str {
    match h.role.as_str() {
        "standby" => "standby",
        _ => "leader",
    }
}

/// Whether this master serves calls now.
fn serving(h: &Health) -> bool {
    h.ready && role_of(h) == "leader"
}

/// Mooncake's runtime state: `serving`, `leader_warmup` or `standby`.
fn ha_state_of(h: &Health) -> &'static str {
    match (role_of(h), serving(h)) {
        ("leader", true) => "serving",
        ("leader", false) => "leader_warmup",
        _ => "standby",
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// 503, as Mooncake answers where the service plane is not active.
fn unavailable(e: &Error) -> Response {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("service plane is not active: {e}\n"),
    )
}

async fn health(State(s): State<Arc<Shared>>) -> Response {
    let h = s.health();
    json(
        StatusCode::OK,
        serde_json::json!({
            "status": "ok",
            "role": role_of(&h),
            "ha_state": ha_state_of(&h),
            "service_ready": serving(&h),
        }),
    )
}

async fn ready(State(s): State<Arc<Shared>>) -> Response {
    match serving(&s.health()) {
        true => text(StatusCode::OK, "ready\n".into()),
        false => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
    }
}

async fn role(State(s): State<Arc<Shared>>) -> Response {
    text(StatusCode::OK, role_of(&s.health()).into())
}

async fn ha_status(State(s): State<Arc<Shared>>) -> Response {
    text(StatusCode::OK, ha_state_of(&s.health()).into())
}

async fn all_segments(State(s): State<Arc<Shared>>) -> Response {
    match s.run(|m, _| m.segments()).await {
        Ok(segments) => {
            let mut nodes: Vec<String> = segments.into_iter().map(|g| g.node).collect();
            nodes.sort();
            nodes.dedup();
            let body: String = nodes.into_iter().map(|n| n + "\n").collect();
            text(StatusCode::OK, body)
        }
        Err(e) => unavailable(&e),
    }
}

#[derive(serde::Deserialize)]
struct KeyQuery {
    #[serde(default)]
    key: String,
}

async fn query_key(State(s): State<Arc<Shared>>, Query(q): Query<KeyQuery>) -> Response {
    let key = q.key;
    match s.run(move |m, _| m.describe_replicas(&key)).await {
        Ok(Ok(replicas)) => {
            let data: Vec<serde_json::Value> = replicas
                .into_iter()
                .map(|r| {
                    serde_json::json!({
                        "buffer_address": r.addr,
                        "size": r.len,
                        "transport_endpoint": r.node,
                    })
                })
                .collect();
            json(
                StatusCode::OK,
                serde_json::json!({"success": true, "data": data}),
            )
        }
        Ok(Err(e)) => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({
                "success": false,
                "error_code": e.code(),
                "error_message": e.to_string(),
            }),
        ),
        Err(e) => unavailable(&e),
    }
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    let h = s.health();
    let m = s.metrics();
    m.standing(&h, serving(&h));
    // A master that does not serve (a standby) shows no counts of its own.
    let held = s
        .run(|core, now| (core.stats(), core.leases_held(now), core.segments()))
        .await
        .ok();
    m.held(held);
    match m.registry().render() {
        Some(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, crate::http::EXPOSITION)],
            body,
        )
            .into_response(),
        None => text(
            StatusCode::NOT_FOUND,
            "this master's metrics go to the application's recorder\n".into(),
        ),
    }
}

async fn summary(State(s): State<Arc<Shared>>) -> Response {
    let h = s.health();
    let master = match s.run(|m, _| m.stats()).await {
        Ok(st) => format!(
            "master_key_count={}, master_allocated_bytes={}, master_total_capacity_bytes={}, \
             master_active_clients={}, master_segments={}, master_evicted_keys={}",
            st.objects, st.bytes_used, st.bytes_capacity, st.clients, st.mounts, st.evicted
        ),
        Err(_) => String::new(),
    };
    text(
        StatusCode::OK,
        format!(
            "role={}, state={}, service_ready={}, master={{{master}}}\n",
            role_of(&h),
            ha_state_of(&h),
            serving(&h)
        ),
    )
}
