//! Messages: byte payloads sent to a server and handed to its handler, each exactly once — the
//! service under Mooncake's Python `RpcInterface` (`send_data`, `set_data_receive_callback`).
//!
//! A [`MessageServer`] serves one small tarpc service (`"messages"`) on yuebing-rpc; each
//! message travels as an [`Attachment`] (no serde copy) and is answered once its handler took
//! it. Two handler forms:
//! - async: [`MessageServer::start_on`] awaits `handler(message)` on the given runtime;
//! - callback: [`MessageServer::start_with_callback`] runs `callback(message)` on a bridge's
//!   callback pool (never a runtime worker), once per message, and answers the sender with what
//!   it returned once it returned — so a send that succeeded means the callback has run. A
//!   callback that panics answers [`Error::Panicked`]; the server goes on.
//!
//! A [`MessageClient`] sends with pooled connections per target (an rpc [`PoolRegistry`]).
//! `deliver` is not idempotent: a message is sent again only when the rpc layer proves it was
//! not executed (refused, never connected), so none is handed over twice. An error of the
//! receiving side reaches the sender with its code (as [`yuebing_rpc::Error::Remote`]).
//!
//! ```
//! use yuebing_bridge::messages::{MessageClient, MessageClientConfig, MessageServer, MessageServerConfig};
//! use yuebing_bridge::{Bridge, BridgeConfig};
//!
//! let bridge = Bridge::new(BridgeConfig::default())?;
//! let (tx, rx) = std::sync::mpsc::channel();
//! let server = bridge.block_on(MessageServer::start_with_callback(
//!     &bridge,
//!     MessageServerConfig::default(),
//!     move |m| Ok(tx.send(m.data).unwrap()),
//! ))?;
//! let client = MessageClient::new_on(MessageClientConfig::default(), bridge.handle().clone());
//! bridge.block_on(client.send(&server.endpoint().to_string(), b"hi".to_vec()))?;
//! assert_eq!(&rx.try_recv().unwrap()[..], b"hi"); // the callback ran before the answer
//! # Ok::<(), yuebing_bridge::Error>(())
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tarpc::context::Context;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use yuebing_rpc::{
    Attachment, CallOptions, Endpoint, PoolConfig, PoolRegistry, RunningServer, Server,
    ServerConfig, ShutdownReport,
};

use crate::call::{panic_message, NotStarted};
use crate::{Bridge, Canceller, Error, Result};

/// The service's name in the rpc preamble.
pub const SERVICE: &str = "messages";

/// One message, as a server's handler receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The sender's address as the server saw the connection (`ip:port`).
    pub source: String,
    /// The payload.
    pub data: Bytes,
}

/// Why a server did not take a message: an error's code and message, as they cross the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Refusal {
    code: i32,
    message: String,
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

impl From<Refusal> for Error {
    /// The receiver's error, with its code kept.
    fn from(r: Refusal) -> Error {
        yuebing_rpc::Error::Remote {
            code: r.code,
            message: r.message,
        }
        .into()
    }
}

/// Byte messages to a server's handler.
#[tarpc::service]
trait Messages {
    /// Hands `data` to the server's handler; `Ok` once the handler took it.
    async fn deliver(data: Attachment) -> std::result::Result<(), Refusal>;
}

yuebing_rpc::client!(type MessagesRpc = MessagesClient: MessagesRequest => MessagesResponse);

/// A server's handler of messages, boxed.
type Handler = Arc<dyn Fn(Message) -> BoxFuture<'static, Result<()>> + Send + Sync>;

/// The service for one connection: its peer and the server's handler.
#[derive(Clone)]
struct Delivery {
    peer: Arc<str>,
    handler: Handler,
}

impl Messages for Delivery {
    async fn deliver(self, _: Context, data: Attachment) -> std::result::Result<(), Refusal> {
        let message = Message {
            source: self.peer.to_string(),
            data: data.into_bytes(),
        };
        (self.handler)(message).await.map_err(Refusal::from)
    }
}

/// How a [`MessageServer`] listens.
#[derive(Debug, Clone)]
pub struct MessageServerConfig {
    /// Where to listen: `host:port` or `unix:///path`. Default `127.0.0.1:0` (loopback, any
    /// free port: read it from [`MessageServer::endpoint`]).
    pub bind: String,
    /// The rpc server's settings: the largest message (`max_frame`, 64 MiB by default), a
    /// cluster token, connection caps.
    pub rpc: ServerConfig,
}

