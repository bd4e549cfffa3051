//! The `tcp` transport: the portable data plane.
//!
//! Each engine listens on a data port (published in its descriptor's `tcp` section). An
//! initiator keeps several connections per peer; a task is cut into slices (1 MiB by default)
//! spread over them and pipelined (a lone small slice takes the first connection, which then
//! stays warm in the caches); writes leave with `writev` straight from the source memory
//! and the target reads them straight into the registered destination; a write completes only
//! when the target acknowledged that its bytes landed, a read when all bytes arrived. The bytes
//! in flight to one peer are bounded: excess slices wait, and only a full wait queue answers
//! `Overloaded`. A lone small request is marked as such; on a runtime with one worker its
//! waiter, and the target after answering it, poll for a round trip before parking (`spin`).

mod initiator;
mod spin;
mod target;
mod wire;
#[cfg(test)]
mod wire_fuzz;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{try_join_all, BoxFuture};
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio_util::sync::{CancellationToken, DropGuard};
use yuebing_rpc::Token;

use self::initiator::Peer;
use self::target::Target;
use self::wire::RequestHeader;
use super::{Job, Transport};
use crate::error::Error;
use crate::memory::MemoryRegistry;
use crate::request::TransportKind;
use crate::segment::SegmentDescriptor;

/// Size of the buffers that gather small requests and acks into one syscall.
pub(crate) const IO_BUFFER: usize = 256 << 10;

/// After a payload at least this large, the next frame's header is read on its own rather than
/// through the buffer: the next payload is likely large too, and what the buffer takes of it
/// would be copied twice.
pub(crate) const BULK: u64 = 64 << 10;

/// Reads the next frame header into `header`: through the buffer, or, after a [`BULK`] payload
/// (`bulk`) with nothing buffered, on its own straight from the socket.
pub(crate) async fn read_header<R: AsyncRead + Unpin>(
    rd: &mut BufReader<R>,
    header: &mut [u8],
    bulk: bool,
) -> std::io::Result<()> {
    if bulk && rd.buffer().is_empty() {
        rd.get_mut().read_exact(header).await?;
    } else {
        rd.read_exact(header).await?;
    }
    Ok(())
}

/// When a connect to a peer failed, and why.
type LastFailure = Option<(std::time::Instant, Error)>;

/// How long the callers that waited for a failed connect get its error rather than trying
/// again one after another (each for up to the connect timeout).
const FAILURE_SHARED_FOR: Duration = Duration::from_secs(1);

/// Smallest slice a task is cut into for spreading over connections. A socket's copies already
/// run on two cores (the sender's into the socket, the receiver's out of it), so cutting a lone
/// 1 MiB task over several connections only added hand-overs: one slice ran it at 2.7–2.8
/// instead of 1.9–2.0 GB/s here, with 0.48 instead of 0.8 CPU seconds per GB.
const MIN_SLICE: u64 = 1 << 20;

/// Settings of the tcp transport.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Data connections per peer.
    pub connections: usize,
    /// Largest slice of a task on the wire. A task is cut into at most `connections` slices of
    /// at least 1 MiB each, up to this size.
    pub slice_size: u64,
    /// Bytes in flight to one peer at most.
    pub max_in_flight_bytes: u64,
    /// Slices that may wait for in-flight room before `Overloaded`.
    pub queue_len: usize,
    /// Data connections served at once, at most; past it new connections wait in the
    /// kernel's backlog. Default 1024.
    pub max_connections: usize,
    /// Time a new data connection has to complete its hello (magic, version, token); the
    /// engine gives its shm side channel's handshake the same time. Default 5 s.
    pub hello_timeout: Duration,
    /// Time a payload has to move once its header arrived (each way). Default 30 s.
    pub payload_timeout: Duration,
    /// Time to open a peer's connections and have them admitted. Default 3 s.
    pub connect_timeout: Duration,
    /// How long the waiter of a lone small request polls for its answer before it parks, and
    /// how long the target polls for the next request after answering a lone one. In force only
    /// on a runtime with one worker, and for a caller polled by that runtime (see the README).
    /// It spends up to this much CPU per request to save the wake-up of a parked thread; zero
    /// turns it off.
    pub spin: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            connections: 4,
            slice_size: 1 << 20,
            max_in_flight_bytes: 64 << 20,
            queue_len: 4096,
            max_connections: 1024,
            hello_timeout: Duration::from_secs(5),
            payload_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            spin: Duration::from_micros(50),
        }
    }
}

