//! `MasterService`: the master core over yuebing-rpc. Each call is decoded, run on the core
//! under its one lock, and answered once its log entries are durable.

use std::sync::Arc;

use tarpc::context::Context;

use super::server::Shared;
use super::types::{
    ClientId, ListedObject, MountId, MountSpec, PingResult, PutConfig, ReplicaDesc, ReplicaList,
    Stats,
};
use crate::error::{Error, WireError};

/// The service name in the rpc preamble.
pub const SERVICE: &str = "master";

/// An answer: the value, or the error with its stable code.
pub type Reply<T> = Result<T, WireError>;

/// Readiness and position of a running master.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// Restored, bound and accepting calls.
    pub ready: bool,
    /// Whether mutations are made durable in a data directory.
    pub persistent: bool,
    /// Sequence number of the last mutation.
    pub last_seq: u64,
    /// Sequence number of the last durable mutation (equal to `last_seq` without a data dir).
    pub durable_seq: u64,
    /// Why the operation log stopped, if it did (mutations are refused then).
    pub failure: Option<String>,
}

/// The master's calls. Client ids are `u128` (see [`ClientId`]).
#[tarpc::service]
pub trait MasterService {
    /// See `Master::mount`.
    async fn mount(client: u128, specs: Vec<MountSpec>) -> Reply<Vec<MountId>>;
    /// See `Master::remount`.
    async fn remount(client: u128, specs: Vec<MountSpec>) -> Reply<Vec<MountId>>;
    /// See `Master::unmount`.
    async fn unmount(client: u128, mount: MountId) -> Reply<()>;
    /// See `Master::ping`.
    async fn ping(client: u128) -> Reply<PingResult>;
    /// See `Master::put_start`.
    async fn put_start(
        client: u128,
        key: String,
        size: u64,
        cfg: PutConfig,
    ) -> Reply<Vec<ReplicaDesc>>;
    /// See `Master::put_end`.
    async fn put_end(client: u128, key: String) -> Reply<()>;
    /// See `Master::put_revoke`.
    async fn put_revoke(client: u128, key: String) -> Reply<()>;
    /// See `Master::upsert_start`.
    async fn upsert_start(
        client: u128,
        key: String,
        size: u64,
        cfg: PutConfig,
    ) -> Reply<Vec<ReplicaDesc>>;
    /// See `Master::upsert_end`.
    async fn upsert_end(client: u128, key: String) -> Reply<()>;
    /// See `Master::upsert_revoke`.
    async fn upsert_revoke(client: u128, key: String) -> Reply<()>;
    /// See `Master::batch_put_start`.
    async fn batch_put_start(
        client: u128,
        items: Vec<(String, u64)>,
        cfg: PutConfig,
    ) -> Reply<Vec<Reply<Vec<ReplicaDesc>>>>;
    /// See `Master::batch_put_end`.
    async fn batch_put_end(client: u128, keys: Vec<String>) -> Reply<Vec<Reply<()>>>;
    /// See `Master::batch_put_revoke`.
    async fn batch_put_revoke(client: u128, keys: Vec<String>) -> Reply<Vec<Reply<()>>>;
    /// See `Master::batch_upsert_start`.
    async fn batch_upsert_start(
        client: u128,
        items: Vec<(String, u64)>,
        cfg: PutConfig,
    ) -> Reply<Vec<Reply<Vec<ReplicaDesc>>>>;
    /// See `Master::batch_upsert_end`.
    async fn batch_upsert_end(client: u128, keys: Vec<String>) -> Reply<Vec<Reply<()>>>;
    /// See `Master::batch_upsert_revoke`.
    async fn batch_upsert_revoke(client: u128, keys: Vec<String>) -> Reply<Vec<Reply<()>>>;
    /// See `Master::get_replica_list`.
    async fn get_replica_list(key: String) -> Reply<ReplicaList>;
    /// See `Master::batch_get_replica_list`.
    async fn batch_get_replica_list(keys: Vec<String>) -> Reply<Vec<Reply<ReplicaList>>>;
    /// See `Master::exist`.
    async fn exist(key: String) -> Reply<bool>;
    /// See `Master::batch_exist`.
    async fn batch_exist(keys: Vec<String>) -> Reply<Vec<Reply<bool>>>;
    /// See `Master::get_size`.
    async fn get_size(key: String) -> Reply<u64>;
    /// See `Master::remove`.
    async fn remove(key: String, force: bool) -> Reply<()>;
    /// See `Master::remove_all`.
    async fn remove_all(force: bool) -> Reply<u64>;
    /// See `Master::list`.
    async fn list(prefix: String, limit: u64) -> Reply<Vec<ListedObject>>;
    /// See `Master::stats`.
    async fn stats() -> Reply<Stats>;
    /// Readiness check.
    async fn health() -> Health;
}

