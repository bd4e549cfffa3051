//! The master's admin HTTP server: Mooncake's paths on the master's metrics port, same
//! meaning, so that operators' probes and SGLang's `check_server` carry over.
//!
//! | path | answer |
//! |---|---|
//! | `/health` | JSON: `status`, `role`, `ha_state`, `service_ready` (always 200) |
//! | `/ready` | 200 `ready` while this master serves (leader or single, caught up), else 503 |
//! | `/role` | `leader` or `standby` |
//! | `/ha_status` | `serving`, `leader_warmup` (won, not serving yet) or `standby` |
//! | `/get_all_segments` | the mounted ranges' nodes, one line each (`text/plain; version=0.0.4`) |
//! | `/query_key?key=K` | JSON `{"success":true,"data":[{size_,buffer_address_,protocol_,transport_endpoint_}]}`, or 404 `{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}` (no lease is granted) |
//! | `/metrics` | Prometheus text of the master's registry (`MasterServerConfig::metrics`): its counts and gauges (`yuebing_master_*`), its rpc server's calls, errors, calls in flight and latency per service and method (`yuebing_rpc_server_*`), the process's (`yuebing_process_*`); 404 where the metrics go to an application's own recorder |
//! | `/metrics/summary` | one line, with Mooncake's names (`master_key_count`, ...) |
//!
//! The state paths answer 503 where this master does not serve (a standby), as Mooncake's.
//! `/get_all_segments` and `/query_key` answer as the stock master (the wheel
//! `mooncake-transfer-engine-non-cuda` 0.3.13.post1) does, checked against its captured answers
//! (`tests/fixtures/mooncake_admin/`, `scripts/capture_mooncake_admin.sh`).
//! Served on the master's runtime through axum; bound to an explicit address.

use std::sync::{Arc, Weak};

use axum::extract::{FromRequestParts, RawQuery};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

pub use crate::http::AdminServer;

use super::server::Shared;
use super::service::Health;
use crate::error::{Error, Result};

/// Serves `shared`'s admin paths on `bind` (`host:port`; port 0 picks one) until the returned
/// server is dropped. The server holds the master weakly: a master dropped while its admin
/// server lives is gone, and every path answers 503.
pub(crate) async fn start(shared: &Arc<Shared>, bind: &str) -> Result<AdminServer> {
    let app = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/role", get(role))
        .route("/ha_status", get(ha_status))
        .route("/get_all_segments", get(all_segments))
        .route("/query_key", get(query_key))
        .route("/metrics", get(metrics))
        .route("/metrics/summary", get(summary))
        .with_state(Arc::downgrade(shared));
    crate::http::serve(app, bind).await
}

/// The master an admin path answers for, while it lives.
struct Master(Arc<Shared>);

impl FromRequestParts<Weak<Shared>> for Master {
    type Rejection = Response;

    async fn from_request_parts(
        _: &mut Parts,
        held: &Weak<Shared>,
    ) -> std::result::Result<Self, Response> {
        held.upgrade().map(Master).ok_or_else(|| {
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the master is gone\n".into(),
            )
        })
    }
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

/// Mooncake's `UNAVAILABLE_IN_CURRENT_MODE`, the code of the stock master's 503 on its state
/// paths where its service plane is not active (a standby). Mooncake's number, in these answers
/// only: yuebing's own errors have no −1011.
const UNAVAILABLE_IN_CURRENT_MODE: i32 = -1011;

/// The content type of the stock master's text lists (`/get_all_segments`, as its `/metrics`).
const MOONCAKE_TEXT: &str = "text/plain; version=0.0.4";

/// A failed state path, as the stock master writes it: `success`, `error_code`,
/// `error_message`, in this order.
#[derive(serde::Serialize)]
struct Failure {
    success: bool,
    error_code: i32,
    error_message: String,
}

