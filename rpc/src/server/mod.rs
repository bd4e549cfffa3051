//! The server: several tarpc services on one listener, with caps and graceful shutdown.
//!
//! ```no_run
//! # use yuebing_rpc::{Server, ServerConfig, Endpoint};
//! # #[tarpc::service] trait Echo { async fn echo(x: String) -> String; }
//! # #[derive(Clone)] struct EchoServer;
//! # impl Echo for EchoServer {
//! #     async fn echo(self, _: tarpc::context::Context, x: String) -> String { x }
//! # }
//! # async fn run() -> yuebing_rpc::Result<()> {
//! let server = Server::new(ServerConfig::default())
//!     .service("echo", |_conn| yuebing_rpc::handler!(EchoServer.serve()))
//!     .bind(&"127.0.0.1:0".parse()?)
//!     .await?;
//! println!("listening on {}", server.local_endpoint());
//! let report = server.shutdown(std::time::Duration::from_secs(5)).await;
//! assert_eq!(report.cut, 0);
//! # Ok(()) }
//! ```

mod admission;
mod call;
mod config;
mod connection;
mod context;
mod listener;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::{context as tarpc_context, RequestName, ServerError};
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{ServerConfig, DEFAULT_MAX_FRAME};
pub use context::{report_error, CallContext, ConnInfo};

use self::admission::Admission;
use self::connection::ConnSetup;
use self::listener::Listener;
use crate::endpoint::{Endpoint, Socket};
use crate::error::Error;
use crate::metrics::Metrics;

/// The boxed future a handler returns (see [`handler!`](crate::handler)).
pub type HandlerFuture<Resp> = BoxFuture<'static, Result<Resp, ServerError>>;

type ConnRunner = Arc<dyn Fn(Socket, ConnSetup) -> BoxFuture<'static, ()> + Send + Sync>;

/// Turns a tarpc `Serve` value (what `MyServer.serve()` returns) into a handler closure whose
/// futures are boxed and `Send`. tarpc's `Serve::serve` is an `async fn` in a trait, whose future
/// cannot be required to be `Send` in generic code on stable Rust; this macro boxes it where the
/// concrete type is known.
#[macro_export]
macro_rules! handler {
    ($serve:expr) => {{
        let serve = $serve;
        move |ctx: ::tarpc::context::Context, req| -> $crate::HandlerFuture<_> {
            let serve = ::core::clone::Clone::clone(&serve);
            ::std::boxed::Box::pin(::tarpc::server::Serve::serve(serve, ctx, req))
        }
    }};
}

/// State shared by the accept loop, the connections and the calls of one running server.
pub(crate) struct Shared {
    config: ServerConfig,
    services: HashMap<String, ConnRunner>,
    admission: Admission,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    /// Set with `shutdown`; read per request (an atomic load, not the token's lock).
    draining: AtomicBool,
    kill: CancellationToken,
    tracker: TaskTracker,
    handle: Handle,
    connections: Arc<Semaphore>,
    next_conn: AtomicU64,
    in_flight: Arc<AtomicUsize>,
}

impl Shared {
    fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    fn track_call(&self) -> CallGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        CallGuard(self.in_flight.clone())
    }
}

struct CallGuard(Arc<AtomicUsize>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A server being configured: add services, then [`bind`](Server::bind).
pub struct Server {
    config: ServerConfig,
    services: HashMap<String, ConnRunner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.services.keys().collect();
        names.sort();
        f.debug_struct("Server")
            .field("config", &self.config)
            .field("services", &names)
            .finish()
    }
}

impl Server {
    /// A server with no services yet.
    pub fn new(config: ServerConfig) -> Self {
        Server {
            config,
            services: HashMap::new(),
        }
    }

    /// Adds the service `name`. `factory` runs once per accepted connection and returns the
    /// handler for that connection's calls — usually `handler!(MyServer { .. }.serve())`.
    pub fn service<Req, Resp, F, H>(mut self, name: &str, factory: F) -> Self
    where
        Req: DeserializeOwned + RequestName + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(&ConnInfo) -> H + Send + Sync + 'static,
        H: Fn(tarpc_context::Context, Req) -> HandlerFuture<Resp> + Clone + Send + Sync + 'static,
    {
        let runner: ConnRunner = Arc::new(move |socket, setup: ConnSetup| {
            let handler = factory(&setup.info);
            Box::pin(connection::serve_connection(socket, setup, handler))
        });
        self.services.insert(name.to_string(), runner);
        self
    }

