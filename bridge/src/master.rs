//! The master's own calls for callers that are not async Rust: [`BlockingMaster`], a pooled
//! connection to one master for `health` and `stats`.

use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{ClientId, Health, MasterClient, Stats};

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::Result;

/// A connection pool to one master on a [`Bridge`]'s runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct BlockingMaster {
    bridge: Bridge,
    master: MasterClient,
}

impl BlockingMaster {
    /// A client of the master at `endpoint` (connections open on first use), presenting
    /// `token` if the cluster has one.
    pub fn connect(bridge: &Bridge, endpoint: Endpoint, token: Option<Token>) -> Result<Self> {
        bridge.usable()?;
        let handle = bridge.handle().clone();
        // Health and stats act for no client: the id only names the caller in the master's logs.
        let master = MasterClient::with_token(endpoint, ClientId(0), token, handle);
        Ok(BlockingMaster {
            bridge: bridge.clone(),
            master,
        })
    }

    /// The async master client underneath (for async callers sharing its connections).
    pub fn master(&self) -> &MasterClient {
        &self.master
    }

    /// The bridge the connection runs on.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// `health`'s work, to run on the bridge.
    pub(crate) fn health_future(
        &self,
    ) -> impl std::future::Future<Output = yuebing_store::Result<Health>> + Send + 'static {
        let m = self.master.clone();
        async move { m.health().await }
    }

    /// `stats`' work, to run on the bridge.
    pub(crate) fn stats_future(
        &self,
    ) -> impl std::future::Future<Output = yuebing_store::Result<Stats>> + Send + 'static {
        let m = self.master.clone();
        async move { m.stats().await }
    }

    /// `health` as a [`Call`].
    pub fn health_call(&self) -> Call<Health> {
        self.bridge.call(self.health_future())
    }

    /// The master's readiness (a no-op call: the bridge's round-trip cost).
    pub fn health(&self) -> Result<Health> {
        self.bridge.block_on(self.health_future())
    }

    /// `stats` as a [`Call`].
    pub fn stats_call(&self) -> Call<Stats> {
        self.bridge.call(self.stats_future())
    }

    /// The master's counts.
    pub fn stats(&self) -> Result<Stats> {
        self.bridge.block_on(self.stats_future())
    }
}
