//! The store client for callers that are not async Rust: [`BlockingClient`], whose methods
//! carry the async API's names, arguments and results, and whose `*_call` forms return a
//! [`Call`] to wait for, hand a callback, or cancel.

use yuebing_store::{Client, ClientConfig, Options};

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::Result;

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
        let handle = bridge.handle().clone();
        let client = bridge.block_on(Client::start_on(cfg, handle))?;
        Ok(BlockingClient {
            bridge: bridge.clone(),
            client,
        })
    }

    /// The async client underneath (for its engine: register memory there).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts a call and waits for it, unless this thread must not block on the bridge (then
    /// nothing is started: [`crate::Error::WouldBlockBridge`]).
    fn blocking<T: Send + 'static>(&self, start: impl FnOnce() -> Call<T>) -> Result<T> {
        self.bridge.may_block()?;
        start().wait()
    }

    /// The bridge the client runs on.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// `put` as a [`Call`].
    pub fn put_call(&self, key: impl Into<String>, value: Vec<u8>, opts: &Options) -> Call<()> {
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge
            .call(async move { c.put(&key, &value, &opts).await })
    }

    /// Stores `value` under `key` (see [`Client::put`]).
    pub fn put(&self, key: &str, value: &[u8], opts: &Options) -> Result<()> {
        self.blocking(|| self.put_call(key, value.to_vec(), opts))
    }

    /// `get` as a [`Call`].
    pub fn get_call(&self, key: impl Into<String>, opts: &Options) -> Call<Vec<u8>> {
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge.call(async move { c.get(&key, &opts).await })
    }

    /// The value of `key` (see [`Client::get`]).
    pub fn get(&self, key: &str, opts: &Options) -> Result<Vec<u8>> {
        self.blocking(|| self.get_call(key, opts))
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
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge
            .call(async move { c.get_into(&key, addr, len, &opts).await })
    }

    /// Reads `key` into registered memory (see [`Client::get_into`]); returns its size.
    pub fn get_into(&self, key: &str, addr: u64, len: u64, opts: &Options) -> Result<u64> {
        self.blocking(|| self.get_into_call(key, addr, len, opts))
    }

    /// `put_from` as a [`Call`] (the memory is read until the call ends).
    pub fn put_from_call(
        &self,
        key: impl Into<String>,
        addr: u64,
        len: u64,
        opts: &Options,
    ) -> Call<()> {
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge
            .call(async move { c.put_from(&key, addr, len, &opts).await })
    }

    /// Stores registered memory under `key` (see [`Client::put_from`]).
    pub fn put_from(&self, key: &str, addr: u64, len: u64, opts: &Options) -> Result<()> {
        self.blocking(|| self.put_from_call(key, addr, len, opts))
    }

    /// `exist` as a [`Call`].
    pub fn exist_call(&self, key: impl Into<String>, opts: &Options) -> Call<bool> {
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge.call(async move { c.exist(&key, &opts).await })
    }

    /// Whether `key` exists (see [`Client::exist`]).
    pub fn exist(&self, key: &str, opts: &Options) -> Result<bool> {
        self.blocking(|| self.exist_call(key, opts))
    }

    /// `remove` as a [`Call`].
    pub fn remove_call(&self, key: impl Into<String>, force: bool, opts: &Options) -> Call<()> {
        let (c, key, opts) = (self.client.clone(), key.into(), opts.clone());
        self.bridge
            .call(async move { c.remove(&key, force, &opts).await })
    }

    /// Removes `key` (see [`Client::remove`]).
    pub fn remove(&self, key: &str, force: bool, opts: &Options) -> Result<()> {
        self.blocking(|| self.remove_call(key, force, opts))
    }

    /// Leaves the cluster gracefully (see [`Client::close`]).
    pub fn close(&self, opts: &Options) -> Result<()> {
        let (c, opts) = (self.client.clone(), opts.clone());
        self.bridge.block_on(async move { c.close(&opts).await })
    }
}
