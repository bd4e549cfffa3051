//! Load balancing over several endpoints of one service.
//!
//! Each call goes to one endpoint chosen by the [`Strategy`] among those not backing off. An
//! endpoint whose try failed at the connection level backs off exponentially (100 ms doubling,
//! up to 5 s); when its back-off has passed it is tried again (re-probed), and one success clears
//! it. When every endpoint backs off, the one due first is probed. A failed try moves to another
//! endpoint when the request was provably not executed, or when the call is idempotent.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tarpc::client::RpcError;

use super::config::{CallOptions, PoolConfig};
use super::pool::Pool;
use super::registry::PoolRegistry;
use super::ServiceClient;
use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::metrics::Metrics;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a [`Balancer`] chooses an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Each endpoint in turn.
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// The endpoint with the fewest calls in flight from this balancer's pools.
    LeastInFlight,
}

#[derive(Debug, Default)]
struct Health {
    failures: u32,
    retry_at: Option<Instant>,
}

struct Member<C: ServiceClient> {
    pool: Pool<C>,
    health: Mutex<Health>,
}

impl<C: ServiceClient> Member<C> {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failed(&self, now: Instant) {
        let mut h = self.health();
        h.failures = h.failures.saturating_add(1);
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << (h.failures - 1).min(10))
            .min(MAX_BACKOFF);
        h.retry_at = Some(crate::clock::after(now, backoff));
        tracing::debug!(endpoint = %self.pool.endpoint(), failures = h.failures, ?backoff, "endpoint backing off");
    }

    fn succeeded(&self) {
        *self.health() = Health::default();
    }

    /// `None` when usable now, else when it may be probed.
    fn backing_off(&self, now: Instant) -> Option<Instant> {
        self.health().retry_at.filter(|&t| t > now)
    }
}

/// Spreads calls over several endpoints of one service.
pub struct Balancer<C: ServiceClient> {
    members: Vec<Member<C>>,
    strategy: Strategy,
    config: PoolConfig,
    rr: AtomicUsize,
    metrics: Metrics,
}

impl<C: ServiceClient> std::fmt::Debug for Balancer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let eps: Vec<_> = self
            .members
            .iter()
            .map(|m| m.pool.endpoint().clone())
            .collect();
        f.debug_struct("Balancer")
            .field("endpoints", &eps)
            .field("strategy", &self.strategy)
            .finish()
    }
}

impl<C: ServiceClient> Balancer<C> {
    /// A balancer with its own pools (on the current runtime), all using `config`.
    ///
    /// # Panics
    /// Outside a tokio runtime; build the pools with a registry made by
    /// [`PoolRegistry::new_on`] and use [`Balancer::with_registry`] there.
    pub fn new(
        endpoints: Vec<Endpoint>,
        config: PoolConfig,
        strategy: Strategy,
    ) -> Result<Self, Error> {
        let pools = endpoints
            .into_iter()
            .map(|e| Pool::new(e, config.clone()))
            .collect();
        Self::over(pools, config, strategy)
    }

    /// A balancer whose pools come from (and stay shared with) `registry`.
    pub fn with_registry(
        registry: &PoolRegistry<C>,
        endpoints: &[Endpoint],
        config: PoolConfig,
        strategy: Strategy,
    ) -> Result<Self, Error> {
        let pools = endpoints.iter().map(|e| registry.get(e)).collect();
        Self::over(pools, config, strategy)
    }

    fn over(pools: Vec<Pool<C>>, config: PoolConfig, strategy: Strategy) -> Result<Self, Error> {
        if pools.is_empty() {
            return Err(Error::NoEndpoint {
                reason: "the endpoint list is empty".into(),
            });
        }
        Ok(Balancer {
            members: pools
                .into_iter()
                .map(|pool| Member {
                    pool,
                    health: Mutex::new(Health::default()),
                })
                .collect(),
            strategy,
            config,
            rr: AtomicUsize::new(0),
            metrics: Metrics::default(),
        })
    }

    /// The pools, one per endpoint, in the order given.
    pub fn pools(&self) -> impl Iterator<Item = &Pool<C>> {
        self.members.iter().map(|m| &m.pool)
    }

    /// Per-method statistics of calls made through this balancer.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Calls `f` on one endpoint with the default options (see [`Pool::call`]).
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        self.call_with(CallOptions::default(), f).await
    }

    /// Calls `f` on one endpoint, moving to another when a try fails and may be repeated. It
    /// may be awaited from anywhere: it runs inside the first pool's runtime (a balancer's pools
    /// come from one registry, or are made on one runtime).
    pub async fn call_with<T, F, Fut>(&self, opts: CallOptions, f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let handle = self.members[0].pool.handle().clone();
        crate::entered::in_runtime(&handle, self.call_here(opts, f)).await
    }

    async fn call_here<T, F, Fut>(&self, opts: CallOptions, mut f: F) -> Result<T, Error>
    where
        F: FnMut(C, tarpc::context::Context) -> Fut,
        Fut: Future<Output = Result<T, RpcError>>,
    {
        let now = crate::clock::now();
        let deadline =
            crate::clock::after(now, opts.timeout.unwrap_or(self.config.default_timeout));
        let idempotent = opts.is_idempotent_for(&self.config);
        let max_tries = self.config.max_retries as usize + self.members.len();
        let mut record = self.metrics.record(opts.method.unwrap_or("call"), now);
        let mut tries = 0;
        let result = loop {
            let now = crate::clock::now();
            let member = &self.members[self.pick(now)];
            member.pool.touch(now);
            match member.pool.attempt(&mut f, deadline, idempotent).await {
                Ok(v) => {
                    member.succeeded();
                    break Ok(v);
                }
                Err(fail) => {
                    if is_endpoint_failure(&fail.err) {
                        member.failed(crate::clock::now());
                    }
                    tries += 1;
                    if !fail.may_retry(idempotent)
                        || tries >= max_tries
                        || crate::clock::now() >= deadline
                    {
                        break Err(fail.err);
                    }
                    tracing::debug!(endpoint = %member.pool.endpoint(), error = %fail.err, "trying another endpoint");
                    if self.all_backing_off(crate::clock::now()) {
                        let pause = self.config.backoff(tries as u32);
                        if crate::clock::now() + pause >= deadline {
                            break Err(fail.err);
                        }
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        };
        record.set(&result);
        result
    }

    fn all_backing_off(&self, now: Instant) -> bool {
        self.members.iter().all(|m| m.backing_off(now).is_some())
    }

    /// Index of the endpoint for the next try.
    fn pick(&self, now: Instant) -> usize {
        let usable: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].backing_off(now).is_none())
            .collect();
        if usable.is_empty() {
            // Everyone backs off: probe the one due first.
            return (0..self.members.len())
                .min_by_key(|&i| self.members[i].backing_off(now))
                .unwrap_or(0);
        }
        match self.strategy {
            Strategy::RoundRobin => usable[self.rr.fetch_add(1, Ordering::Relaxed) % usable.len()],
            Strategy::Random => usable[fastrand::usize(..usable.len())],
            Strategy::LeastInFlight => {
                let start = self.rr.fetch_add(1, Ordering::Relaxed);
                let n = usable.len();
                (0..n)
                    .map(|k| usable[(start + k) % n])
                    .min_by_key(|&i| self.members[i].pool.in_flight())
                    .unwrap_or(usable[0])
            }
        }
    }
}

/// Errors that say the endpoint itself is unwell (rather than this one request).
fn is_endpoint_failure(err: &Error) -> bool {
    matches!(
        err,
        Error::Connect { .. } | Error::ConnectionLost { .. } | Error::ShuttingDown
    )
}
