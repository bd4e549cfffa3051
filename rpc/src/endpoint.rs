//! Where a server listens and a client connects: TCP or a Unix-domain socket.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_util::either::Either;

use crate::error::Error;
use crate::transport::TryWrite;

/// A connected byte stream: TCP or Unix-domain.
pub(crate) type Socket = Either<TcpStream, UnixStream>;
/// The read half of a split [`Socket`].
pub(crate) type SocketRead = Either<tcp::OwnedReadHalf, unix::OwnedReadHalf>;
/// The write half of a split [`Socket`]; dropping it shuts the write direction down.
pub(crate) type SocketWrite = Either<tcp::OwnedWriteHalf, unix::OwnedWriteHalf>;

/// Splits a socket into halves that two tasks can own (no lock between them).
pub(crate) fn split(socket: Socket) -> (SocketRead, SocketWrite) {
    match socket {
        Either::Left(s) => {
            let (r, w) = s.into_split();
            (Either::Left(r), Either::Left(w))
        }
        Either::Right(s) => {
            let (r, w) = s.into_split();
            (Either::Right(r), Either::Right(w))
        }
    }
}

impl TryWrite for SocketWrite {
    fn try_write_vectored(&self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Either::Left(w) => w.try_write_vectored(bufs),
            Either::Right(w) => w.try_write_vectored(bufs),
        }
    }
}

/// A server address.
///
/// Parsed from `host:port`, `tcp://host:port` or `unix:///path/to.sock`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    /// `host:port`; the host may be a name, resolved at connect time.
    Tcp(String),
    /// A Unix-domain socket path.
    Unix(PathBuf),
}

impl Endpoint {
    /// Opens a stream to this endpoint (TCP_NODELAY set). Errors are [`Error::Connect`].
    pub(crate) async fn connect(&self) -> Result<Socket, Error> {
        let fail = |e: std::io::Error| Error::Connect {
            endpoint: self.to_string(),
            reason: e.to_string(),
        };
        match self {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect(addr.as_str()).await.map_err(fail)?;
                s.set_nodelay(true).map_err(fail)?;
                Ok(Either::Left(s))
            }
            Endpoint::Unix(path) => Ok(Either::Right(
                UnixStream::connect(path).await.map_err(fail)?,
            )),
        }
    }
}

impl Default for Endpoint {
    /// `127.0.0.1:0`: loopback only, any free port.
    fn default() -> Self {
        Endpoint::Tcp("127.0.0.1:0".into())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

impl FromStr for Endpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::InvalidEndpoint {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = s.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(bad("empty socket path"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let addr = s.strip_prefix("tcp://").unwrap_or(s);
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| bad("expected host:port"))?;
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        port.parse::<u16>()
            .map_err(|_| bad("port is not a number 0-65535"))?;
        Ok(Endpoint::Tcp(addr.to_string()))
    }
}

impl From<std::net::SocketAddr> for Endpoint {
    fn from(a: std::net::SocketAddr) -> Self {
        Endpoint::Tcp(a.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            "127.0.0.1:80".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("127.0.0.1:80".into())
        );
        assert_eq!(
            "tcp://localhost:9".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("localhost:9".into())
        );
        assert_eq!(
            "unix:///tmp/a.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/tmp/a.sock".into())
        );
        assert_eq!(
            "[::1]:7".parse::<Endpoint>().unwrap().to_string(),
            "tcp://[::1]:7"
        );
    }

    #[test]
    fn refuses_bad_input() {
        for s in ["", "nohost", ":80", "h:99999", "unix://", "h:x"] {
            let e = s.parse::<Endpoint>().unwrap_err();
            assert_eq!(e.code(), -2012, "{s}");
        }
    }
}
