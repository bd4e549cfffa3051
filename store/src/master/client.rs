//! `MasterClient`: the master's calls over a pooled rpc connection, with store errors. The
//! typed calls themselves come from the one table in `api.rs`.

use std::time::Instant;

use yuebing_rpc::{CallOptions, Endpoint, MetricsSink, Pool, PoolConfig, Token};

use super::ha::bootstrap::SnapshotChunk;
use super::service::{unwire, Health, MasterServiceRpc, SERVICE};
use super::types::ClientId;
use crate::error::Result;

/// A connection pool to one master, speaking for one client id.
#[derive(Clone)]
pub struct MasterClient {
    pub(super) pool: Pool<MasterServiceRpc>,
    pub(super) client: ClientId,
    /// Every call ends by then (else the pool's default timeout applies).
    deadline: Option<Instant>,
}

impl std::fmt::Debug for MasterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterClient")
            .field("endpoint", self.pool.endpoint())
            .field("client", &self.client)
            .finish()
    }
}

impl MasterClient {
    /// A client for the master at `endpoint`, calling as `client`, on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`MasterClient::new_on`] there.
    pub fn new(endpoint: Endpoint, client: ClientId) -> Self {
        Self::new_on(endpoint, client, tokio::runtime::Handle::current())
    }

    /// A client whose connections, timers and tasks live on `handle`'s runtime; its calls may
    /// be awaited from anywhere.
    pub fn new_on(endpoint: Endpoint, client: ClientId, handle: tokio::runtime::Handle) -> Self {
        Self::with_token(endpoint, client, None, handle)
    }

    /// Like [`MasterClient::new_on`], presenting the cluster `token` on every connection.
    pub fn with_token(
        endpoint: Endpoint,
        client: ClientId,
        token: Option<Token>,
        handle: tokio::runtime::Handle,
    ) -> Self {
        Self::configured(endpoint, client, token, MetricsSink::off(), handle)
    }

    /// Like [`MasterClient::with_token`], its calls exported to `metrics`
    /// (`yuebing_rpc_client_*`).
    pub fn configured(
        endpoint: Endpoint,
        client: ClientId,
        token: Option<Token>,
        metrics: MetricsSink,
        handle: tokio::runtime::Handle,
    ) -> Self {
        let config = PoolConfig {
            token,
            metrics,
            ..PoolConfig::new(SERVICE).idempotent(super::api::idempotent_calls())
        };
        MasterClient {
            pool: Pool::new_on(endpoint, config, handle),
            client,
            deadline: None,
        }
    }

    /// This client with every call (tries and retries included) ending by `until`: `Timeout`
    /// after it. The rpc layer enforces it, with no timer of its own per call.
    pub fn until(&self, until: Instant) -> MasterClient {
        MasterClient {
            deadline: Some(until),
            ..self.clone()
        }
    }

    pub(super) fn options(&self, method: &'static str) -> CallOptions {
        let opts = CallOptions::method(method);
        match self.deadline {
            Some(d) => opts.timeout(d.saturating_duration_since(Instant::now())),
            None => opts,
        }
    }

    /// The id this client calls as.
    pub fn client_id(&self) -> ClientId {
        self.client
    }

    /// The master's readiness.
    pub async fn health(&self) -> Result<Health> {
        Ok(self
            .pool
            .call_with(CallOptions::method("health"), |c, ctx| async move {
                c.health(ctx).await
            })
            .await?)
    }

    /// The piece of at most `max_len` bytes from `offset` of the snapshot the master offers
    /// (`seq` 0: whichever it offers now); see [`bootstrap`](super::ha::bootstrap).
    pub async fn snapshot_chunk(
        &self,
        seq: u64,
        offset: u64,
        max_len: u64,
    ) -> Result<SnapshotChunk> {
        let answer = self
            .pool
            .call_with(self.options("snapshot_chunk"), |c, ctx| async move {
                c.snapshot_chunk(ctx, seq, offset, max_len).await
            })
            .await?;
        unwire(answer)
    }

    /// The master's address.
    pub fn endpoint(&self) -> &Endpoint {
        self.pool.endpoint()
    }
}
