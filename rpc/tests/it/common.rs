//! A test service ("lab") and helpers to run it.
#![allow(unreachable_pub)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tarpc::context::Context;
use yuebing_rpc::{
    handler, Attachment, CallContext, Endpoint, Pool, PoolConfig, RunningServer, Server,
    ServerConfig,
};

#[tarpc::service]
pub trait Lab {
    /// Returns its argument.
    async fn echo(x: Bytes) -> Bytes;
    /// Returns its attachment.
    async fn echo_att(x: Attachment) -> Attachment;
    /// Returns `n` bytes.
    async fn make(n: u64) -> Bytes;
    /// Counts the call, then sleeps `ms`; returns the count.
    async fn bump_and_sleep(ms: u64) -> u64;
    /// Sleeps `ms`, noting whether it was cancelled before finishing.
    async fn sleep(ms: u64) -> u64;
    /// What the server knows about this call.
    async fn whoami() -> (String, u64, u64, String);
    /// Waits until `n` calls of `gather` have arrived at this server (all of them in flight at
    /// once); returns the server's id of the connection this one came on.
    async fn gather(n: u64) -> u64;
}

/// State a test can inspect, shared by every connection of a server (and across restarts).
#[derive(Default)]
pub struct LabState {
    pub bumps: AtomicU64,
    pub sleeps_started: AtomicU64,
    pub sleeps_cancelled: AtomicU64,
    pub sleeps_finished: AtomicU64,
    /// `gather` calls arrived so far.
    pub gathered: tokio::sync::watch::Sender<u64>,
}

#[derive(Clone)]
pub struct LabServer(pub Arc<LabState>);

struct CancelWatch<'a>(&'a LabState, AtomicBool);

impl Drop for CancelWatch<'_> {
    fn drop(&mut self) {
        if !self.1.load(Ordering::SeqCst) {
            self.0.sleeps_cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Lab for LabServer {
    async fn echo(self, _: Context, x: Bytes) -> Bytes {
        x
    }
    async fn echo_att(self, _: Context, x: Attachment) -> Attachment {
        x
    }
    async fn make(self, _: Context, n: u64) -> Bytes {
        Bytes::from(vec![7u8; n as usize])
    }
    async fn bump_and_sleep(self, _: Context, ms: u64) -> u64 {
        let n = self.0.bumps.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        n
    }
    async fn sleep(self, _: Context, ms: u64) -> u64 {
        self.0.sleeps_started.fetch_add(1, Ordering::SeqCst);
        let watch = CancelWatch(&self.0, AtomicBool::new(false));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        watch.1.store(true, Ordering::SeqCst);
        self.0.sleeps_finished.fetch_add(1, Ordering::SeqCst);
        ms
    }
    async fn whoami(self, _: Context) -> (String, u64, u64, String) {
        let c = CallContext::current().expect("inside a call");
        (c.conn.peer.clone(), c.conn.conn_id, c.request_id, c.method)
    }
    async fn gather(self, _: Context, n: u64) -> u64 {
        let conn = CallContext::current().expect("inside a call").conn.conn_id;
        let mut arrived = self.0.gathered.subscribe();
        self.0.gathered.send_modify(|g| *g += 1);
        // The sender lives in the state this handler holds, so the wait ends only at `n` (or
        // when the client's deadline cancels the call).
        let _ = arrived.wait_for(|&g| g >= n).await;
        conn
    }
}

yuebing_rpc::client!(pub type LabRpc = LabClient: LabRequest => LabResponse);

pub fn localhost() -> Endpoint {
    "127.0.0.1:0".parse().unwrap()
}

/// Starts the lab service on `endpoint` with `config`.
pub async fn start(
    endpoint: &Endpoint,
    config: ServerConfig,
    state: Arc<LabState>,
) -> RunningServer {
    Server::new(config)
        .service("lab", move |_| handler!(LabServer(state.clone()).serve()))
        .bind(endpoint)
        .await
        .expect("bind")
}

/// Starts the lab service on an ephemeral port with default settings.
pub async fn start_default() -> (RunningServer, Arc<LabState>) {
    let state = Arc::new(LabState::default());
    (
        start(&localhost(), ServerConfig::default(), state.clone()).await,
        state,
    )
}

pub fn pool(server: &RunningServer) -> Pool<LabRpc> {
    Pool::new(server.local_endpoint().clone(), PoolConfig::new("lab"))
}
