//! The store client for callers that are not async Rust: [`BlockingClient`], whose methods
//! carry the async API's names, arguments and results, and whose `*_call` forms return a
//! [`Call`] to wait for, hand a callback, or cancel. A `*_call` form takes owned inputs (the
//! call may outlive the caller's borrow); the blocking form takes the async API's borrows.

use std::future::Future;

use yuebing_engine::TransferEngine;
use yuebing_store::master::{ListedObject, ReplicaList, Stats};
use yuebing_store::{Client, ClientConfig, ClientHealth, Fetched, Located, Options};

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::Result;

/// One result per item of a batch, as the async client gives them.
pub type Each<T> = Vec<yuebing_store::Result<T>>;

/// A store client on a [`Bridge`]'s runtime, for plain threads and callback-driven callers.
/// Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct BlockingClient {
    bridge: Bridge,
    client: Client,
}

/// Owned `(key, addr, len)` items of the registered-memory batch forms.
fn owned_ranges(items: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
    items
        .iter()
        .map(|&(k, addr, len)| (k.to_string(), addr, len))
        .collect()
}

/// Borrowed views of owned ranges, as the async client takes them.
pub(crate) fn ranges(items: &[(String, u64, u64)]) -> Vec<(&str, u64, u64)> {
    items.iter().map(|(k, a, l)| (k.as_str(), *a, *l)).collect()
}

