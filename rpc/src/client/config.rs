//! Client settings and per-call options, with their defaults in one place.

use std::collections::HashSet;
use std::time::Duration;

use crate::server::DEFAULT_MAX_FRAME;

/// How a [`Pool`](crate::Pool) connects and calls.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The service to ask for in the preamble.
    pub service: String,
    /// The cluster token to present, if the servers require one.
    pub token: Option<crate::Token>,
    /// Most connections the pool keeps to one endpoint.
    pub max_connections: usize,
    /// Connections opened ahead of demand (pre-warm) and kept.
    pub min_connections: usize,
    /// Calls per connection (in flight, or waiting for it to open) from which the pool opens
    /// another connection (up to `max_connections`). A call that finds every open connection
    /// carrying at least this many is sent on the least-loaded one while the pool opens
    /// another in the background (one at a time; none for `max_backoff` after one failed). On
    /// a cold pool, a call that finds every connection being opened carrying this many opens
    /// another and waits for it, as do the calls after it until the new one carries as many.
    pub grow_threshold: usize,
    /// Largest response frame accepted.
    pub max_frame: u64,
    /// Longest a connect plus preamble may take.
    pub connect_timeout: Duration,
    /// Deadline of a call that sets none.
    pub default_timeout: Duration,
    /// Methods that may be sent again after a connection broke mid-call.
    pub idempotent_methods: HashSet<String>,
    /// Most times one call is sent again after a failed try. Not counted: the one resend on a
    /// fresh connection of a call that met a stale pooled connection (see
    /// [`Pool::call_with`](crate::Pool::call_with)).
    pub max_retries: u32,
    /// First back-off between tries; doubles each time, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest back-off between tries; also how long the pool stops growing in the background
    /// after a connect failed while other connections were open.
    pub max_backoff: Duration,
    /// Where the calls' statistics are exported (`yuebing_rpc_client_*`, the methods of
    /// `service`); off by default.
    pub metrics: crate::MetricsSink,
}

impl PoolConfig {
    /// Defaults for the service `service`.
    pub fn new(service: impl Into<String>) -> Self {
        PoolConfig {
            service: service.into(),
            token: None,
            max_connections: 4,
            min_connections: 0,
            grow_threshold: 64,
            max_frame: DEFAULT_MAX_FRAME,
            connect_timeout: Duration::from_secs(3),
            default_timeout: Duration::from_secs(10),
            idempotent_methods: HashSet::new(),
            max_retries: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            metrics: crate::MetricsSink::off(),
        }
    }

    /// Declares methods idempotent (safe to send again).
    pub fn idempotent<I, S>(mut self, methods: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.idempotent_methods
            .extend(methods.into_iter().map(Into::into));
        self
    }

    /// The back-off before try number `attempt` (1-based), with ±25 % jitter.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_backoff);
        base.mul_f64(0.75 + fastrand::f64() * 0.5)
    }
}

/// Options of one call.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The call's deadline, from now; default [`PoolConfig::default_timeout`].
    pub timeout: Option<Duration>,
    /// The method's name: selects its idempotency declaration and its metrics row.
    pub method: Option<&'static str>,
    /// Overrides the method's idempotency declaration for this call.
    pub idempotent: Option<bool>,
}

impl CallOptions {
    /// Options for a call to `method`.
    pub fn method(method: &'static str) -> Self {
        CallOptions {
            method: Some(method),
            ..CallOptions::default()
        }
    }

    /// Sets the deadline, from now.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Marks this call idempotent (or not), whatever its method declares.
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = Some(yes);
        self
    }

    /// Whether this call may be sent again after it may have been executed: the per-call
    /// override if set, else the method's declaration in `cfg`.
    pub fn is_idempotent_for(&self, cfg: &PoolConfig) -> bool {
        self.idempotent.unwrap_or_else(|| {
            self.method
                .is_some_and(|m| cfg.idempotent_methods.contains(m))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_is_declared_per_method_and_overridable() {
        let cfg = PoolConfig::new("kv").idempotent(["get"]);
        assert!(CallOptions::method("get").is_idempotent_for(&cfg));
        assert!(!CallOptions::method("put").is_idempotent_for(&cfg));
        assert!(!CallOptions::default().is_idempotent_for(&cfg));
        assert!(CallOptions::method("put")
            .idempotent(true)
            .is_idempotent_for(&cfg));
        assert!(!CallOptions::method("get")
            .idempotent(false)
            .is_idempotent_for(&cfg));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let cfg = PoolConfig::new("kv");
        let b1 = cfg.backoff(1);
        assert!(b1 >= Duration::from_micros(7500) && b1 <= Duration::from_micros(12500));
        assert!(cfg.backoff(3) > cfg.backoff(1));
        assert!(cfg.backoff(30) <= cfg.max_backoff.mul_f64(1.25));
    }
}