yuebing_rpc::client!(
    /// The master client as the rpc pools make it.
    pub type MasterServiceRpc = MasterServiceClient: MasterServiceRequest => MasterServiceResponse);

/// The server side: a handle on the shared core.
#[derive(Clone)]
pub(crate) struct MasterHandler {
    pub(crate) shared: Arc<Shared>,
}

fn wire<T>(r: crate::Result<T>) -> Reply<T> {
    r.map_err(|e| e.to_wire())
}

fn each<T>(v: Vec<crate::Result<T>>) -> Vec<Reply<T>> {
    v.into_iter().map(wire).collect()
}

impl MasterHandler {
    /// Runs `f` on the core and flattens the durability error into the answer.
    async fn run<T>(
        &self,
        f: impl FnOnce(&mut super::Master, u64) -> crate::Result<T>,
    ) -> Reply<T> {
        wire(self.shared.run(f).await.and_then(|r| r))
    }

    async fn run_each<T>(
        &self,
        f: impl FnOnce(&mut super::Master, u64) -> Vec<crate::Result<T>>,
    ) -> Reply<Vec<Reply<T>>> {
        wire(self.shared.run(f).await).map(each)
    }
}

impl MasterService for MasterHandler {
    async fn mount(self, _: Context, client: u128, specs: Vec<MountSpec>) -> Reply<Vec<MountId>> {
        self.run(|m, now| m.mount(ClientId(client), now, &specs))
            .await
    }

    async fn remount(self, _: Context, client: u128, specs: Vec<MountSpec>) -> Reply<Vec<MountId>> {
        self.run(|m, now| m.remount(ClientId(client), now, &specs))
            .await
    }

    async fn unmount(self, _: Context, client: u128, mount: MountId) -> Reply<()> {
        self.run(|m, now| m.unmount(ClientId(client), now, mount))
            .await
    }

    async fn ping(self, _: Context, client: u128) -> Reply<PingResult> {
        self.run(|m, now| Ok(m.ping(ClientId(client), now))).await
    }

    async fn put_start(
        self,
        _: Context,
        client: u128,
        key: String,
        size: u64,
        cfg: PutConfig,
    ) -> Reply<Vec<ReplicaDesc>> {
        self.run(|m, now| m.put_start(ClientId(client), now, &key, size, &cfg))
            .await
    }

    async fn put_end(self, _: Context, client: u128, key: String) -> Reply<()> {
        self.run(|m, now| m.put_end(ClientId(client), now, &key))
            .await
    }

    async fn put_revoke(self, _: Context, client: u128, key: String) -> Reply<()> {
        self.run(|m, now| m.put_revoke(ClientId(client), now, &key))
            .await
    }

    async fn upsert_start(
        self,
        _: Context,
        client: u128,
        key: String,
        size: u64,
        cfg: PutConfig,
    ) -> Reply<Vec<ReplicaDesc>> {
        self.run(|m, now| m.upsert_start(ClientId(client), now, &key, size, &cfg))
            .await
    }

