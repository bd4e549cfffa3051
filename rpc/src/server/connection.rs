//! One accepted connection: preamble, then a tarpc channel whose requests run as tasks.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::server::{BaseChannel, Channel};
use tarpc::{context, ClientMessage, RequestName, Response};
use tokio::sync::OwnedSemaphorePermit;

use super::call::Call;
use super::context::{CallContext, ConnInfo};
use super::{HandlerFuture, Shared};
use crate::endpoint::Socket;
use crate::error::Error;
use crate::preamble::{self, Hello, Reply, PROTOCOL_VERSION};
use crate::transport::{payload_timeout_error, FramedTransport, Limits, SizeLedger, StopReading};

/// What a service needs to serve one connection.
pub(crate) struct ConnSetup {
    pub(super) info: ConnInfo,
    pub(super) limits: Limits,
    pub(super) shared: Arc<Shared>,
}

/// Reads the preamble, refuses or accepts, and hands the socket to the service asked for.
pub(super) async fn handle_socket(
    shared: Arc<Shared>,
    mut socket: Socket,
    peer: String,
    permit: Option<OwnedSemaphorePermit>,
) {
    let conn_id = shared.next_conn_id();
    let read = tokio::time::timeout(shared.config.preamble_timeout, Hello::read(&mut socket));
    let hello = tokio::select! {
        _ = shared.shutdown.cancelled() => return,
        r = read => match r {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::warn!(%peer, conn_id, error = %e, "closing connection: bad preamble");
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, conn_id, "closing connection: no preamble in time");
                return;
            }
        },
    };
    let refusal = check(&shared, &hello, permit.is_some());
    let reply = Reply {
        version: PROTOCOL_VERSION,
        status: refusal.as_ref().map_or(0, Error::code),
        max_frame: shared.admission.frame_limit(),
        message: match &refusal {
            Some(Error::UnknownService { name }) => name.clone(),
            Some(e) => e.to_string(),
            None => String::new(),
        },
    };
    if let Err(e) = preamble::write_reply(&mut socket, &reply).await {
        tracing::debug!(%peer, conn_id, error = %e, "peer left during the preamble");
        return;
    }
    if let Some(e) = refusal {
        tracing::info!(%peer, conn_id, service = %hello.service, error = %e, "refused connection");
        return;
    }
    let Some(runner) = shared.services.get(&hello.service).cloned() else {
        return;
    };
    tracing::debug!(%peer, conn_id, service = %hello.service, "connection accepted");
    let _open = shared.metrics.connected(&hello.service);
    let setup = ConnSetup {
        info: ConnInfo {
            peer,
            conn_id,
            service: hello.service,
        },
        limits: Limits {
            recv_max: shared.admission.frame_limit(),
            send_max: hello.max_frame,
        },
        shared,
    };
    runner(socket, setup).await;
    drop(permit);
}

fn check(shared: &Shared, hello: &Hello, have_slot: bool) -> Option<Error> {
    if hello.version != PROTOCOL_VERSION {
        return Some(Error::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: hello.version,
        });
    }
    let given = hello.token.as_ref().map(crate::Token::as_bytes);
    if !crate::Token::admits(shared.config.token.as_ref(), given) {
        return Some(Error::Unauthenticated);
    }
    if shared.is_draining() {
        return Some(Error::ShuttingDown);
    }
    if !have_slot {
        return Some(Error::Overloaded {
            reason: format!(
                "connection cap of {} reached",
                shared.config.max_connections
            ),
        });
    }
    if !shared.services.contains_key(&hello.service) {
        return Some(Error::UnknownService {
            name: hello.service.clone(),
        });
    }
    None
}

/// Serves one accepted connection of a service until the client leaves, the server shuts down
/// (after the connection's in-flight requests finished) or the server is killed.
///
/// As in coro_rpc, a connection's handlers run on the connection's own task (polled together in
/// a `FuturesUnordered`), not as a task each: no spawn per request, and dropping the connection
/// cancels its handlers. A handler that needs a core for long should use `spawn_blocking`.
pub(super) async fn serve_connection<Req, Resp, H>(socket: Socket, setup: ConnSetup, handler: H)
where
    Req: DeserializeOwned + RequestName + Send + 'static,
    Resp: Serialize + Send + 'static,
    H: Fn(context::Context, Req) -> HandlerFuture<Resp> + Clone + Send + Sync + 'static,
{
    let ConnSetup {
        info,
        limits,
        shared,
    } = setup;
    let info = Arc::new(info);
    let ledger = SizeLedger::default();
    let stop = StopReading::default();
    let transport = FramedTransport::<ClientMessage<Req>, Response<Resp>>::new(socket, limits)
        .with_ledger(ledger.clone())
        .with_budget(shared.admission.read_budget())
        .with_payload_timeout(shared.config.payload_timeout)
        .stop_reading_on(stop.clone());
    let config = tarpc::server::Config {
        pending_response_buffer: 1024,
    };
    let mut requests = BaseChannel::new(config, transport).requests();
    let conn = Arc::new(shared.admission.connection());
    let mut running = FuturesUnordered::new();
    let killed = shared.kill.cancelled();
    let shutdown = shared.shutdown.cancelled();
    tokio::pin!(killed, shutdown);
    let (mut draining, mut stopped) = (false, false);
    loop {
        if draining && !stopped && running.is_empty() {
            // Nothing of ours runs any more, so stop reading; tarpc then flushes the last
            // responses and ends the stream.
            stop.stop();
            stopped = true;
        }
        tokio::select! {
            _ = &mut killed => return,
            _ = &mut shutdown, if !draining => draining = true,
            Some(()) = running.next(), if !running.is_empty() => {}
            next = requests.next() => match next {
                None => break,
                Some(Err(e)) => {
                    let timed_out = match &e {
                        tarpc::ChannelError::Read(e) => payload_timeout_error(e),
                        _ => None,
                    };
                    match timed_out {
                        Some(err) => tracing::warn!(
                            peer = %info.peer,
                            conn_id = info.conn_id,
                            error = %err,
                            code = err.code(),
                            "closing connection: frame payload not received in time"
                        ),
                        None => {
                            tracing::debug!(conn_id = info.conn_id, error = %e, "connection ended");
                        }
                    }
                    break;
                }
                Some(Ok(req)) => {
                    let request_id = req.get().id;
                    let method = req.get().message.name().to_string();
                    let payload = ledger.take(request_id);
                    let call = Call {
                        handler: handler.clone(),
                        ctx: CallContext { conn: info.clone(), request_id, method },
                        payload,
                        shared: shared.clone(),
                        conn: conn.clone(),
                        _types: PhantomData,
                    };
                    running.push(req.execute(call));
                }
            }
        }
    }
    tracing::debug!(conn_id = info.conn_id, "connection closed");
}
