//! The store client for callers that are not async Rust: [`BlockingClient`]. Each method is one
//! line over the async [`Client`]'s, with its name, arguments and result; for a [`Call`] to
//! wait for, hand a callback, or cancel, start the async call with [`BlockingClient::call`]
//! (`c.call(|c| c.get(key, opts))`). The async calls borrow nothing once made, so either
//! form takes the caller's borrowed inputs.

use std::future::Future;

use yuebing_engine::TransferEngine;
use yuebing_store::master::{ListedObject, ReplicaList, Stats, TaskId, TaskInfo};
use yuebing_store::{
    Client, ClientConfig, ClientHealth, Fetched, Fragment, Located, Options, Reservation, SpaceId,
};

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::{Error, Result};

/// One result per item of a batch, as the async client gives them.
pub type Each<T> = Vec<yuebing_store::Result<T>>;

/// A store client on a [`Bridge`]'s runtime, for plain threads and callback-driven callers.
/// Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct BlockingClient {
    bridge: Bridge,
    client: Client,
}

impl BlockingClient {
    /// Starts a client on `bridge` (its engine, master connections and heartbeat all live on
    /// the bridge's runtime) and blocks until it is mounted.
    pub fn start(bridge: &Bridge, cfg: ClientConfig) -> Result<BlockingClient> {
        bridge.wait_for(|| BlockingClient::start_call(bridge, cfg))
    }

    /// `start` as a [`Call`] (for callers that must not block).
    pub fn start_call(bridge: &Bridge, cfg: ClientConfig) -> Call<BlockingClient> {
        let (b, handle) = (bridge.clone(), bridge.handle().clone());
        bridge.call(async move {
            let client = Client::start_on(cfg, handle).await?;
            Ok::<_, crate::Error>(BlockingClient { bridge: b, client })
        })
    }

    /// Starts a client on an existing engine (see [`Client::with_engine`]): the client's
    /// calls run on `bridge`, its master connections and heartbeat on the engine's runtime,
    /// and the engine stays usable by its other users, also once the client is closed or
    /// dropped. The engine's cluster token must be the client's (`InvalidParams` otherwise).
    /// Blocks until the client is mounted.
    pub fn with_engine(
        bridge: &Bridge,
        cfg: ClientConfig,
        engine: TransferEngine,
    ) -> Result<BlockingClient> {
        bridge.wait_for(|| BlockingClient::with_engine_call(bridge, cfg, engine))
    }

    /// `with_engine` as a [`Call`].
    pub fn with_engine_call(
        bridge: &Bridge,
        cfg: ClientConfig,
        engine: TransferEngine,
    ) -> Call<BlockingClient> {
        let b = bridge.clone();
        bridge.call(async move {
            let client = Client::with_engine(cfg, engine).await?;
            Ok::<_, crate::Error>(BlockingClient { bridge: b, client })
        })
    }

    /// The async client underneath (for its engine: register memory there).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bridge the client runs on.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// Makes a call of the async client with `start` and runs it on the bridge: a [`Call`] to
    /// wait for, hand a callback or cancel (`c.call(|c| c.get(key, opts))`). In a forked child,
    /// or once the bridge is shut down, the call is not made (a put would copy its value into
    /// staging memory the child shares with its parent) and the `Call` ends with that error.
    /// Memory a call reads or writes (`put_from`, `get_into`) is in use until the call ends: a
    /// cancelled call's outcome comes only once nothing touches it.
    pub fn call<T: Send + 'static, F>(&self, start: impl FnOnce(&Client) -> F) -> Call<T>
    where
        F: Future<Output = yuebing_store::Result<T>> + Send + 'static,
    {
        match self.bridge.usable() {
            Ok(()) => self.bridge.call(start(&self.client)),
            Err(refused) => self
                .bridge
                .call(std::future::ready(Err::<T, Error>(refused))),
        }
    }

    /// Makes a call of the async client with `start` and blocks until it ends, unless this
    /// thread must not block on the bridge or this is a forked child ([`Bridge::block_on`]):
    /// then the call is not even made. Making it is not free of effects: a put copies its
    /// value into the client's staging memory, which a forked child shares with its parent.
    fn wait<T: Send + 'static, F>(&self, start: impl FnOnce() -> F) -> Result<T>
    where
        F: Future<Output = yuebing_store::Result<T>> + Send + 'static,
    {
        self.bridge.may_block()?;
        self.bridge.block_on(start())
    }

    /// See [`Client::put`].
    pub fn put(
        &self,
        key: impl Into<String>,
        value: &[u8],
        opts: impl Into<Options>,
    ) -> Result<()> {
        self.wait(|| self.client.put(key, value, opts))
    }

    /// See [`Client::put_parts`].
    pub fn put_parts(
        &self,
        key: impl Into<String>,
        parts: &[&[u8]],
        opts: impl Into<Options>,
    ) -> Result<()> {
        self.wait(|| self.client.put_parts(key, parts, opts))
    }