    async fn upsert_end(self, _: Context, client: u128, key: String) -> Reply<()> {
        self.run(|m, now| m.upsert_end(ClientId(client), now, &key))
            .await
    }

    async fn upsert_revoke(self, _: Context, client: u128, key: String) -> Reply<()> {
        self.run(|m, now| m.upsert_revoke(ClientId(client), now, &key))
            .await
    }

    async fn batch_put_start(
        self,
        _: Context,
        client: u128,
        items: Vec<(String, u64)>,
        cfg: PutConfig,
    ) -> Reply<Vec<Reply<Vec<ReplicaDesc>>>> {
        self.run_each(|m, now| m.batch_put_start(ClientId(client), now, &items, &cfg))
            .await
    }

    async fn batch_put_end(
        self,
        _: Context,
        client: u128,
        keys: Vec<String>,
    ) -> Reply<Vec<Reply<()>>> {
        self.run_each(|m, now| m.batch_put_end(ClientId(client), now, &keys))
            .await
    }

    async fn batch_put_revoke(
        self,
        _: Context,
        client: u128,
        keys: Vec<String>,
    ) -> Reply<Vec<Reply<()>>> {
        self.run_each(|m, now| m.batch_put_revoke(ClientId(client), now, &keys))
            .await
    }

    async fn batch_upsert_start(
        self,
        _: Context,
        client: u128,
        items: Vec<(String, u64)>,
        cfg: PutConfig,
    ) -> Reply<Vec<Reply<Vec<ReplicaDesc>>>> {
        self.run_each(|m, now| m.batch_upsert_start(ClientId(client), now, &items, &cfg))
            .await
    }

    async fn batch_upsert_end(
        self,
        _: Context,
        client: u128,
        keys: Vec<String>,
    ) -> Reply<Vec<Reply<()>>> {
        self.run_each(|m, now| m.batch_upsert_end(ClientId(client), now, &keys))
            .await
    }

    async fn batch_upsert_revoke(
        self,
        _: Context,
        client: u128,
        keys: Vec<String>,
    ) -> Reply<Vec<Reply<()>>> {
        self.run_each(|m, now| m.batch_upsert_revoke(ClientId(client), now, &keys))
            .await
    }

    async fn get_replica_list(self, _: Context, key: String) -> Reply<ReplicaList> {
        self.run(|m, now| m.get_replica_list(now, &key)).await
    }

    async fn batch_get_replica_list(
        self,
        _: Context,
        keys: Vec<String>,
    ) -> Reply<Vec<Reply<ReplicaList>>> {
        self.run_each(|m, now| m.batch_get_replica_list(now, &keys))
            .await
    }

    async fn exist(self, _: Context, key: String) -> Reply<bool> {
        self.run(|m, _| m.exist(&key)).await
    }

    async fn batch_exist(self, _: Context, keys: Vec<String>) -> Reply<Vec<Reply<bool>>> {
        self.run_each(|m, _| m.batch_exist(&keys)).await
    }

    async fn get_size(self, _: Context, key: String) -> Reply<u64> {
        self.run(|m, _| m.get_size(&key)).await
    }

    async fn remove(self, _: Context, key: String, force: bool) -> Reply<()> {
        self.run(|m, now| m.remove(now, &key, force)).await
    }

    async fn remove_all(self, _: Context, force: bool) -> Reply<u64> {
        self.run(|m, now| Ok(m.remove_all(now, force))).await
    }

    async fn list(self, _: Context, prefix: String, limit: u64) -> Reply<Vec<ListedObject>> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        self.run(|m, _| Ok(m.list(&prefix, limit))).await
    }

    async fn stats(self, _: Context) -> Reply<Stats> {
        self.run(|m, _| Ok(m.stats())).await
    }

    async fn health(self, _: Context) -> Health {
        self.shared.health()
    }
}

/// Turns an answer back into the store's error type.
pub(crate) fn unwire<T>(r: Reply<T>) -> crate::Result<T> {
    r.map_err(Error::from_wire)
}
