//! The echo service every variant of `bench rpc` runs.

use bytes::Bytes;
use tarpc::context::Context;
use yuebing_rpc::Attachment;

/// Echo, with the payload in serde (`echo`) or as an attachment (`echo_att`).
#[tarpc::service]
pub(super) trait BenchEcho {
    /// Returns `x`.
    async fn echo(x: Bytes) -> Bytes;
    /// Returns `x`, carried out of band.
    async fn echo_att(x: Attachment) -> Attachment;
}

/// The echo implementation.
#[derive(Clone, Copy, Debug)]
pub(super) struct EchoImpl;

impl BenchEcho for EchoImpl {
    async fn echo(self, _: Context, x: Bytes) -> Bytes {
        x
    }
    async fn echo_att(self, _: Context, x: Attachment) -> Attachment {
        x
    }
}

yuebing_rpc::client!(pub(super) type BenchEchoRpc = BenchEchoClient: BenchEchoRequest => BenchEchoResponse);
