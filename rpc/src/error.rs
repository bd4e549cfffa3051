//! The one error type of yuebing-rpc, its stable codes, and how it crosses the wire.
//!
//! Codes live in the rpc range −2000 … −2999 (see `shared/notes/conventions.md`). On the wire an
//! error travels inside tarpc's [`ServerError`] as `yuebing-rpc:<code>:<a>:<b>:<message>`, never as
//! a serde enum index, so that a peer of another version still reads the number.

use std::io;

use tarpc::client::RpcError;
use tarpc::ServerError;

crate::error_table! {
    wire: WireParts;
    /// Everything that can go wrong in a yuebing-rpc call, connection or server.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The call's deadline passed before a response arrived. The server cancels the handler
        /// when the deadline passes there too. Remedy: give the call a longer deadline, or find
        /// out why the server is slow (its metrics show per-method latency).
        Timeout = -2001, "RpcTimeout", retryable: false,
            "deadline exceeded before a response arrived"
            => wire |_w| Some(Error::Timeout);
        /// A request or response frame is larger than the receiver accepts. The frame was
        /// skipped and the connection kept. Remedy: send large payloads in pieces, or raise
        /// `max_frame` on both sides (the server announces its limit in the preamble reply; a
        /// server's limit is also capped by its `max_in_flight_bytes`, since a larger frame could
        /// never be admitted).
        FrameTooLarge {
            /// Size of the refused frame (body plus attachment), in bytes.
            len: u64,
            /// The receiver's limit, in bytes.
            max: u64,
        } = -2002, "FrameTooLarge", retryable: false,
            "frame of {len} bytes exceeds the limit of {max} bytes"
            => wire |w| Some(Error::FrameTooLarge { len: w.a, max: w.b });
        /// The server is at one of its caps (connections, in-flight requests per connection,
        /// in-flight bytes) and its wait queue is full or the wait ran out. Nothing was executed.
        /// Remedy: retry after a back-off, spread load over more servers, or raise the caps.
        Overloaded {
            /// Which cap was hit.
            reason: String,
        } = -2003, "RpcOverloaded", retryable: true, "server overloaded: {reason}"
            => wire |w| Some(Error::Overloaded { reason: w.message.clone() });
        /// The cluster token was missing or wrong. Remedy: configure the same token on client
        /// and server (`YUEBING_TOKEN`).
        Unauthenticated = -2004, "Unauthenticated", retryable: false,
            "unauthenticated: missing or wrong cluster token"
            => wire |_w| Some(Error::Unauthenticated);
        /// Client and server speak different protocol versions. Remedy: run the same yuebing
        /// version on both sides.
        VersionMismatch {
            /// The version this side speaks.
            ours: u16,
            /// The version the peer speaks.
            theirs: u16,
        } = -2005, "RpcVersionMismatch", retryable: false,
            "protocol version mismatch: we speak {ours}, the peer speaks {theirs}"
            => wire |w| Some(Error::VersionMismatch {
                ours: u16::try_from(w.a).ok()?,
                theirs: u16::try_from(w.b).ok()?,
            });
        /// The server serves no service of that name on this listener. Remedy: check the
        /// endpoint and the service name the client was built for.
        UnknownService {
            /// The requested service name.
            name: String,
        } = -2006, "UnknownService", retryable: false, "unknown service {name:?}"
            => wire |w| Some(Error::UnknownService { name: w.message.clone() });
        /// No connection could be opened to the endpoint (refused, unreachable, preamble timed
        /// out). The request never left this process, so it may go to another endpoint. Remedy:
        /// check that the server runs and listens where the client looks.
        Connect {
            /// The endpoint that could not be reached.
            endpoint: String,
            /// What the operating system or the handshake said.
            reason: String,
        } = -2007, "Connect", retryable: true, "cannot connect to {endpoint}: {reason}";
        /// The connection broke while a call was in flight; the request may or may not have been
        /// executed. Only idempotent calls are resent (retryable holds only for those; the pool
        /// applies that rule itself). Remedy: none needed for idempotent calls; for others,
        /// check with the server whether the effect happened.
        ConnectionLost {
            /// What broke.
            reason: String,
        } = -2008, "ConnectionLost", retryable: true, "connection lost: {reason}";
        /// The server is shutting down and takes no new requests. Remedy: retry on another
        /// server or after it restarts.
        ShuttingDown = -2009, "ShuttingDown", retryable: true, "server is shutting down"
            => wire |_w| Some(Error::ShuttingDown);
        /// The peer sent bytes that are not yuebing-rpc (bad magic, malformed frame or body), or
        /// sent a frame header and did not send the rest of the frame within the server's
        /// `payload_timeout`. The connection was closed. Remedy: check that both sides are
        /// yuebing and the port is right; for a timeout, find out why the peer stalls, or raise
        /// `ServerConfig::payload_timeout` for a slow link.
        Protocol {
            /// What was malformed.
            reason: String,
        } = -2010, "Protocol", retryable: false, "protocol error: {reason}"
            => wire |w| Some(Error::Protocol { reason: w.message.clone() });
        /// The server's handler failed or was aborted with an error that carries no yuebing
        /// code. Remedy: read the message; it comes from the service implementation.
        Server {
            /// The server's description.
            message: String,
        } = -2011, "Server", retryable: false, "server error: {message}"
            => wire |w| Some(Error::Server { message: w.message.clone() });
        /// An endpoint string could not be parsed. Remedy: use `host:port`, `tcp://host:port` or
        /// `unix:///path/to.sock`.
        InvalidEndpoint {
            /// The string that was given.
            input: String,
            /// Why it was refused.
            reason: String,
        } = -2012, "InvalidEndpoint", retryable: false, "invalid endpoint {input:?}: {reason}";
        /// A listener could not be bound. Remedy: pick a free port (0 for any) or another path.
        Bind {
            /// The address or path.
            addr: String,
            /// What the operating system said.
            reason: String,
        } = -2013, "Bind", retryable: false, "cannot bind {addr}: {reason}";
        /// A load balancer was built over an empty list, or every endpoint is failing. Remedy:
        /// give it at least one reachable endpoint.
        NoEndpoint {
            /// Why none could be used.
            reason: String,
        } = -2014, "NoEndpoint", retryable: true, "no endpoint available: {reason}";
        /// A cluster token that cannot be used: empty, too long, holding spaces or control
        /// characters, or a token file that cannot be read. Remedy: use 1 to 1024 visible ASCII
        /// characters (the message never repeats the token).
        InvalidToken {
            /// What is wrong with it.
            reason: String,
        } = -2015, "InvalidToken", retryable: false, "invalid cluster token: {reason}";
    }
    wrapped {
        /// An error code from a peer that this version does not know (or cannot rebuild); its
        /// name is the code's where this version has one. Remedy: upgrade this side.
        #[error("remote error {code}: {message}")]
        Remote {
            /// The numeric code as sent.
            code: i32,
            /// The peer's message.
            message: String,
        } => Error::Remote { code, .. } => *code, code_name(*code), false;
    }
}

