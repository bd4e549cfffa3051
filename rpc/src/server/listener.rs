//! Listening sockets: TCP (TCP_NODELAY on every accepted stream) or Unix-domain.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};
use tokio_util::either::Either;

use crate::endpoint::{Endpoint, Socket};
use crate::error::Error;

pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `endpoint`; TCP port 0 picks a free port (see [`Listener::local`]).
    pub(super) async fn bind(endpoint: &Endpoint) -> Result<Listener, Error> {
        let fail = |e: std::io::Error| Error::Bind {
            addr: endpoint.to_string(),
            reason: e.to_string(),
        };
        match endpoint {
            Endpoint::Tcp(addr) => Ok(Listener::Tcp(
                TcpListener::bind(addr.as_str()).await.map_err(fail)?,
            )),
            Endpoint::Unix(path) => {
                let l = UnixListener::bind(path).map_err(fail)?;
                Ok(Listener::Unix(l, path.clone()))
            }
        }
    }

    /// The endpoint actually bound (with the real port).
    pub(super) fn local(&self) -> Result<Endpoint, Error> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(Endpoint::from).map_err(|e| Error::Bind {
                addr: "tcp listener".into(),
                reason: e.to_string(),
            }),
            Listener::Unix(_, p) => Ok(Endpoint::Unix(p.clone())),
        }
    }

    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// Accepts one stream and describes its peer.
    pub(super) async fn accept(&self) -> std::io::Result<(Socket, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Either::Left(s), peer.to_string()))
            }
            Listener::Unix(l, path) => {
                let (s, _) = l.accept().await?;
                let who = s
                    .peer_cred()
                    .ok()
                    .and_then(|c| c.pid())
                    .map_or_else(|| "unknown".to_string(), |pid| format!("pid {pid}"));
                Ok((Either::Right(s), format!("unix:{} ({who})", path.display())))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