struct Inner {
    config: TcpConfig,
    token: Option<Token>,
    endpoint: String,
    peers: std::sync::Mutex<HashMap<String, Arc<Peer>>>,
    /// One lock per endpoint, held while connecting to it: one connect per peer at a time,
    /// while connects to other peers go on. It keeps the last failure, which callers that
    /// waited for that connect get at once instead of trying again in turn.
    connecting: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<LastFailure>>>>,
    next_req: AtomicU64,
    handle: Handle,
}

/// The tcp transport of one engine: its listener (the serving side) and its peers.
pub struct TcpTransport {
    inner: Arc<Inner>,
    _stop: DropGuard,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("endpoint", &self.inner.endpoint)
            .finish_non_exhaustive()
    }
}

impl TcpTransport {
    /// Listens on `bind` (e.g. `127.0.0.1:0`) and serves `memory` of instance `instance`; every
    /// task is spawned on `handle`. With a `token`, data connections in both directions present
    /// it and accept only peers that present it.
    pub async fn start(
        memory: Arc<MemoryRegistry>,
        instance: u64,
        bind: &str,
        config: TcpConfig,
        token: Option<Token>,
        handle: Handle,
    ) -> Result<TcpTransport, Error> {
        let listener = TcpListener::bind(bind).await.map_err(|e| Error::Io {
            reason: format!("bind tcp data port {bind}: {e}"),
        })?;
        let endpoint = listener
            .local_addr()
            .map_err(|e| Error::Io {
                reason: e.to_string(),
            })?
            .to_string();
        let target = Arc::new(Target {
            memory,
            instance,
            token: token.clone(),
            max_slice: config.slice_size.max(1 << 20).saturating_mul(64),
            max_connections: config.max_connections,
            hello_timeout: config.hello_timeout,
            payload_timeout: config.payload_timeout,
            spin: spin_budget(&config, &handle),
        });
        let stop = CancellationToken::new();
        handle.spawn(target::accept_loop(
            listener,
            target,
            stop.clone(),
            handle.clone(),
        ));
        Ok(TcpTransport {
            inner: Arc::new(Inner {
                config,
                token,
                endpoint,
                peers: std::sync::Mutex::new(HashMap::new()),
                connecting: std::sync::Mutex::new(HashMap::new()),
                next_req: AtomicU64::new(1),
                handle,
            }),
            _stop: stop.drop_guard(),
        })
    }

    /// Where this engine's data port listens.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }
}

/// The spin budget in force on `handle`'s runtime: [`TcpConfig::spin`] on a runtime with one
/// worker, zero otherwise. Polling saves a wake-up only when the polling thread is the one
/// that would be woken, i.e. the one that polls the I/O driver; with several workers the
/// driver is usually held by another, parked worker, so a spin only burned a core (measured
/// here: p99 twice as long, no gain in rate), while with one worker per process it cut a lone
/// 4 KiB write's round trip by a third.
pub(crate) fn spin_budget(config: &TcpConfig, handle: &Handle) -> Duration {
    match handle.metrics().num_workers() {
        1 => config.spin,
        _ => Duration::ZERO,
    }
}

fn endpoint_of(segment: &SegmentDescriptor) -> Option<String> {
    segment
        .transports
        .get("tcp")?
        .get("endpoint")?
        .as_str()
        .map(str::to_string)
}

