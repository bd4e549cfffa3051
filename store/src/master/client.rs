//! `MasterClient`: the master's calls over a pooled rpc connection, with store errors.

use std::time::Instant;

use yuebing_rpc::{CallOptions, Endpoint, Pool, PoolConfig, Token};

use super::service::{unwire, Health, MasterServiceRpc, Reply, SERVICE};
use super::types::{
    ClientId, ListedObject, MountId, MountSpec, PingResult, PutConfig, ReplicaDesc, ReplicaList,
    Stats,
};
use crate::error::Result;

/// Calls that may be sent again after a lost connection: reads, pings and ends (a repeated
/// end is `Ok`).
const IDEMPOTENT: [&str; 11] = [
    "get_replica_list",
    "batch_get_replica_list",
    "exist",
    "batch_exist",
    "get_size",
    "list",
    "stats",
    "health",
    "ping",
    "put_end",
    "upsert_end",
];

/// A connection pool to one master, speaking for one client id.
#[derive(Clone)]
pub struct MasterClient {
    pool: Pool<MasterServiceRpc>,
    client: ClientId,
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

/// Calls one method through the pool and turns its answer into a store result.
macro_rules! call {
    ($self:ident, $method:ident ( $($arg:ident),* )) => {{
        let r: Reply<_> = $self
            .pool
            .call_with($self.options(stringify!($method)), |c, ctx| {
                $(let $arg = $arg.clone();)*
                async move { c.$method(ctx, $($arg),*).await }
            })
            .await?;
        unwire(r)
    }};
}

/// Same, for batch methods: the call's own result, then one result per item.
macro_rules! call_each {
    ($self:ident, $method:ident ( $($arg:ident),* )) => {{
        let r: Vec<Reply<_>> = call!($self, $method($($arg),*))?;
        Ok(r.into_iter().map(unwire).collect())
    }};
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
        let config = PoolConfig {
            token,
            ..PoolConfig::new(SERVICE).idempotent(IDEMPOTENT)
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

    fn options(&self, method: &'static str) -> CallOptions {
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

    /// See `Master::mount`.
    pub async fn mount(&self, specs: Vec<MountSpec>) -> Result<Vec<MountId>> {
        let id = self.client.0;
        call!(self, mount(id, specs))
    }

    /// See `Master::remount`.
    pub async fn remount(&self, specs: Vec<MountSpec>) -> Result<Vec<MountId>> {
        let id = self.client.0;
        call!(self, remount(id, specs))
    }

    /// See `Master::unmount`.
    pub async fn unmount(&self, mount: MountId) -> Result<()> {
        let id = self.client.0;
        call!(self, unmount(id, mount))
    }

    /// See `Master::ping`.
    pub async fn ping(&self) -> Result<PingResult> {
        let id = self.client.0;
        call!(self, ping(id))
    }

    /// See `Master::put_start`.
    pub async fn put_start(
        &self,
        key: &str,
        size: u64,
        cfg: &PutConfig,
    ) -> Result<Vec<ReplicaDesc>> {
        let (id, key, cfg) = (self.client.0, key.to_string(), cfg.clone());
        call!(self, put_start(id, key, size, cfg))
    }

    /// See `Master::put_end`.
    pub async fn put_end(&self, key: &str) -> Result<()> {
        let (id, key) = (self.client.0, key.to_string());
        call!(self, put_end(id, key))
    }

    /// See `Master::put_revoke`.
    pub async fn put_revoke(&self, key: &str) -> Result<()> {
        let (id, key) = (self.client.0, key.to_string());
        call!(self, put_revoke(id, key))
    }

    /// See `Master::upsert_start`.
    pub async fn upsert_start(
        &self,
        key: &str,
        size: u64,
        cfg: &PutConfig,
    ) -> Result<Vec<ReplicaDesc>> {
        let (id, key, cfg) = (self.client.0, key.to_string(), cfg.clone());
        call!(self, upsert_start(id, key, size, cfg))
    }

    /// See `Master::upsert_end`.
    pub async fn upsert_end(&self, key: &str) -> Result<()> {
        let (id, key) = (self.client.0, key.to_string());
        call!(self, upsert_end(id, key))
    }

    /// See `Master::upsert_revoke`.
    pub async fn upsert_revoke(&self, key: &str) -> Result<()> {
        let (id, key) = (self.client.0, key.to_string());
        call!(self, upsert_revoke(id, key))
    }

    /// See `Master::batch_put_start`.
    pub async fn batch_put_start(
        &self,
        items: Vec<(String, u64)>,
        cfg: &PutConfig,
    ) -> Result<Vec<Result<Vec<ReplicaDesc>>>> {
        let (id, cfg) = (self.client.0, cfg.clone());
        call_each!(self, batch_put_start(id, items, cfg))
    }

    /// See `Master::batch_put_end`.
    pub async fn batch_put_end(&self, keys: Vec<String>) -> Result<Vec<Result<()>>> {
        let id = self.client.0;
        call_each!(self, batch_put_end(id, keys))
    }

    /// See `Master::batch_put_revoke`.
    pub async fn batch_put_revoke(&self, keys: Vec<String>) -> Result<Vec<Result<()>>> {
        let id = self.client.0;
        call_each!(self, batch_put_revoke(id, keys))
    }

    /// See `Master::batch_upsert_start`.
    pub async fn batch_upsert_start(
        &self,
        items: Vec<(String, u64)>,
        cfg: &PutConfig,
    ) -> Result<Vec<Result<Vec<ReplicaDesc>>>> {
        let (id, cfg) = (self.client.0, cfg.clone());
        call_each!(self, batch_upsert_start(id, items, cfg))
    }

    /// See `Master::batch_upsert_end`.
    pub async fn batch_upsert_end(&self, keys: Vec<String>) -> Result<Vec<Result<()>>> {
        let id = self.client.0;
        call_each!(self, batch_upsert_end(id, keys))
    }

    /// See `Master::batch_upsert_revoke`.
    pub async fn batch_upsert_revoke(&self, keys: Vec<String>) -> Result<Vec<Result<()>>> {
        let id = self.client.0;
        call_each!(self, batch_upsert_revoke(id, keys))
    }

    /// See `Master::get_replica_list`.
    pub async fn get_replica_list(&self, key: &str) -> Result<ReplicaList> {
        let key = key.to_string();
        call!(self, get_replica_list(key))
    }

    /// See `Master::batch_get_replica_list`.
    pub async fn batch_get_replica_list(
        &self,
        keys: Vec<String>,
    ) -> Result<Vec<Result<ReplicaList>>> {
        call_each!(self, batch_get_replica_list(keys))
    }

    /// See `Master::exist`.
    pub async fn exist(&self, key: &str) -> Result<bool> {
        let key = key.to_string();
        call!(self, exist(key))
    }

    /// See `Master::batch_exist`.
    pub async fn batch_exist(&self, keys: Vec<String>) -> Result<Vec<Result<bool>>> {
        call_each!(self, batch_exist(keys))
    }

    /// See `Master::get_size`.
    pub async fn get_size(&self, key: &str) -> Result<u64> {
        let key = key.to_string();
        call!(self, get_size(key))
    }

    /// See `Master::remove`.
    pub async fn remove(&self, key: &str, force: bool) -> Result<()> {
        let key = key.to_string();
        call!(self, remove(key, force))
    }

    /// See `Master::remove_all`.
    pub async fn remove_all(&self, force: bool) -> Result<u64> {
        call!(self, remove_all(force))
    }

    /// See `Master::list`.
    pub async fn list(&self, prefix: &str, limit: u64) -> Result<Vec<ListedObject>> {
        let prefix = prefix.to_string();
        call!(self, list(prefix, limit))
    }

    /// See `Master::stats`.
    pub async fn stats(&self) -> Result<Stats> {
        call!(self, stats())
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
}