impl Default for MessageServerConfig {
    fn default() -> Self {
        MessageServerConfig {
            bind: "127.0.0.1:0".into(),
            rpc: ServerConfig::default(),
        }
    }
}

/// A listening server of messages. Dropping it stops it without waiting for the messages
/// being handled (their senders get an error); [`MessageServer::stop`] lets them finish.
pub struct MessageServer {
    running: Mutex<Option<RunningServer>>,
    endpoint: Endpoint,
    local_addr: Option<SocketAddr>,
    /// Cancelled once a stop has finished (or the server is dropped).
    stopped: CancellationToken,
}

impl std::fmt::Debug for MessageServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageServer")
            .field("endpoint", &self.endpoint)
            .field("running", &self.is_running())
            .finish()
    }
}

impl MessageServer {
    /// Binds `config.bind` and serves on `handle`'s runtime: each message is handed to
    /// `handler`, and its sender answered with what the handler's future returns.
    pub async fn start_on<F, Fut>(
        config: MessageServerConfig,
        handle: Handle,
        handler: F,
    ) -> Result<MessageServer>
    where
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |m| Box::pin(handler(m)));
        Self::serve(config, handle, handler).await
    }

    /// Binds `config.bind` and serves on `bridge`'s runtime: `callback` runs once per message
    /// on the bridge's callback pool, and the sender is answered with what it returned once it
    /// returned ([`Error::Panicked`] if it panicked; [`Error::Shutdown`], the callback not run,
    /// if the bridge shut down first).
    pub fn start_with_callback<F>(
        bridge: &Bridge,
        config: MessageServerConfig,
        callback: F,
    ) -> impl Future<Output = Result<MessageServer>> + Send + 'static
    where
        F: Fn(Message) -> Result<()> + Send + Sync + 'static,
    {
        let handle = bridge.handle().clone();
        let handler = on_callback_pool(bridge.clone(), Arc::new(callback));
        Self::serve(config, handle, handler)
    }

    async fn serve(
        config: MessageServerConfig,
        handle: Handle,
        handler: Handler,
    ) -> Result<MessageServer> {
        let bind: Endpoint = config.bind.parse()?;
        let running = Server::new(config.rpc)
            .service(SERVICE, move |conn| {
                yuebing_rpc::handler!(Delivery {
                    peer: conn.peer.as_str().into(),
                    handler: handler.clone(),
                }
                .serve())
            })
            .bind_on(&bind, handle)
            .await?;
        Ok(MessageServer {
            endpoint: running.local_endpoint().clone(),
            local_addr: running.local_addr(),
            running: Mutex::new(Some(running)),
            stopped: CancellationToken::new(),
        })
    }

    /// Where the server listens (with the port it got, for a bind to port 0).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The address a TCP server listens on (`None` for a Unix-domain socket): what senders
    /// pass as `ip:port`.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Whether it still serves (it was not stopped).
    pub fn is_running(&self) -> bool {
        self.lock().is_some()
    }

    /// Stops taking connections and messages, lets the messages being handled finish for up to
    /// `grace` (then cuts them), and returns what it did; `None` if it was stopped already.
    pub async fn stop(&self, grace: Duration) -> Option<ShutdownReport> {
        let running = self.lock().take()?;
        let report = running.shutdown(grace).await;
        self.stopped.cancel();
        Some(report)
    }

    /// Ends once the server has stopped ([`MessageServer::stop`] finished, or it was dropped):
    /// for a caller that serves until someone else stops it.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        self.stopped.clone().cancelled_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<RunningServer>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for MessageServer {
    fn drop(&mut self) {
        self.stopped.cancel();
    }
}

