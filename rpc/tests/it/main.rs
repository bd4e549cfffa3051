//! Integration tests of yuebing-rpc on real sockets (127.0.0.1, ephemeral ports).

mod common;

mod balance;
mod caps;
mod channel;
mod deadline;
mod frames;
mod lifecycle;
mod payload_timeout;
mod permits;
mod permits_rss;
mod pool;
mod preamble;
mod raw;
mod restart;
mod retry;
mod shutdown;
mod stale;