/// `status` with `body` as JSON, its fields in their declared order (as the stock master's).
fn json_of(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (
            status,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            text,
        )
            .into_response(),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// 503, as the stock master answers where its service plane is not active (a standby), word
/// for word; why this master does not serve (`/health`, `/role` and `/ha_status` say which
/// state it is in) is logged at debug.
fn unavailable(e: &Error) -> Response {
    tracing::debug!(error = %e, "admin path refused: this master does not serve");
    json_of(
        StatusCode::SERVICE_UNAVAILABLE,
        &Failure {
            success: false,
            error_code: UNAVAILABLE_IN_CURRENT_MODE,
            error_message: "service plane is not active".into(),
        },
    )
}

/// Mooncake's name of an error's code (its `toString(ErrorCode)`): `ObjectNotFound` →
/// `OBJECT_NOT_FOUND`.
fn mooncake_name(e: &Error) -> String {
    let mut out = String::new();
    for (i, c) in e.name().chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

async fn health(Master(s): Master) -> Response {
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

async fn ready(Master(s): Master) -> Response {
    match serving(&s.health()) {
        true => text(StatusCode::OK, "ready\n".into()),
        false => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
    }
}

async fn role(Master(s): Master) -> Response {
    text(StatusCode::OK, role_of(&s.health()).into())
}

async fn ha_status(Master(s): Master) -> Response {
    text(StatusCode::OK, ha_state_of(&s.health()).into())
}

/// One line per mounted range that takes replicas, as the stock master lists one line per
/// segment in state OK: a node with two ranges appears twice, one being unmounted (or not
/// remounted since a restart) not at all. Sorted, where the stock master's order is its hash
/// map's. Its content type, `text/plain; version=0.0.4`, also on an empty list.
async fn all_segments(Master(s): Master) -> Response {
    match s.run(|m, _| m.segments()).await {
        Ok(segments) => {
            let mut nodes: Vec<String> = segments
                .into_iter()
                .filter(|g| g.ready && !g.draining)
                .map(|g| g.node)
                .collect();
            nodes.sort();
            let body: String = nodes.into_iter().map(|n| n + "\n").collect();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, MOONCAKE_TEXT)],
                body,
            )
                .into_response()
        }
        Err(e) => unavailable(&e),
    }
}

/// A memory replica as the stock master's `/query_key` describes it: its
/// `AllocatedBuffer::Descriptor`, whose field names end in `_`, in its order.
#[derive(serde::Serialize)]
struct BufferDescriptor {
    #[serde(rename = "size_")]
    size: u64,
    #[serde(rename = "buffer_address_")]
    buffer_address: u64,
    /// Always `tcp`: a node's segment name is its tcp endpoint; shared memory between
    /// processes of one host is the engine's choice per peer, not the segment's.
    #[serde(rename = "protocol_")]
    protocol: &'static str,
    #[serde(rename = "transport_endpoint_")]
    transport_endpoint: String,
}

/// `/query_key`'s answer for a key it holds.
#[derive(serde::Serialize)]
struct Replicas {
    success: bool,
    data: Vec<BufferDescriptor>,
}

/// The `key` parameter as the stock master reads it: the value of the first `key=` pair, as it
/// stands in the query (not percent-decoded: `key=a+b` names `a+b`, `key=a%2Fb` names `a%2Fb`),
/// or the empty key where there is none.
fn raw_key(query: Option<&str>) -> &str {
    query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some(("key", value)) => Some(value),
            _ => None,
        })
        .unwrap_or("")
}

/// The replicas of a key, without granting a lease; 404 with Mooncake's code and name of the
/// error where there are none (for a missing, empty or invalid key, `OBJECT_NOT_FOUND` −704, as
/// the stock master answers for any key it does not hold).
async fn query_key(Master(s): Master, RawQuery(query): RawQuery) -> Response {
    let key = raw_key(query.as_deref()).to_string();
    let lookup = key.clone();
    match s.run(move |m, _| m.describe_replicas(&lookup)).await {
        Ok(Ok(replicas)) => {
            let data = replicas
                .into_iter()
                .map(|r| BufferDescriptor {
                    size: r.len,
                    buffer_address: r.addr,
                    protocol: "tcp",
                    transport_endpoint: r.node,
                })
                .collect();
            json_of(
                StatusCode::OK,
                &Replicas {
                    success: true,
                    data,
                },
            )
        }
        Ok(Err(e)) => {
            let e = match e {
                Error::InvalidParams { .. } => Error::ObjectNotFound { key },
                e => e,
            };
            json_of(
                StatusCode::NOT_FOUND,
                &Failure {
                    success: false,
                    error_code: e.code(),
                    error_message: mooncake_name(&e),
                },
            )
        }
        Err(e) => unavailable(&e),
    }
}

async fn metrics(Master(s): Master) -> Response {
    let h = s.health();
    let m = s.metrics();
    m.standing(&h, serving(&h));
    // A master that does not serve (a standby) shows no counts of its own.
    let held = s
        .run(|core, now| (core.stats(), core.leases_held(now), core.segments()))
        .await
        .ok();
    m.held(held);
    crate::http::exposition(m.registry(), "master")
}

async fn summary(Master(s): Master) -> Response {
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
