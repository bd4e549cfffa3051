//! A registry of pools keyed by endpoint (coro_io's `client_pools`); idle pools are dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;

use super::config::PoolConfig;
use super::pool::Pool;
use super::ServiceClient;
use crate::endpoint::Endpoint;

struct Inner<C: ServiceClient> {
    pools: Mutex<HashMap<Endpoint, Pool<C>>>,
    config: PoolConfig,
    handle: Handle,
    idle_after: Duration,
}

/// One [`Pool`] per endpoint, made on first use and dropped after `idle_after` without calls.
/// Cheap to clone; the background sweeper stops when the last clone is dropped.
pub struct PoolRegistry<C: ServiceClient> {
    inner: Arc<Inner<C>>,
}

impl<C: ServiceClient> Clone for PoolRegistry<C> {
    fn clone(&self) -> Self {
        PoolRegistry {
            inner: self.inner.clone(),
        }
    }
}

impl<C: ServiceClient> std::fmt::Debug for PoolRegistry<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRegistry")
            .field("pools", &self.len())
            .finish()
    }
}

impl<C: ServiceClient> PoolRegistry<C> {
    /// A registry on the current runtime; every pool uses `config`.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`PoolRegistry::new_on`] there.
    pub fn new(config: PoolConfig, idle_after: Duration) -> Self {
        Self::new_on(config, idle_after, Handle::current())
    }

    /// A registry whose pools and sweeper run on `handle`.
    pub fn new_on(config: PoolConfig, idle_after: Duration, handle: Handle) -> Self {
        let inner = Arc::new(Inner {
            pools: Mutex::new(HashMap::new()),
            config,
            handle: handle.clone(),
            idle_after,
        });
        let weak = Arc::downgrade(&inner);
        let period = (idle_after / 2).max(Duration::from_millis(10));
        handle.spawn(sweeper(weak, period));
        PoolRegistry { inner }
    }

    /// The pool for `endpoint`, made now if there is none.
    pub fn get(&self, endpoint: &Endpoint) -> Pool<C> {
        let mut pools = self.lock();
        pools
            .entry(endpoint.clone())
            .or_insert_with(|| {
                Pool::new_on(
                    endpoint.clone(),
                    self.inner.config.clone(),
                    self.inner.handle.clone(),
                )
            })
            .clone()
    }

    /// Drops the pools idle for `idle_after` with no call in flight; returns how many.
    pub fn sweep(&self) -> usize {
        sweep(&self.inner)
    }

    /// Number of pools held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no pool is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Endpoint, Pool<C>>> {
        self.inner.pools.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn sweep<C: ServiceClient>(inner: &Inner<C>) -> usize {
    let mut pools = inner.pools.lock().unwrap_or_else(|p| p.into_inner());
    let before = pools.len();
    pools.retain(|_, p| p.in_flight() > 0 || p.idle_for() < inner.idle_after);
    before - pools.len()
}

async fn sweeper<C: ServiceClient>(inner: Weak<Inner<C>>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let dropped = sweep(&inner);
        if dropped > 0 {
            tracing::debug!(dropped, "dropped idle pools");
        }
    }
}