impl Inner {
    /// The live connections to `endpoint`, opened now if there are none (one connect per
    /// endpoint at a time; a slow or stopped peer delays only the requests for it).
    async fn peer(&self, endpoint: &str) -> Result<Arc<Peer>, Error> {
        if let Some(p) = self.live_peer(endpoint) {
            return Ok(p);
        }
        let lock = self
            .connecting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(endpoint.to_string())
            .or_default()
            .clone();
        let mut last_failure = lock.lock().await;
        if let Some(p) = self.live_peer(endpoint) {
            return Ok(p);
        }
        if let Some((at, e)) = &*last_failure {
            if at.elapsed() < FAILURE_SHARED_FOR {
                return Err(e.clone());
            }
        }
        let token = self.token.as_ref();
        let connected = Peer::connect(endpoint, &self.config, token, &self.handle).await;
        *last_failure = connected
            .as_ref()
            .err()
            .map(|e| (std::time::Instant::now(), e.clone()));
        let p = Arc::new(connected?);
        self.lock_peers().insert(endpoint.to_string(), p.clone());
        Ok(p)
    }

    /// The slice size for a task of `len` bytes to `peer`. When the peer already has enough in
    /// flight to keep every connection busy, whole slices of the configured maximum (fewest
    /// headers and completions); otherwise the task is spread over the connections itself, in
    /// slices of at least [`MIN_SLICE`].
    fn slice_for(&self, peer: &Peer, len: u64) -> u64 {
        let max = self.config.slice_size.max(1);
        let connections = self.config.connections.max(1) as u64;
        if peer.in_flight_bytes() >= max.saturating_mul(connections) {
            return max;
        }
        len.div_ceil(connections).clamp(MIN_SLICE.min(max), max)
    }

    fn lock_peers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Peer>>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live_peer(&self, endpoint: &str) -> Option<Arc<Peer>> {
        self.lock_peers()
            .get(endpoint)
            .filter(|p| p.is_alive())
            .cloned()
    }
}

impl Transport for TcpTransport {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn can_reach(&self, segment: &SegmentDescriptor, _forced: bool) -> bool {
        endpoint_of(segment).is_some()
    }

    fn publish(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "endpoint": self.inner.endpoint }))
    }

    fn forget(&self, segment: &SegmentDescriptor) {
        if let Some(ep) = endpoint_of(segment) {
            self.inner.lock_peers().remove(&ep);
            let mut connecting = self
                .inner
                .connecting
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // A connect under way still holds its lock; the next one makes a new entry.
            connecting.remove(&ep);
        }
    }

    fn transfer(&self, job: Job) -> BoxFuture<'static, Result<(), Error>> {
        let inner = self.inner.clone();
        async move {
            let endpoint = endpoint_of(&job.segment).ok_or_else(|| {
                Error::invalid(format!(
                    "segment {:?} publishes no tcp endpoint",
                    job.segment.name
                ))
            })?;
            let peer = inner.peer(&endpoint).await?;
            let slice = inner.slice_for(&peer, job.len);
            let header = |off: u64| RequestHeader {
                opcode: job.opcode,
                req_id: inner.next_req.fetch_add(1, Ordering::Relaxed),
                instance: job.segment.instance_id,
                addr: job.remote + off,
                len: slice.min(job.len - off),
                lone: false,
            };
            let sent = if job.len <= slice {
                // One slice (every small task): no join over a list of one.
                peer.run(header(0), job.local.clone(), job.can_spin).await
            } else {
                let (peer, job, header) = (&peer, &job, &header);
                let slices = (0..job.len).step_by(slice as usize).map(|off| {
                    let local = job.local.sub(off, slice.min(job.len - off));
                    async move { peer.run(header(off), local?, job.can_spin).await }
                });
                try_join_all(slices).await.map(|_| ())
            };
            sent.map_err(|e| match e {
                Error::StaleSegment { actual, .. } => Error::StaleSegment {
                    segment: job.segment.name.clone(),
                    expected: job.segment.instance_id,
                    actual,
                },
                Error::OutOfBounds { .. } => Error::OutOfBounds {
                    addr: job.remote,
                    len: job.len,
                },
                other => other,
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_is_on_only_where_one_worker_polls_the_io_driver() {
        let config = TcpConfig::default();
        let one = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(spin_budget(&config, one.handle()), config.spin);
        let single = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        assert_eq!(spin_budget(&config, single.handle()), config.spin);
        let two = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        assert_eq!(spin_budget(&config, two.handle()), Duration::ZERO);
    }
}
