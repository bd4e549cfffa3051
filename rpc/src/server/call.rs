//! One call on the server: admission, metrics, context and span around the service's handler.

use std::marker::PhantomData;
use std::sync::Arc;

use tarpc::server::Serve;
use tarpc::{context, RequestName, ServerError};
use tracing::Instrument;

use super::admission::ConnAdmission;
use super::context::{with_reported, CallContext};
use super::{HandlerFuture, Shared};
use crate::error::Error;
use crate::transport::Payload;

/// A request wrapped with everything the server does around its handler.
pub(super) struct Call<H, Req, Resp> {
    pub(super) handler: H,
    pub(super) ctx: CallContext,
    /// Its size, and the byte permits its frame took before it was read, if any.
    pub(super) payload: Payload,
    pub(super) shared: Arc<Shared>,
    pub(super) conn: Arc<ConnAdmission>,
    pub(super) _types: PhantomData<fn(Req) -> Resp>,
}

impl<H, Req, Resp> Serve for Call<H, Req, Resp>
where
    H: Fn(context::Context, Req) -> HandlerFuture<Resp>,
    Req: RequestName,
{
    type Req = Req;
    type Resp = Resp;

    async fn serve(self, ctx: context::Context, req: Req) -> Result<Resp, ServerError> {
        let Call {
            handler,
            ctx: call,
            payload,
            shared,
            conn,
            ..
        } = self;
        let span = tracing::info_span!(
            "rpc.call",
            method = %call.method,
            request_id = call.request_id,
            conn_id = call.conn.conn_id,
            peer = %call.conn.peer,
        );
        async move {
            let _server_in_flight = shared.track_call();
            // Counted under the service the client asked for (as its pool counts it) and
            // the method's own name: `master.put_start`, not tarpc's `MasterService.put_start`.
            let name = call
                .method
                .rsplit_once('.')
                .map_or(&*call.method, |(_, m)| m);
            let method = format!("{}.{name}", call.conn.service);
            // Dropped unfinished (deadline passed, client cancelled) counts as a timeout.
            let mut record = shared.metrics.record(&method, std::time::Instant::now());
            let mut reported = None;
            let result = async {
                if shared.is_draining() {
                    return Err(Error::ShuttingDown.to_server_error());
                }
                let _permits = shared
                    .admission
                    .admit(&conn, payload, ctx.deadline)
                    .await
                    .map_err(|e| e.to_server_error())?;
                let (answer, code) = with_reported(call.scope(handler(ctx, req))).await;
                reported = code;
                answer
            }
            .await;
            record.outcome = match (&result, reported) {
                (Ok(_), None) => Ok(()),
                (Ok(_), Some(code)) => Err(code),
                (Err(e), _) => Err(Error::from_server_error(e).code()),
            };
            result
        }
        .instrument(span)
        .await
    }
}