/// The parts of an error on the wire besides its code: two numbers and a message.
pub(crate) struct WireParts {
    a: u64,
    b: u64,
    message: String,
}

/// The name of an rpc code ("RpcTimeout"), or "Unknown".
fn code_name(code: i32) -> &'static str {
    Error::own_code_row(code).map_or("Unknown", |row| row.name)
}

/// Result alias for yuebing-rpc.
pub type Result<T, E = Error> = std::result::Result<T, E>;

const WIRE_PREFIX: &str = "yuebing-rpc";

impl Error {
    /// Whether this error proves the request was not executed by any server (it was refused
    /// before its handler ran, or never sent), so that sending it again, even to another
    /// endpoint, cannot execute it twice.
    pub fn never_executed(&self) -> bool {
        matches!(
            self,
            Error::FrameTooLarge { .. }
                | Error::Overloaded { .. }
                | Error::Unauthenticated
                | Error::VersionMismatch { .. }
                | Error::UnknownService { .. }
                | Error::Connect { .. }
                | Error::ShuttingDown
                | Error::InvalidEndpoint { .. }
                | Error::Bind { .. }
                | Error::NoEndpoint { .. }
        )
    }

    /// Encodes this error for the wire as tarpc's [`ServerError`].
    pub fn to_server_error(&self) -> ServerError {
        let (a, b) = match self {
            Error::FrameTooLarge { len, max } => (*len, *max),
            Error::VersionMismatch { ours, theirs } => (u64::from(*ours), u64::from(*theirs)),
            _ => (0, 0),
        };
        let message = match self {
            Error::Overloaded { reason } | Error::Protocol { reason } => reason.clone(),
            Error::UnknownService { name } => name.clone(),
            Error::Server { message } | Error::Remote { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let detail = format!("{WIRE_PREFIX}:{}:{a}:{b}:{message}", self.code());
        ServerError::new(io::ErrorKind::Other, detail)
    }

    /// Decodes an error sent by [`Error::to_server_error`]; any other [`ServerError`] (tarpc's
    /// own, e.g. a handler that panicked) becomes [`Error::Server`].
    pub fn from_server_error(err: &ServerError) -> Error {
        Self::parse_wire(&err.detail).unwrap_or_else(|| Error::Server {
            message: err.detail.clone(),
        })
    }

    fn parse_wire(detail: &str) -> Option<Error> {
        let rest = detail.strip_prefix(WIRE_PREFIX)?.strip_prefix(':')?;
        let mut parts = rest.splitn(4, ':');
        let code: i32 = parts.next()?.parse().ok()?;
        let a: u64 = parts.next()?.parse().ok()?;
        let b: u64 = parts.next()?.parse().ok()?;
        let parts = WireParts {
            a,
            b,
            message: parts.next()?.to_string(),
        };
        match Self::decode_wire(code, &parts) {
            Some(decoded) => decoded,
            None => Some(Error::Remote {
                code,
                message: parts.message,
            }),
        }
    }

    /// Maps a tarpc client error. `Shutdown` and channel errors mean the connection broke while the
    /// request may have been sent; `Send` means it never reached the dispatch (the caller treats it
    /// as never sent).
    pub fn from_rpc_error(err: RpcError) -> Error {
        match err {
            RpcError::DeadlineExceeded => Error::Timeout,
            RpcError::Server(e) => Error::from_server_error(&e),
            RpcError::Shutdown => Error::ConnectionLost {
                reason: "connection closed".into(),
            },
            RpcError::Send(e) => Error::ConnectionLost {
                reason: format!("could not hand the request to the connection: {e}"),
            },
            RpcError::Channel(e) => Error::ConnectionLost {
                reason: format!("{e}: {}", source_chain(&e)),
            },
        }
    }
}

fn source_chain(err: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Error> {
        vec![
            Error::Timeout,
            Error::FrameTooLarge { len: 70, max: 64 },
            Error::Overloaded {
                reason: "in-flight cap: a:b".into(),
            },
            Error::Unauthenticated,
            Error::VersionMismatch { ours: 1, theirs: 9 },
            Error::UnknownService {
                name: "nope".into(),
            },
            Error::ShuttingDown,
            Error::Protocol {
                reason: "bad magic".into(),
            },
            Error::Server {
                message: "boom".into(),
            },
            Error::Remote {
                code: -2999,
                message: "future".into(),
            },
        ]
    }

    #[test]
    fn wire_round_trip_keeps_variant_and_code() {
        for e in all() {
            let back = Error::from_server_error(&e.to_server_error());
            assert_eq!(back, e, "round trip of {e:?}");
            assert_eq!(back.code(), e.code());
        }
    }

    #[test]
    fn codes_are_distinct_and_in_range() {
        let mut seen = std::collections::HashSet::new();
        let locals = [
            Error::Connect {
                endpoint: "x".into(),
                reason: "y".into(),
            },
            Error::ConnectionLost { reason: "z".into() },
            Error::InvalidEndpoint {
                input: "a".into(),
                reason: "b".into(),
            },
            Error::Bind {
                addr: "a".into(),
                reason: "b".into(),
            },
            Error::NoEndpoint { reason: "c".into() },
        ];
        for e in all().into_iter().chain(locals) {
            assert!((-2999..=-2000).contains(&e.code()), "{e:?}");
            if !matches!(e, Error::Remote { .. }) {
                assert!(seen.insert(e.code()), "duplicate code {}", e.code());
            }
        }
    }

    #[test]
    fn foreign_server_error_is_a_server_error() {
        let e = ServerError::new(io::ErrorKind::Other, "handler panicked".into());
        assert_eq!(
            Error::from_server_error(&e),
            Error::Server {
                message: "handler panicked".into()
            }
        );
    }

    #[test]
    fn retryable_set() {
        assert!(Error::Overloaded { reason: "x".into() }.is_retryable());
        assert!(!Error::Timeout.is_retryable());
        assert!(!Error::FrameTooLarge { len: 1, max: 0 }.is_retryable());
        assert!(!Error::Unauthenticated.is_retryable());
    }

    #[test]
    fn the_table_gives_one_code_and_one_name_per_row() {
        crate::ErrorCode::check_table(Error::CODES, -2999..=-2000).unwrap();
        assert_eq!(
            (Error::Timeout.code(), Error::Timeout.name()),
            (-2001, "RpcTimeout")
        );
        let overloaded = Error::Overloaded { reason: "x".into() };
        assert_eq!(
            Error::own_code_row(-2003).map(|r| r.name),
            Some(overloaded.name())
        );
        let remote = |code| Error::Remote {
            code,
            message: String::new(),
        };
        assert_eq!(
            (remote(-2007).name(), remote(-2007).code()),
            ("Connect", -2007)
        );
        assert_eq!(remote(-2999).name(), "Unknown");
        assert!(
            !remote(-2007).is_retryable(),
            "a code not rebuilt is not retried"
        );
    }
}
