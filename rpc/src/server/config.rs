//! Server settings and their defaults, in one place.

use std::time::Duration;

/// Largest frame (body plus attachment) accepted by default: 64 MiB.
pub const DEFAULT_MAX_FRAME: u64 = 64 << 20;

/// How a [`Server`](crate::Server) behaves. `ServerConfig::default()` is ready for one box.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest frame accepted; larger requests get [`FrameTooLarge`](crate::Error::FrameTooLarge).
    /// Where `max_in_flight_bytes` is smaller (but at least 64 KiB) the smaller value is the
    /// limit, since a larger frame could never be admitted; the preamble announces the limit.
    pub max_frame: u64,
    /// Cluster token clients must present; `None` accepts any client.
    pub token: Option<crate::Token>,
    /// Most connections open at once; more are refused at the preamble with `Overloaded`.
    pub max_connections: usize,
    /// Most requests executing at once on one connection.
    pub max_in_flight_per_connection: usize,
    /// Most request bytes (body plus attachment) buffered or executing at once, over all
    /// connections. A frame over 64 KiB takes its share before it is read: until the share is
    /// free its connection is not read further (TCP pushes back on the peer), without a time
    /// limit; once it has its share, the rest of the frame must arrive within
    /// `payload_timeout`. Smaller requests take theirs after they are read, in the bounded wait
    /// queue.
    pub max_in_flight_bytes: u64,
    /// Most requests waiting at one cap; past it, requests get `Overloaded` at once.
    pub queue_len: usize,
    /// Longest a request waits at a cap before it gets `Overloaded` (never past its deadline).
    pub queue_timeout: Duration,
    /// Longest a new connection may take to send its preamble.
    pub preamble_timeout: Duration,
    /// Longest the rest of a frame (body plus attachment) may take to arrive once its header has
    /// been read. The clock starts at the header, or, for a frame that waits for its share of
    /// `max_in_flight_bytes`, when the share is granted: the wait is the server's, not the
    /// peer's. Bytes may trickle in at any pace as long as the whole frame is in by then.
    /// Otherwise the server closes the connection (logged with the peer and an
    /// [`Error::Protocol`](crate::Error::Protocol)) and releases the frame's buffer and byte
    /// permits, so a peer that stalls mid-frame cannot hold them. An idle connection between
    /// frames has no limit. A value too large to add to the current time (`Duration::MAX`)
    /// disables the limit.
    pub payload_timeout: Duration,
    /// Where the calls' statistics are exported (`yuebing_rpc_server_*`); off by default.
    pub metrics: crate::MetricsSink,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame: DEFAULT_MAX_FRAME,
            token: None,
            max_connections: 1024,
            max_in_flight_per_connection: 1024,
            max_in_flight_bytes: 1 << 30,
            queue_len: 4096,
            queue_timeout: Duration::from_secs(1),
            preamble_timeout: Duration::from_secs(5),
            payload_timeout: Duration::from_secs(30),
            metrics: crate::MetricsSink::off(),
        }
    }
}
