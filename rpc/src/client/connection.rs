//! One client connection: connect, preamble, a [`Channel`](super::channel::Channel) whose
//! driver task is watched.

use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::channel;
use super::config::PoolConfig;
use super::ServiceClient;
use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::preamble::{self, Hello, PROTOCOL_VERSION};
use crate::transport::Limits;

/// A live (or dead, once its driver ended) connection shared by many calls.
pub(crate) struct Connection<C> {
    pub(crate) id: u64,
    pub(crate) client: C,
    /// When the preamble completed.
    pub(crate) opened: Instant,
    dead: CancellationToken,
}

impl<C: ServiceClient> Connection<C> {
    /// Connects to `endpoint`, runs the preamble and spawns the driver on `handle`. Every
    /// error here means no request was sent.
    pub(crate) async fn open(
        endpoint: &Endpoint,
        cfg: &PoolConfig,
        handle: &Handle,
        id: u64,
    ) -> Result<Arc<Self>, Error> {
        let timeout = cfg.connect_timeout;
        let mut socket = tokio::time::timeout(timeout, endpoint.connect())
            .await
            .map_err(|_| Error::Connect {
                endpoint: endpoint.to_string(),
                reason: format!("no connection within {timeout:?}"),
            })??;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            max_frame: cfg.max_frame,
            service: cfg.service.clone(),
            token: cfg.token.clone(),
        };
        let reply = preamble::client_handshake(&mut socket, &hello, timeout)
            .await
            .map_err(|e| match e {
                Error::Protocol { reason } => Error::Connect {
                    endpoint: endpoint.to_string(),
                    reason,
                },
                other => other,
            })?;
        let limits = Limits {
            recv_max: cfg.max_frame,
            send_max: reply.max_frame,
        };
        let (client, driver) = channel::open::<C::Req, C::Resp>(socket, limits);
        let dead = CancellationToken::new();
        let watch = dead.clone();
        let ep = endpoint.to_string();
        handle.spawn(async move {
            if let Err(e) = driver.await {
                tracing::debug!(endpoint = %ep, conn = id, error = %e, "connection failed");
            }
            watch.cancel();
        });
        tracing::debug!(endpoint = %endpoint, conn = id, "connected");
        Ok(Arc::new(Connection {
            id,
            client: C::from_channel(client),
            opened: crate::clock::now(),
            dead,
        }))
    }
}

impl<C> Connection<C> {
    pub(crate) fn is_alive(&self) -> bool {
        !self.dead.is_cancelled()
    }

    /// Cancelled when the connection's driver has ended. A watcher holds this, not the
    /// connection, so that it never keeps the connection open.
    pub(crate) fn dead(&self) -> CancellationToken {
        self.dead.clone()
    }
}