/// The handler that runs `callback` on `bridge`'s callback pool and answers once it returned.
fn on_callback_pool(
    bridge: Bridge,
    callback: Arc<dyn Fn(Message) -> Result<()> + Send + Sync>,
) -> Handler {
    Arc::new(move |message: Message| {
        let (tx, rx) = oneshot::channel();
        let callback = callback.clone();
        let deliver = move |outcome: Result<Message>| {
            let answer = outcome.and_then(|m| {
                catch_unwind(AssertUnwindSafe(|| callback(m))).unwrap_or_else(|panic| {
                    Err(Error::Panicked {
                        message: panic_message(&*panic),
                    })
                })
            });
            // The sender may have given up (its connection closed): nobody to tell.
            let _ = tx.send(answer);
        };
        // The call only carries the message to the pool: its callback runs exactly once, and a
        // shutdown of the bridge waits for it.
        let started = bridge.spawn_then(
            async move { Ok::<_, Error>(message) },
            &Canceller::detached(),
            || Ok::<(), Infallible>(()),
            deliver,
        );
        Box::pin(async move {
            match started {
                Ok(()) => rx.await.unwrap_or(Err(Error::Shutdown)),
                Err(NotStarted::Bridge(e)) => Err(e),
                Err(NotStarted::Ready(never)) => match never {},
            }
        })
    })
}

/// How a [`MessageClient`] connects and sends.
#[derive(Debug, Clone)]
pub struct MessageClientConfig {
    /// The pools' settings (one pool per target): connections per target, the deadline of a
    /// send (`default_timeout`), a cluster token, the largest answer. Its `service` is
    /// [`SERVICE`].
    pub pool: PoolConfig,
    /// How long a target's pool stays without sends before it is closed.
    pub idle_after: Duration,
}

impl Default for MessageClientConfig {
    fn default() -> Self {
        MessageClientConfig {
            pool: PoolConfig::new(SERVICE),
            idle_after: Duration::from_secs(60),
        }
    }
}

/// Sends messages to [`MessageServer`]s, over pooled connections per target. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MessageClient {
    pools: PoolRegistry<MessagesRpc>,
}

impl MessageClient {
    /// A client whose connections and timers run on `handle`'s runtime.
    pub fn new_on(config: MessageClientConfig, handle: Handle) -> MessageClient {
        let pool = PoolConfig {
            service: SERVICE.into(),
            ..config.pool
        };
        MessageClient {
            pools: PoolRegistry::new_on(pool, config.idle_after, handle),
        }
    }