    /// Binds `endpoint` (e.g. [`Endpoint::default`], `127.0.0.1:0`) and starts serving on the
    /// current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`Server::bind_on`] with a handle there.
    pub async fn bind(self, endpoint: &Endpoint) -> Result<RunningServer, Error> {
        self.bind_on(endpoint, Handle::current()).await
    }

    /// Binds `endpoint` and starts serving; every task is spawned on `handle`.
    pub async fn bind_on(
        self,
        endpoint: &Endpoint,
        handle: Handle,
    ) -> Result<RunningServer, Error> {
        let listener = Listener::bind(endpoint).await?;
        let local = listener.local()?;
        let local_addr = listener.local_addr();
        let metrics = Metrics::exported(
            self.config.metrics.clone(),
            crate::metrics::Side::Server,
            "",
        );
        let shared = Arc::new(Shared {
            admission: Admission::new(&self.config),
            connections: Arc::new(Semaphore::new(self.config.max_connections)),
            config: self.config,
            services: self.services,
            metrics: Arc::new(metrics),
            shutdown: CancellationToken::new(),
            draining: AtomicBool::new(false),
            kill: CancellationToken::new(),
            tracker: TaskTracker::new(),
            handle: handle.clone(),
            next_conn: AtomicU64::new(0),
            in_flight: Arc::new(AtomicUsize::new(0)),
        });
        let accept = handle.spawn(accept_loop(shared.clone(), listener));
        tracing::info!(endpoint = %local, "rpc server listening");
        Ok(RunningServer {
            shared,
            local,
            local_addr,
            accept: Some(accept),
        })
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: Listener) {
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            _ = shared.kill.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let permit = shared.connections.clone().try_acquire_owned().ok();
                    let task = connection::handle_socket(shared.clone(), socket, peer, permit);
                    shared.tracker.spawn_on(task, &shared.handle);
                }
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: back off briefly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
    // Dropping the listener here makes new connections fail with "connection refused".
}

/// What [`RunningServer::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Calls executing when shutdown began.
    pub in_flight_at_start: usize,
    /// Calls still executing when the grace period ran out; they were aborted.
    pub cut: usize,
}

/// A server that is listening. Dropping it kills it (like [`RunningServer::kill`], without
/// waiting); use [`RunningServer::shutdown`] to stop gracefully.
pub struct RunningServer {
    shared: Arc<Shared>,
    local: Endpoint,
    local_addr: Option<SocketAddr>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl RunningServer {
    /// Where the server listens (with the real port when bound to port 0).
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.local
    }

    /// The TCP address bound, if this is a TCP server.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Per-method statistics of every service on this server.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The same statistics, shared, for a reader that outlives this borrow (an exporter).
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// Calls executing now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Bytes charged against [`ServerConfig::max_in_flight_bytes`] now: large frames being
    /// received, and requests admitted or executing.
    pub fn in_flight_bytes(&self) -> u64 {
        self.shared.admission.bytes_taken()
    }

    /// Connections not being read because their next frame waits for byte permits (their peers'
    /// sends back up in TCP meanwhile).
    pub fn reads_waiting_for_bytes(&self) -> usize {
        self.shared.admission.reads_waiting()
    }

    /// Stops accepting (new connections are refused), answers new requests on open connections
    /// with [`Error::ShuttingDown`], lets the calls in flight finish for up to `grace`, aborts the
    /// rest and closes every connection.
    pub async fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        let in_flight_at_start = self.in_flight();
        self.shared.draining.store(true, Ordering::Release);
        self.shared.shutdown.cancel();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        self.shared.tracker.close();
        let cut = match tokio::time::timeout(grace, self.shared.tracker.wait()).await {
            Ok(()) => 0,
            Err(_) => {
                let cut = self.in_flight();
                self.shared.kill.cancel();
                self.shared.tracker.wait().await;
                cut
            }
        };
        tracing::info!(endpoint = %self.local, in_flight_at_start, cut, "rpc server stopped");
        ShutdownReport {
            in_flight_at_start,
            cut,
        }
    }

    /// Stops at once, like a crash: the listener and every connection close and handlers are
    /// aborted. Returns when all of its tasks have ended.
    pub async fn kill(mut self) {
        self.shared.kill.cancel();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shared.kill.cancel();
    }
}