    /// See [`Client::put_from`].
    pub fn put_from(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> Result<()> {
        self.wait(|| self.client.put_from(key, addr, len, opts))
    }

    /// See [`Client::get`].
    pub fn get(&self, key: impl Into<String>, opts: impl Into<Options>) -> Result<Vec<u8>> {
        self.wait(|| self.client.get(key, opts))
    }

    /// See [`Client::get_into`].
    pub fn get_into(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> Result<u64> {
        self.wait(|| self.client.get_into(key, addr, len, opts))
    }

    /// See [`Client::locate`].
    pub fn locate(&self, key: impl Into<String>, opts: impl Into<Options>) -> Result<Located> {
        self.wait(|| self.client.locate(key, opts))
    }

    /// See [`Client::get_or_locate`].
    pub fn get_or_locate(
        &self,
        key: impl Into<String>,
        inline_max: u64,
        opts: impl Into<Options>,
    ) -> Result<Fetched> {
        self.wait(|| self.client.get_or_locate(key, inline_max, opts))
    }

    /// See [`Client::read_located`].
    pub fn read_located(
        &self,
        found: &Located,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> Result<u64> {
        self.wait(|| self.client.read_located(found, addr, len, opts))
    }

    /// See [`Client::exist`].
    pub fn exist(&self, key: impl Into<String>, opts: impl Into<Options>) -> Result<bool> {
        self.wait(|| self.client.exist(key, opts))
    }

    /// See [`Client::get_size`].
    pub fn get_size(&self, key: impl Into<String>, opts: impl Into<Options>) -> Result<u64> {
        self.wait(|| self.client.get_size(key, opts))
    }

    /// See [`Client::remove`].
    pub fn remove(
        &self,
        key: impl Into<String>,
        force: bool,
        opts: impl Into<Options>,
    ) -> Result<()> {
        self.wait(|| self.client.remove(key, force, opts))
    }

    /// See [`Client::replicas`].
    pub fn replicas(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> Result<ReplicaList> {
        self.wait(|| self.client.replicas(key, opts))
    }

    /// See [`Client::batch_put`].
    pub fn batch_put<K: AsRef<str>>(
        &self,
        items: &[(K, &[u8])],
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_put(items, opts))
    }

    /// See [`Client::batch_put_from`].
    pub fn batch_put_from<K: AsRef<str>>(
        &self,
        items: &[(K, u64, u64)],
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_put_from(items, opts))
    }

    /// See [`Client::batch_put_from_buffers`].
    pub fn batch_put_from_buffers<K: AsRef<str>, B: AsRef<[(u64, u64)]>>(
        &self,
        items: &[(K, B)],
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_put_from_buffers(items, opts))
    }

    /// See [`Client::batch_get`].
    pub fn batch_get<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> Result<Each<Vec<u8>>> {
        self.wait(|| self.client.batch_get(keys, opts))
    }

    /// See [`Client::batch_get_into`].
    pub fn batch_get_into<K: AsRef<str>>(
        &self,
        items: &[(K, u64, u64)],
        opts: impl Into<Options>,
    ) -> Result<Each<u64>> {
        self.wait(|| self.client.batch_get_into(items, opts))
    }

    /// See [`Client::batch_get_into_buffers`].
    pub fn batch_get_into_buffers<K: AsRef<str>, B: AsRef<[(u64, u64)]>>(
        &self,
        items: &[(K, B)],
        opts: impl Into<Options>,
    ) -> Result<Each<u64>> {
        self.wait(|| self.client.batch_get_into_buffers(items, opts))
    }

    /// See [`Client::batch_get_ranges`].
    pub fn batch_get_ranges<K: AsRef<str>, B: AsRef<[Fragment]>>(
        &self,
        items: &[(K, B)],
        opts: impl Into<Options>,
    ) -> Result<Vec<Each<u64>>> {
        self.wait(|| self.client.batch_get_ranges(items, opts))
    }

    /// See [`Client::batch_locate`].
    pub fn batch_locate<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> Result<Each<Located>> {
        self.wait(|| self.client.batch_locate(keys, opts))
    }

    /// See [`Client::batch_read_located`].
    pub fn batch_read_located<F: AsRef<[Fragment]>>(
        &self,
        items: &[(&Located, F)],
        opts: impl Into<Options>,
    ) -> Result<Each<u64>> {
        self.wait(|| self.client.batch_read_located(items, opts))
    }

    /// See [`Client::batch_replica_clear`].
    pub fn batch_replica_clear<K: AsRef<str>>(
        &self,
        keys: &[K],
        node: impl Into<String>,
        opts: impl Into<Options>,
    ) -> Result<Vec<String>> {
        self.wait(|| self.client.batch_replica_clear(keys, node, opts))
    }

    /// See [`Client::create_copy_task`].
    pub fn create_copy_task<T: AsRef<str>>(
        &self,
        key: impl Into<String>,
        targets: &[T],
        opts: impl Into<Options>,
    ) -> Result<TaskId> {
        self.wait(|| self.client.create_copy_task(key, targets, opts))
    }

    /// See [`Client::create_move_task`].
    pub fn create_move_task(
        &self,
        key: impl Into<String>,
        source: impl Into<String>,
        target: impl Into<String>,
        opts: impl Into<Options>,
    ) -> Result<TaskId> {
        self.wait(|| self.client.create_move_task(key, source, target, opts))
    }

    /// See [`Client::query_task`].
    pub fn query_task(&self, id: TaskId, opts: impl Into<Options>) -> Result<TaskInfo> {
        self.wait(|| self.client.query_task(id, opts))
    }

    /// See [`Client::batch_reserve`].
    pub fn batch_reserve<K: AsRef<str>>(
        &self,
        items: &[(K, u64)],
        opts: impl Into<Options>,
    ) -> Result<Each<Reservation>> {
        self.wait(|| self.client.batch_reserve(items, opts))
    }

    /// See [`Client::batch_write_reserved`].
    pub fn batch_write_reserved<F: AsRef<[Fragment]>>(
        &self,
        items: &[(&Reservation, F)],
        opts: impl Into<Options>,
    ) -> Result<Each<u64>> {
        self.wait(|| self.client.batch_write_reserved(items, opts))
    }

    /// See [`Client::batch_publish`].
    pub fn batch_publish(
        &self,
        reservations: &[Reservation],
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_publish(reservations, opts))
    }