    /// Sends `data` to the server at `target` (`host:port`, `unix:///path`); `Ok` once its
    /// handler took it (the callback form: once the callback returned). The future owns its
    /// inputs, so it can be handed to [`Bridge::call`].
    pub fn send(
        &self,
        target: &str,
        data: impl Into<Bytes>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let target = target.parse::<Endpoint>();
        let pools = self.pools.clone();
        let data = Attachment::new(data);
        async move {
            let pool = pools.get(&target?);
            let answer = pool
                .call_with(CallOptions::method("deliver"), |c, ctx| {
                    let data = data.clone();
                    async move { c.deliver(ctx, data).await }
                })
                .await?;
            answer.map_err(Error::from)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::BridgeConfig;

    fn bridge() -> Bridge {
        Bridge::new(BridgeConfig::default()).expect("bridge")
    }

    fn client(bridge: &Bridge) -> MessageClient {
        MessageClient::new_on(MessageClientConfig::default(), bridge.handle().clone())
    }

    /// A callback server whose callback reports each message and the thread it ran on.
    fn recording(bridge: &Bridge) -> (MessageServer, mpsc::Receiver<(String, Message)>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let server = bridge
            .block_on(MessageServer::start_with_callback(
                bridge,
                MessageServerConfig::default(),
                move |m| {
                    let thread = std::thread::current().name().unwrap_or("").to_string();
                    let _ = tx.lock().unwrap().send((thread, m));
                    Ok(())
                },
            ))
            .expect("server");
        (server, rx)
    }

    #[test]
    fn each_message_reaches_the_callback_once_on_a_callback_thread_before_the_answer() {
        let bridge = bridge();
        let (server, rx) = recording(&bridge);
        let target = server.local_addr().expect("tcp").to_string();
        assert!(target.starts_with("127.0.0.1:"), "{target}");
        let client = client(&bridge);
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        for payload in [b"".to_vec(), b"hello".to_vec(), big] {
            bridge
                .block_on(client.send(&target, payload.clone()))
                .expect("send");
            // Answered only once the callback returned: it is there now, and only once.
            let (thread, m) = rx.try_recv().expect("delivered before the answer");
            assert!(thread.starts_with("yuebing-cb-"), "{thread}");
            assert_eq!(&m.data[..], &payload[..]);
            assert!(m.source.starts_with("127.0.0.1:"), "{}", m.source);
            assert!(rx.try_recv().is_err(), "delivered twice");
        }
    }

    #[test]
    fn concurrent_senders_deliver_every_message_exactly_once() {
        let bridge = bridge();
        let (server, rx) = recording(&bridge);
        let target = server.endpoint().to_string();
        let client = client(&bridge);
        let sends: Vec<_> = (0..64u32)
            .map(|i| bridge.call(client.send(&target, i.to_le_bytes().to_vec())))
            .collect();
        for s in sends {
            s.wait().expect("send");
        }
        let mut got: Vec<u32> = rx
            .try_iter()
            .map(|(_, m)| u32::from_le_bytes(m.data[..].try_into().unwrap()))
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
    }

    #[test]
    fn a_handler_error_reaches_the_sender_with_its_code() {
        let bridge = bridge();
        let server = bridge
            .block_on(MessageServer::start_on(
                MessageServerConfig::default(),
                bridge.handle().clone(),
                |_m| async { Err::<(), _>(Error::Timeout) },
            ))
            .expect("server");
        let err = bridge
            .block_on(client(&bridge).send(&server.endpoint().to_string(), b"x".to_vec()))
            .expect_err("refused");
        assert_eq!(err.code(), Error::Timeout.code());
    }

    #[test]
    fn a_panicking_callback_is_reported_and_the_server_goes_on() {
        let bridge = bridge();
        let server = bridge
            .block_on(MessageServer::start_with_callback(
                &bridge,
                MessageServerConfig::default(),
                |m| {
                    assert!(&m.data[..] != b"boom", "boom");
                    Ok(())
                },
            ))
            .expect("server");
        let (target, client) = (server.endpoint().to_string(), client(&bridge));
        let err = bridge
            .block_on(client.send(&target, b"boom".to_vec()))
            .expect_err("panicked");
        assert_eq!(err.code(), -4008, "{err}");
        bridge
            .block_on(client.send(&target, b"fine".to_vec()))
            .expect("the server goes on");
    }

    #[test]
    fn a_stopped_server_takes_no_messages() {
        let bridge = bridge();
        let (server, rx) = recording(&bridge);
        let (target, client) = (server.endpoint().to_string(), client(&bridge));
        bridge
            .block_on(client.send(&target, b"a".to_vec()))
            .unwrap();
        let stop = Arc::new(server);
        let stopping = stop.clone();
        let report = bridge
            .block_on(async move { Ok::<_, Error>(stopping.stop(Duration::from_secs(5)).await) })
            .unwrap();
        assert!(report.is_some() && !stop.is_running());
        let stopped = stop.stopped();
        bridge
            .block_on(async move {
                stopped.await;
                Ok::<_, Error>(())
            })
            .expect("stopped() ends once stopped");
        assert!(bridge
            .block_on(client.send(&target, b"b".to_vec()))
            .is_err());
        assert_eq!(rx.try_iter().count(), 1);
        let again = stop.clone();
        let second = bridge
            .block_on(async move { Ok::<_, Error>(again.stop(Duration::from_secs(1)).await) })
            .unwrap();
        assert!(second.is_none(), "stopping twice is harmless");
    }

    #[test]
    fn a_bad_target_or_bind_is_a_typed_error() {
        let bridge = bridge();
        let err = bridge
            .block_on(client(&bridge).send("not an address", b"x".to_vec()))
            .expect_err("bad target");
        assert_eq!(err.code(), -2012, "{err}"); // InvalidEndpoint
                                                // A port that is taken: the server's own.
        let (server, _rx) = recording(&bridge);
        let config = MessageServerConfig {
            bind: server.endpoint().to_string(),
            ..MessageServerConfig::default()
        };
        let err = bridge
            .block_on(MessageServer::start_on(
                config,
                bridge.handle().clone(),
                |_m| async { Ok(()) },
            ))
            .expect_err("bad bind");
        assert_eq!(err.code(), -2013, "{err}"); // Bind
    }
}
