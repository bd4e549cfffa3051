//! Which master a call goes to: a fixed list tried in order (failover, not load balancing),
//! or, in HA mode, the leader that a watched source names (an etcd election), re-targeted as
//! it changes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::watch;
use yuebing_rpc::{Endpoint, Token};

use crate::error::{Error, Result};
use crate::master::{ClientId, MasterClient};
use yuebing_rpc::MetricsSink;

/// The masters a client knows, and which one answered last.
#[derive(Debug)]
pub(crate) struct Masters {
    clients: Vec<MasterClient>,
    current: AtomicUsize,
    leader: Option<Leader>,
}

/// HA mode: the leader's address as its source reports it, and a client per address seen.
#[derive(Debug)]
struct Leader {
    source: watch::Receiver<Option<Endpoint>>,
    clients: Mutex<HashMap<Endpoint, MasterClient>>,
    /// The leader calls went to last, and when that changed.
    seen: Mutex<(Option<Endpoint>, Option<Instant>)>,
    id: ClientId,
    token: Option<Token>,
    metrics: MetricsSink,
    handle: tokio::runtime::Handle,
}

/// How long after a change of leader a call that found no store space or an unreadable
/// replica is made again: the new leader counts a client's space only once that client
/// remounted it (at its next heartbeat), so for a moment it sees too little space and replicas
/// it cannot read yet.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `e` may only mean that the nodes have not remounted with a new leader yet. Both
/// leave nothing behind (no space was taken, nothing was read), so the call may be made again.
fn remount_pending(e: &Error) -> bool {
    matches!(
        e,
        Error::NoAvailableHandle { .. } | Error::ReplicaNotReady { .. }
    ) || matches!(
        e,
        Error::Remote {
            code: -200 | -703,
            ..
        }
    )
}

/// Whether an error says the call certainly did not run on that master (so it may go to
/// another, even if it is not idempotent).
fn not_run(e: &Error) -> bool {
    match e {
        Error::Rpc(e) => e.never_executed(),
        Error::NotLeader { .. } => true,
        _ => false,
    }
}

impl Masters {
    /// The masters at `endpoints`, tried in order; with `leader`, the one it names instead
    /// (the list is then tried only while it names none).
    pub(crate) fn new(
        endpoints: &[Endpoint],
        leader: Option<watch::Receiver<Option<Endpoint>>>,
        id: ClientId,
        token: Option<&Token>,
        metrics: &MetricsSink,
        handle: &tokio::runtime::Handle,
    ) -> Result<Masters> {
        if endpoints.is_empty() && leader.is_none() {
            return Err(Error::params("no master address"));
        }
        Ok(Masters {
            clients: endpoints
                .iter()
                .map(|e| {
                    MasterClient::configured(
                        e.clone(),
                        id,
                        token.cloned(),
                        metrics.clone(),
                        handle.clone(),
                    )
                })
                .collect(),
            current: AtomicUsize::new(0),
            leader: leader.map(|source| Leader {
                source,
                clients: Mutex::new(HashMap::new()),
                seen: Mutex::new((None, None)),
                id,
                token: token.cloned(),
                metrics: metrics.clone(),
                handle: handle.clone(),
            }),
        })
    }

    /// Runs `f` on the master to call, until `until`. In HA mode that is the current leader;
    /// a call that certainly did not run there (unreachable, shutting down, not the leader)
    /// waits for the next leader and runs there. Otherwise the list in order: a call that
    /// certainly did not run goes to the next master, once around. A call whose fate is
    /// unknown is never sent again.
    pub(crate) async fn call<T, F, Fut>(&self, until: Instant, f: F) -> Result<T>
    where
        F: Fn(MasterClient) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match &self.leader {
            Some(leader) => self.call_leader(leader, until, f).await,
            None => self.call_list(f).await,
        }
    }

    async fn call_list<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(MasterClient) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let n = self.clients.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            match f(self.clients[at].clone()).await {
                Err(e) if not_run(&e) => {
                    tracing::debug!(master = at, error = %e, "master did not take the call, trying the next");
                    last = Some(e);
                }
                other => {
                    if at != first {
                        self.current.store(at, Ordering::Relaxed);
                        tracing::info!(master = at, "failed over to another master");
                    }
                    return other;
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::params("no master address")))
    }

    async fn call_leader<T, F, Fut>(&self, leader: &Leader, until: Instant, f: F) -> Result<T>
    where
        F: Fn(MasterClient) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut source = leader.source.clone();
        let mut last = None;
        let mut tries = 0u32;
        loop {
            let named = source.borrow_and_update().clone();
            let settling = named.as_ref().is_some_and(|e| leader.settling(e));
            let outcome = match named {
                Some(endpoint) => Some(f(leader.client(&endpoint)).await),
                None if !self.clients.is_empty() => Some(self.call_list(&f).await),
                None => None,
            };
            match outcome {
                Some(Err(e)) if not_run(&e) => last = Some(e),
                Some(Err(e)) if settling && remount_pending(&e) => {
                    tracing::debug!(error = %e, "the new leader does not count every node's space yet; trying again");
                    last = Some(e);
                }
                Some(done) => return done,
                None => {}
            }
            // Wait for the source to name another leader, or a little (the one it names may
            // still be catching up after its election), within the call's deadline.
            let pause = BACKOFF_MIN
                .saturating_mul(1 << tries.min(4))
                .min(BACKOFF_MAX);
            tries += 1;
            let deadline = tokio::time::Instant::from_std(until);
            let wake = tokio::time::Instant::now() + pause;
            let source_alive = tokio::select! {
                changed = source.changed() => changed.is_ok(),
                _ = tokio::time::sleep_until(wake.min(deadline)) => true,
            };
            if !source_alive {
                if named_none(&source) {
                    // The source is gone and names no one: nothing to wait for.
                    return Err(last.unwrap_or(Error::NotLeader { leader: None }));
                }
                tokio::time::sleep_until(wake.min(deadline)).await;
            }
            if Instant::now() >= until {
                return Err(last.unwrap_or(Error::NotLeader { leader: None }));
            }
        }
    }
}

/// The first pause before a call goes again to the leader (doubling up to [`BACKOFF_MAX`]).
const BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(25);
/// The longest pause between tries while no leader takes the call.
const BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(400);

fn named_none(source: &watch::Receiver<Option<Endpoint>>) -> bool {
    source.borrow().is_none()
}

impl Leader {
    /// Records that calls go to `endpoint` now; whether that leader took over less than
    /// [`SETTLE`] ago (from another one this client called).
    fn settling(&self, endpoint: &Endpoint) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match &seen.0 {
            Some(last) if last != endpoint => *seen = (Some(endpoint.clone()), Some(now)),
            Some(_) => {}
            None => seen.0 = Some(endpoint.clone()),
        }
        seen.1.is_some_and(|at| now.duration_since(at) < SETTLE)
    }

    /// The client of the master at `endpoint` (made on first use, then kept: a leader that
    /// comes back keeps its pool).
    fn client(&self, endpoint: &Endpoint) -> MasterClient {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .entry(endpoint.clone())
            .or_insert_with(|| {
                MasterClient::configured(
                    endpoint.clone(),
                    self.id,
                    self.token.clone(),
                    self.metrics.clone(),
                    self.handle.clone(),
                )
            })
            .clone()
    }
}