fn keys(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// Owned `(key, value)` items of the bytes batch forms.
fn owned_items(items: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

/// Owned copies of a put's parts, for its `*_call` form.
fn owned_parts(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// Borrowed views of owned parts, as the async client takes them.
fn slices(parts: &[Vec<u8>]) -> Vec<&[u8]> {
    parts.iter().map(Vec::as_slice).collect()
}

impl BlockingClient {
    /// Starts a client on `bridge` (its engine, master connections and heartbeat all live on
    /// the bridge's runtime) and blocks until it is mounted.
    pub fn start(bridge: &Bridge, cfg: ClientConfig) -> Result<BlockingClient> {
        let handle = bridge.handle().clone();
        let client = bridge.block_on(Client::start_on(cfg, handle))?;
        Ok(BlockingClient {
            bridge: bridge.clone(),
            client,
        })
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

    /// Starts `op` on a clone of the async client.
    fn op<T, F, Fut>(&self, op: F) -> Call<T>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = yuebing_store::Result<T>> + Send + 'static,
    {
        self.bridge.call(op(self.client.clone()))
    }

    /// `put` as a [`Call`].
    pub fn put_call(&self, key: impl Into<String>, value: Vec<u8>, opts: &Options) -> Call<()> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.put(&key, &value, &opts).await })
    }

    /// Stores `value` under `key` (see [`Client::put`]).
    pub fn put(&self, key: &str, value: &[u8], opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.put_call(key, value.to_vec(), opts))
    }

    /// `upsert` as a [`Call`].
    pub fn upsert_call(&self, key: impl Into<String>, value: Vec<u8>, opts: &Options) -> Call<()> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.upsert(&key, &value, &opts).await })
    }

    /// Stores `value` under `key`, replacing an existing value (see [`Client::upsert`]).
    pub fn upsert(&self, key: &str, value: &[u8], opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.upsert_call(key, value.to_vec(), opts))
    }

    /// `put_from` as a [`Call`] (the memory is read until the call ends).
    pub fn put_from_call(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Call<()> {
        self.memory_call(key.into(), (addr, len), opts, false)
    }

    /// Stores registered memory under `key` (see [`Client::put_from`]).
    pub fn put_from(&self, key: &str, addr: u64, len: u64, opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.put_from_call(key, addr, len, opts))
    }

    /// `upsert_from` as a [`Call`] (the memory is read until the call ends).
    pub fn upsert_from_call(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Call<()> {
        self.memory_call(key.into(), (addr, len), opts, true)
    }

    /// `put_from` or (`upsert`) `upsert_from` as a [`Call`].
    fn memory_call(
        &self,
        key: String,
        (addr, len): (u64, u64),
        opts: &Options,
        upsert: bool,
    ) -> Call<()> {
        let opts = opts.clone();
        self.op(move |c| async move {
            match upsert {
                true => c.upsert_from(&key, addr, len, &opts).await,
                false => c.put_from(&key, addr, len, &opts).await,
            }
        })
    }

    /// Stores registered memory under `key`, replacing an existing value (see
    /// [`Client::upsert_from`]).
    pub fn upsert_from(&self, key: &str, addr: u64, len: u64, opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.upsert_from_call(key, addr, len, opts))
    }

    /// `get` as a [`Call`].
    pub fn get_call(&self, key: impl Into<String>, opts: &Options) -> Call<Vec<u8>> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.get(&key, &opts).await })
    }

    /// The value of `key` (see [`Client::get`]).
    pub fn get(&self, key: &str, opts: &Options) -> Result<Vec<u8>> {
        self.bridge.wait_for(|| self.get_call(key, opts))
    }

    /// `get_into` as a [`Call`]. The memory at `addr` is written until the call ends (its
    /// callback runs, or `wait` returns): a cancelled call's outcome comes only once nothing
    /// writes there any more.
    pub fn get_into_call(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Call<u64> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(move |c| async move { c.get_into(&key, addr, len, &opts).await })
    }

    /// Reads `key` into registered memory (see [`Client::get_into`]); returns its size.
    pub fn get_into(&self, key: &str, addr: u64, len: u64, opts: &Options) -> Result<u64> {
        self.bridge
            .wait_for(|| self.get_into_call(key, addr, len, opts))
    }

    /// `get_or_locate` as a [`Call`]: a value of at most `inline_max` bytes, else its place
    /// (see [`Client::get_or_locate`]).
    pub fn get_or_locate_call(
        &self,
        key: impl Into<String>,
        inline_max: u64,
        opts: &Options,
    ) -> Call<Fetched> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(move |c| async move { c.get_or_locate(&key, inline_max, &opts).await })
    }

    /// The value of `key` if it has at most `inline_max` bytes, else its place (see
    /// [`Client::get_or_locate`]).
    pub fn get_or_locate(&self, key: &str, inline_max: u64, opts: &Options) -> Result<Fetched> {
        self.bridge
            .wait_for(|| self.get_or_locate_call(key, inline_max, opts))
    }

    /// `read_located` as a [`Call`]. As with [`BlockingClient::get_into_call`], the memory at
    /// `addr` is written until the call ends.
    pub fn read_located_call(
        &self,
        found: Located,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Call<u64> {
        let opts = opts.clone();
        self.op(move |c| async move { c.read_located(&found, addr, len, &opts).await })
    }

    /// Reads a located object into registered memory (see [`Client::read_located`]); returns
    /// its size.
    pub fn read_located(
        &self,
        found: &Located,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Result<u64> {
        self.bridge
            .wait_for(|| self.read_located_call(found.clone(), addr, len, opts))
    }

    /// `batch_put` as a [`Call`].
    pub fn batch_put_call(&self, items: Vec<(String, Vec<u8>)>, opts: &Options) -> Call<Each<()>> {
        self.batch_bytes_call(items, opts, false)
    }

    /// Stores each `(key, value)`; one result per item (see [`Client::batch_put`]).
    pub fn batch_put(&self, items: &[(&str, &[u8])], opts: &Options) -> Result<Each<()>> {
        self.bridge
            .wait_for(|| self.batch_put_call(owned_items(items), opts))
    }

    /// `batch_upsert` as a [`Call`].
    pub fn batch_upsert_call(
        &self,
        items: Vec<(String, Vec<u8>)>,
        opts: &Options,
    ) -> Call<Each<()>> {
        self.batch_bytes_call(items, opts, true)
    }

    /// Stores each `(key, value)`, replacing existing values; one result per item (see
    /// [`Client::batch_upsert`]).
    pub fn batch_upsert(&self, items: &[(&str, &[u8])], opts: &Options) -> Result<Each<()>> {
        self.bridge
            .wait_for(|| self.batch_upsert_call(owned_items(items), opts))
    }

    /// `batch_put` or (`upsert`) `batch_upsert` as a [`Call`].
    fn batch_bytes_call(
        &self,
        items: Vec<(String, Vec<u8>)>,
        opts: &Options,
        upsert: bool,
    ) -> Call<Each<()>> {
        let opts = opts.clone();
        self.op(move |c| async move {
            let items: Vec<(&str, &[u8])> =
                items.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
            match upsert {
                true => c.batch_upsert(&items, &opts).await,
                false => c.batch_put(&items, &opts).await,
            }
        })
    }

    /// `batch_put_from` as a [`Call`] (the memory is read until the call ends).
    pub fn batch_put_from_call(
        &self,
        items: Vec<(String, u64, u64)>,
        opts: &Options,
    ) -> Call<Each<()>> {
        self.batch_from_call(items, opts, false)
    }

    /// Stores each `(key, addr, len)` of registered memory (see [`Client::batch_put_from`]).
    pub fn batch_put_from(&self, items: &[(&str, u64, u64)], opts: &Options) -> Result<Each<()>> {
        self.bridge
            .wait_for(|| self.batch_put_from_call(owned_ranges(items), opts))
    }

    /// `batch_upsert_from` as a [`Call`] (the memory is read until the call ends).
    pub fn batch_upsert_from_call(
        &self,
        items: Vec<(String, u64, u64)>,
        opts: &Options,
    ) -> Call<Each<()>> {
        self.batch_from_call(items, opts, true)
    }

    /// Stores each `(key, addr, len)` of registered memory, replacing existing values (see
    /// [`Client::batch_upsert_from`]).
    pub fn batch_upsert_from(
        &self,
        items: &[(&str, u64, u64)],
        opts: &Options,
    ) -> Result<Each<()>> {
        self.bridge
            .wait_for(|| self.batch_upsert_from_call(owned_ranges(items), opts))
    }

    /// `batch_put_from` or (`upsert`) `batch_upsert_from` as a [`Call`].
    fn batch_from_call(
        &self,
        items: Vec<(String, u64, u64)>,
        opts: &Options,
        upsert: bool,
    ) -> Call<Each<()>> {
        let opts = opts.clone();
        self.op(move |c| async move {
            match upsert {
                true => c.batch_upsert_from(&ranges(&items), &opts).await,
                false => c.batch_put_from(&ranges(&items), &opts).await,
            }
        })
    }

    /// `batch_get` as a [`Call`].
    pub fn batch_get_call(&self, keys: Vec<String>, opts: &Options) -> Call<Each<Vec<u8>>> {
        let opts = opts.clone();
        self.op(|c| async move { c.batch_get(&self::keys(&keys), &opts).await })
    }

    /// The value of each key; one result per key (see [`Client::batch_get`]).
    pub fn batch_get(&self, keys: &[&str], opts: &Options) -> Result<Each<Vec<u8>>> {
        let owned = keys.iter().map(|k| k.to_string()).collect();
        self.bridge.wait_for(|| self.batch_get_call(owned, opts))
    }

    /// `batch_get_into` as a [`Call`] (the memory is written until the call ends).
    pub fn batch_get_into_call(
        &self,
        items: Vec<(String, u64, u64)>,
        opts: &Options,
    ) -> Call<Each<u64>> {
        let opts = opts.clone();
        self.op(|c| async move { c.batch_get_into(&ranges(&items), &opts).await })
    }

    /// Reads each `(key, addr, len)` into registered memory; one size per key (see
    /// [`Client::batch_get_into`]).
    pub fn batch_get_into(&self, items: &[(&str, u64, u64)], opts: &Options) -> Result<Each<u64>> {
        self.bridge
            .wait_for(|| self.batch_get_into_call(owned_ranges(items), opts))
    }

    /// `exist` as a [`Call`].
    pub fn exist_call(&self, key: impl Into<String>, opts: &Options) -> Call<bool> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.exist(&key, &opts).await })
    }

    /// Whether `key` exists (see [`Client::exist`]).
    pub fn exist(&self, key: &str, opts: &Options) -> Result<bool> {
        self.bridge.wait_for(|| self.exist_call(key, opts))
    }

    /// `batch_exist` as a [`Call`].
    pub fn batch_exist_call(&self, keys: Vec<String>, opts: &Options) -> Call<Each<bool>> {
        let opts = opts.clone();
        self.op(|c| async move { c.batch_exist(&self::keys(&keys), &opts).await })
    }

    /// Whether each key exists (see [`Client::batch_exist`]).
    pub fn batch_exist(&self, keys: &[&str], opts: &Options) -> Result<Each<bool>> {
        let owned = keys.iter().map(|k| k.to_string()).collect();
        self.bridge.wait_for(|| self.batch_exist_call(owned, opts))
    }

    /// `get_size` as a [`Call`].
    pub fn get_size_call(&self, key: impl Into<String>, opts: &Options) -> Call<u64> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.get_size(&key, &opts).await })
    }

    /// The size of `key`'s value (see [`Client::get_size`]).
    pub fn get_size(&self, key: &str, opts: &Options) -> Result<u64> {
        self.bridge.wait_for(|| self.get_size_call(key, opts))
    }

    /// `remove` as a [`Call`].
    pub fn remove_call(&self, key: impl Into<String>, force: bool, opts: &Options) -> Call<()> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(move |c| async move { c.remove(&key, force, &opts).await })
    }

    /// Removes `key` (see [`Client::remove`]).
    pub fn remove(&self, key: &str, force: bool, opts: &Options) -> Result<()> {
        self.bridge.wait_for(|| self.remove_call(key, force, opts))
    }

    /// `remove_all` as a [`Call`].
    pub fn remove_all_call(&self, force: bool, opts: &Options) -> Call<u64> {
        let opts = opts.clone();
        self.op(move |c| async move { c.remove_all(force, &opts).await })
    }

    /// Removes every object; returns how many (see [`Client::remove_all`]).
    pub fn remove_all(&self, force: bool, opts: &Options) -> Result<u64> {
        self.bridge.wait_for(|| self.remove_all_call(force, opts))
    }

    /// `list` as a [`Call`].
    pub fn list_call(
        &self,
        prefix: impl Into<String>,
        limit: u64,
        opts: &Options,
    ) -> Call<Vec<ListedObject>> {
        let (prefix, opts) = (prefix.into(), opts.clone());
        self.op(move |c| async move { c.list(&prefix, limit, &opts).await })
    }

    /// Keys starting with `prefix`, sorted, at most `limit` (see [`Client::list`]).
    pub fn list(&self, prefix: &str, limit: u64, opts: &Options) -> Result<Vec<ListedObject>> {
        self.bridge.wait_for(|| self.list_call(prefix, limit, opts))
    }

    /// `stats` as a [`Call`].
    pub fn stats_call(&self, opts: &Options) -> Call<Stats> {
        let opts = opts.clone();
        self.op(|c| async move { c.stats(&opts).await })
    }

    /// The master's counts (see [`Client::stats`]).
    pub fn stats(&self, opts: &Options) -> Result<Stats> {
        self.bridge.wait_for(|| self.stats_call(opts))
    }

    /// `put_parts` as a [`Call`].
    pub fn put_parts_call(
        &self,
        key: impl Into<String>,
        parts: Vec<Vec<u8>>,
        opts: &Options,
    ) -> Call<()> {
        self.parts_call(key.into(), parts, opts, false)
    }

    /// Stores the concatenation of `parts` under `key` (see [`Client::put_parts`]).
    pub fn put_parts(&self, key: &str, parts: &[&[u8]], opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.put_parts_call(key, owned_parts(parts), opts))
    }

    /// `upsert_parts` as a [`Call`].
    pub fn upsert_parts_call(
        &self,
        key: impl Into<String>,
        parts: Vec<Vec<u8>>,
        opts: &Options,
    ) -> Call<()> {
        self.parts_call(key.into(), parts, opts, true)
    }

    /// Stores the concatenation of `parts` under `key`, replacing an existing value (see
    /// [`Client::upsert_parts`]).
    pub fn upsert_parts(&self, key: &str, parts: &[&[u8]], opts: &Options) -> Result<()> {
        self.bridge
            .wait_for(|| self.upsert_parts_call(key, owned_parts(parts), opts))
    }

    /// `put_parts` or (`upsert`) `upsert_parts` as a [`Call`].
    fn parts_call(
        &self,
        key: String,
        parts: Vec<Vec<u8>>,
        opts: &Options,
        upsert: bool,
    ) -> Call<()> {
        let opts = opts.clone();
        self.op(move |c| async move {
            let parts = slices(&parts);
            match upsert {
                true => c.upsert_parts(&key, &parts, &opts).await,
                false => c.put_parts(&key, &parts, &opts).await,
            }
        })
    }

    /// `batch_remove` as a [`Call`].
    pub fn batch_remove_call(
        &self,
        keys: Vec<String>,
        force: bool,
        opts: &Options,
    ) -> Call<Each<()>> {
        let opts = opts.clone();
        self.op(move |c| async move { c.batch_remove(&self::keys(&keys), force, &opts).await })
    }

    /// Removes each of `keys`; one result per key (see [`Client::batch_remove`]).
    pub fn batch_remove(&self, keys: &[&str], force: bool, opts: &Options) -> Result<Each<()>> {
        let owned = keys.iter().map(|k| k.to_string()).collect();
        self.bridge
            .wait_for(|| self.batch_remove_call(owned, force, opts))
    }

    /// `remove_by_regex` as a [`Call`].
    pub fn remove_by_regex_call(
        &self,
        pattern: impl Into<String>,
        force: bool,
        opts: &Options,
    ) -> Call<u64> {
        let (pattern, opts) = (pattern.into(), opts.clone());
        self.op(move |c| async move { c.remove_by_regex(&pattern, force, &opts).await })
    }

    /// Removes every object whose key `pattern` matches; returns how many (see
    /// [`Client::remove_by_regex`]).
    pub fn remove_by_regex(&self, pattern: &str, force: bool, opts: &Options) -> Result<u64> {
        self.bridge
            .wait_for(|| self.remove_by_regex_call(pattern, force, opts))
    }

    /// `replicas` as a [`Call`].
    pub fn replicas_call(&self, key: impl Into<String>, opts: &Options) -> Call<ReplicaList> {
        let (key, opts) = (key.into(), opts.clone());
        self.op(|c| async move { c.replicas(&key, &opts).await })
    }

    /// Where `key`'s replicas are (see [`Client::replicas`]).
    pub fn replicas(&self, key: &str, opts: &Options) -> Result<ReplicaList> {
        self.bridge.wait_for(|| self.replicas_call(key, opts))
    }

    /// `batch_replicas` as a [`Call`].
    pub fn batch_replicas_call(
        &self,
        keys: Vec<String>,
        opts: &Options,
    ) -> Call<Each<ReplicaList>> {
        let opts = opts.clone();
        self.op(|c| async move { c.batch_replicas(&self::keys(&keys), &opts).await })
    }

    /// Where each of `keys`' replicas are; one result per key (see [`Client::batch_replicas`]).
    pub fn batch_replicas(&self, keys: &[&str], opts: &Options) -> Result<Each<ReplicaList>> {
        let owned = keys.iter().map(|k| k.to_string()).collect();
        self.bridge
            .wait_for(|| self.batch_replicas_call(owned, opts))
    }

    /// `health_check` as a [`Call`].
    pub fn health_check_call(&self, opts: &Options) -> Call<ClientHealth> {
        let opts = opts.clone();
        self.op(|c| async move { Ok(c.health_check(&opts).await) })
    }

    /// Whether the client can serve calls (see [`Client::health_check`]); an error only when
    /// the bridge itself cannot run the check (shut down, a forked child, a bridge thread).
    pub fn health_check(&self, opts: &Options) -> Result<ClientHealth> {
        self.bridge.wait_for(|| self.health_check_call(opts))
    }

    /// The name this client's node goes by (see [`Client::hostname`]).
    pub fn hostname(&self) -> &str {
        self.client.hostname()
    }

    /// `close` as a [`Call`].
    pub fn close_call(&self, opts: &Options) -> Call<()> {
        let opts = opts.clone();
        self.op(|c| async move { c.close(&opts).await })
    }

    /// Leaves the cluster gracefully (see [`Client::close`]).
    pub fn close(&self, opts: &Options) -> Result<()> {
        self.bridge.wait_for(|| self.close_call(opts))
    }
}
