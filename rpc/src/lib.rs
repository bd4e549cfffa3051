//! yuebing-rpc: the control plane of yuebing, in the manner of yalantinglibs' coro_rpc and
//! coro_io.
//!
//! tarpc services run on yuebing's own framing transport. This crate adds what tarpc alone lacks:
//! a connection preamble that selects one of several services on a listener and checks version
//! and token; per-request frame limits with a typed [`Error::FrameTooLarge`]; raw-bytes
//! [`Attachment`]s outside serde; server caps with a bounded wait queue and a retryable
//! [`Error::Overloaded`], and byte permits a large frame takes before it is read (its connection
//! waits, and TCP pushes back on the peer); a deadline for the rest of each frame once its header
//! arrived, so a peer that stalls mid-frame is closed and holds no permits or buffer for long
//! ([`ServerConfig::payload_timeout`]); graceful shutdown; client [`Pool`]s that share live
//! connections, replace dead ones and pick the least-loaded; a [`PoolRegistry`] keyed by
//! endpoint; a [`Balancer`] over several endpoints; deadlines and retries of idempotent calls;
//! [`Metrics`].
//!
//! # Layout
//! - [`error`]: the [`Error`] enum, codes −2000 … −2999, wire encoding.
//! - `error_table`: the [`error_table!`] macro every crate declares its errors with, one row
//!   per code, and the table's row, [`ErrorCode`].
//! - `frame`: the fixed frame header (pure).
//! - `preamble`: the connection preamble and its reply.
//! - [`attachment`]: out-of-band payloads.
//! - `transport`: the framing's read and write halves, body decoding, the `Stream + Sink` the
//!   server runs on, the byte budget the server's reader draws on for large frames, and its
//!   payload deadline.
//! - [`endpoint`]: TCP and Unix-domain addresses.
//! - [`server`]: listener, connections, admission caps, per-call context, shutdown.
//! - `client`: the client [`Channel`] (a tarpc stub) and its driver, connections, [`Pool`] and
//!   its members (which connection a call takes, and when it opens another), [`PoolRegistry`],
//!   [`Balancer`], [`CallOptions`].
//! - [`metrics`]: per-method counters and latency histograms, exported to a sink.
//! - [`sink`]: [`MetricsSink`], the `metrics` recorder (or none) components register on.
//! - [`size`]: byte sizes as people write them (`64MiB`, `2G`): [`Size`], parsed the same way
//!   everywhere.
//! - `token`: the cluster [`Token`] (never printed, compared in constant time).
//! - `clock`: the time deadlines and back-offs read (tokio's clock, so tests can pause it).
//! - `entered`: polling a call inside its pool's runtime, whoever polls it ([`in_runtime`],
//!   whose future [`InRuntime`] holds the call once).
//! - `decode_fuzz` (tests only): proptest fuzzing of every decoder of peer input, with
//!   yuebing-testkit's mutations and its counting allocator (installed in the unit-test binary),
//!   which bounds what each may allocate.
//!
//! # Example
//! ```
//! use yuebing_rpc::{handler, CallOptions, Endpoint, Pool, PoolConfig, Server, ServerConfig};
//!
//! #[tarpc::service]
//! pub trait Echo {
//!     async fn echo(x: String) -> String;
//! }
//! #[derive(Clone)]
//! struct EchoServer;
//! impl Echo for EchoServer {
//!     async fn echo(self, _: tarpc::context::Context, x: String) -> String { x }
//! }
//! yuebing_rpc::client!(type EchoRpc = EchoClient: EchoRequest => EchoResponse);
//!
//! # #[tokio::main] async fn main() -> yuebing_rpc::Result<()> {
//! let server = Server::new(ServerConfig::default())
//!     .service("echo", |_conn| handler!(EchoServer.serve()))
//!     .bind(&"127.0.0.1:0".parse()?)
//!     .await?;
//! let pool: Pool<EchoRpc> = Pool::new(server.local_endpoint().clone(), PoolConfig::new("echo"));
//! let out = pool
//!     .call_with(CallOptions::method("echo"), |c, ctx| async move { c.echo(ctx, "hi".into()).await })
//!     .await?;
//! assert_eq!(out, "hi");
//! # Ok(()) }
//! ```

pub mod attachment;
mod client;
mod clock;
#[cfg(test)]
mod decode_fuzz;
pub mod endpoint;
mod entered;
pub use clock::{after as deadline_after, FARTHEST as FARTHEST_DEADLINE};
pub use entered::{in_runtime, InRuntime};
pub mod error;
mod error_table;
mod frame;
pub mod metrics;
mod preamble;
pub mod server;
pub mod sink;
pub mod size;
mod token;
mod transport;

#[cfg(test)]
yuebing_testkit::install_counting_allocator!();

pub use self::metrics::{MethodMetrics, Metrics, Side, LATENCY_BUCKETS_US};
pub use attachment::Attachment;
pub use client::{
    Balancer, CallOptions, Channel, Pool, PoolConfig, PoolRegistry, PoolStatus, ServiceClient,
    Strategy,
};
pub use endpoint::Endpoint;
pub use error::{Error, Result};
pub use error_table::ErrorCode;
pub use preamble::PROTOCOL_VERSION;
pub use server::{
    report_error, CallContext, ConnInfo, HandlerFuture, RunningServer, Server, ServerConfig,
    ShutdownReport,
};
pub use sink::{label, MetricKind, MetricsSink};
pub use size::{Size, SizeError};
pub use token::{Token, MAX_TOKEN_LEN};