    /// See [`Client::batch_revoke`].
    pub fn batch_revoke(
        &self,
        reservations: &[Reservation],
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_revoke(reservations, opts))
    }

    /// See [`Client::serve_admin`].
    pub fn serve_admin(&self, bind: &str) -> Result<yuebing_store::http::AdminServer> {
        self.wait(|| self.client.serve_admin(bind))
    }

    /// See [`Client::mount_space`].
    pub fn mount_space(&self, len: u64, opts: impl Into<Options>) -> Result<SpaceId> {
        self.wait(|| self.client.mount_space(len, opts))
    }

    /// See [`Client::mount_file`].
    pub fn mount_file(
        &self,
        path: impl Into<std::path::PathBuf>,
        offset: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> Result<SpaceId> {
        self.wait(|| self.client.mount_file(path, offset, len, opts))
    }

    /// See [`Client::unmount_space`].
    pub fn unmount_space(
        &self,
        id: SpaceId,
        grace: std::time::Duration,
        opts: impl Into<Options>,
    ) -> Result<()> {
        self.wait(|| self.client.unmount_space(id, grace, opts))
    }

    /// See [`Client::batch_exist`].
    pub fn batch_exist<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> Result<Each<bool>> {
        self.wait(|| self.client.batch_exist(keys, opts))
    }

    /// See [`Client::batch_remove`].
    pub fn batch_remove<K: AsRef<str>>(
        &self,
        keys: &[K],
        force: bool,
        opts: impl Into<Options>,
    ) -> Result<Each<()>> {
        self.wait(|| self.client.batch_remove(keys, force, opts))
    }

    /// See [`Client::batch_replicas`].
    pub fn batch_replicas<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> Result<Each<ReplicaList>> {
        self.wait(|| self.client.batch_replicas(keys, opts))
    }

    /// See [`Client::remove_all`].
    pub fn remove_all(&self, force: bool, opts: impl Into<Options>) -> Result<u64> {
        self.wait(|| self.client.remove_all(force, opts))
    }

    /// See [`Client::remove_by_regex`].
    pub fn remove_by_regex(
        &self,
        pattern: impl Into<String>,
        force: bool,
        opts: impl Into<Options>,
    ) -> Result<u64> {
        self.wait(|| self.client.remove_by_regex(pattern, force, opts))
    }

    /// See [`Client::list`].
    pub fn list(
        &self,
        prefix: impl Into<String>,
        limit: u64,
        opts: impl Into<Options>,
    ) -> Result<Vec<ListedObject>> {
        self.wait(|| self.client.list(prefix, limit, opts))
    }

    /// See [`Client::stats`].
    pub fn stats(&self, opts: impl Into<Options>) -> Result<Stats> {
        self.wait(|| self.client.stats(opts))
    }

    /// See [`Client::health_check`]; an error only when the bridge itself cannot run the
    /// check (shut down, a forked child, a bridge thread).
    pub fn health_check(&self, opts: impl Into<Options>) -> Result<ClientHealth> {
        let check = || {
            let check = self.client.health_check(opts);
            async move { Ok(check.await) }
        };
        self.wait(check)
    }

    /// See [`Client::close`].
    pub fn close(&self, opts: impl Into<Options>) -> Result<()> {
        self.wait(|| self.client.close(opts))
    }

    /// See [`Client::hostname`].
    pub fn hostname(&self) -> &str {
        self.client.hostname()
    }
}
