//! Several master addresses, tried in order: failover, not load balancing.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use yuebing_rpc::{Endpoint, Token};

use crate::error::{Error, Result};
use crate::master::{ClientId, MasterClient};

/// The masters a client knows, and which one answered last.
#[derive(Debug)]
pub(crate) struct Masters {
    clients: Vec<MasterClient>,
    current: AtomicUsize,
}

impl Masters {
    pub(crate) fn new(
        endpoints: &[Endpoint],
        id: ClientId,
        token: Option<&Token>,
        handle: &tokio::runtime::Handle,
    ) -> Result<Masters> {
        if endpoints.is_empty() {
            return Err(Error::params("no master address"));
        }
        Ok(Masters {
            clients: endpoints
                .iter()
                .map(|e| MasterClient::with_token(e.clone(), id, token.cloned(), handle.clone()))
                .collect(),
            current: AtomicUsize::new(0),
        })
    }

    /// Runs `f` on the current master; if the call certainly did not run there (the master is
    /// unreachable, refusing, shutting down, or not the leader), on the next one, and so on
    /// once around.
    pub(crate) async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(MasterClient) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let n = self.clients.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            match f(self.clients[at].clone()).await {
                Err(Error::Rpc(e)) if e.never_executed() => {
                    tracing::debug!(master = at, error = %e, "master unreachable, trying the next");
                    last = Some(Error::Rpc(e));
                }
                Err(e @ Error::NotLeader { .. }) => {
                    // Refused before it touched the master's state: safe to send elsewhere.
                    tracing::debug!(master = at, error = %e, "not the leader, trying the next");
                    last = Some(e);
                }
                other => {
                    if at != first {
                        self.current.store(at, Ordering::Relaxed);
                        tracing::info!(master = at, "failed over to another master");
                    }
                    return other;
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::params("no master address")))
    }
}
