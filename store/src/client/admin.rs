//! Calls on the store as a whole or on many keys at once: removals (one key, a batch, a
//! pattern, all), listings, counts, and the client's health.

use std::future::Future;
use std::sync::atomic::Ordering;

use super::{Client, Options};
use crate::error::Result;
use crate::master::{KeyPattern, ListedObject, MasterClient, ReplicaList, Stats};

/// What [`Client::health_check`] found, with Mooncake's `health_check` numbers as
/// [`ClientHealth::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientHealth {
    /// The client is open and its master answers and is ready.
    Healthy,
    /// [`Client::close`] was called.
    Closed,
    /// No master answered (or none was ready) within the call's deadline.
    MasterUnreachable,
}

impl ClientHealth {
    /// Mooncake's number: 0 healthy, 1 not set up or closed, 2 master unreachable.
    pub fn code(self) -> i32 {
        match self {
            ClientHealth::Healthy => 0,
            ClientHealth::Closed => 1,
            ClientHealth::MasterUnreachable => 2,
        }
    }
}

impl Client {
    /// Removes `key` (`force`: even while a reader holds a lease).
    pub fn remove(
        &self,
        key: impl Into<String>,
        force: bool,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let key = key.into();
        let keys = Some(vec![key.clone()]);
        let call = self.key_call(
            key,
            opts,
            move |m, k| async move { m.remove(&k, force).await },
        );
        self.forgetting(keys, call)
    }

    /// Removes every object (`force`: leased ones too); returns how many.
    pub fn remove_all(
        &self,
        force: bool,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        let call = self.master_call(opts, move |m| async move { m.remove_all(force).await });
        self.forgetting(None, call)
    }

    /// Keys starting with `prefix`, sorted, at most `limit`.
    pub fn list(
        &self,
        prefix: impl Into<String>,
        limit: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<ListedObject>>> + Send + 'static {
        let prefix = prefix.into();
        self.master_call(opts, move |m| {
            let prefix = prefix.clone();
            async move { m.list(&prefix, limit).await }
        })
    }

    /// The master's counts.
    pub fn stats(
        &self,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Stats>> + Send + 'static {
        self.master_call(opts, |m| async move { m.stats().await })
    }

    /// Removes each of `keys` (`force`: even those a reader holds a lease on); one outcome per
    /// key, in order.
    pub fn batch_remove<K: AsRef<str>>(
        &self,
        keys: &[K],
        force: bool,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        let names = Some(keys.iter().map(|k| k.as_ref().to_string()).collect());
        let call = self.keys_call(keys, opts, move |m, keys| async move {
            m.batch_remove(keys, force).await
        });
        self.forgetting(names, call)
    }

    /// Drops the replicas of `keys` on node `node` (all their replicas when `node` is empty)
    /// where nothing uses the object: no read lease, no write in progress and no access for a
    /// lease TTL; an object left with no replica is removed (Mooncake's
    /// `batch_replica_clear`). Returns the keys cleared, in order; the others are skipped.
    pub fn batch_replica_clear<K: AsRef<str>>(
        &self,
        keys: &[K],
        node: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<String>>> + Send + 'static {
        let keys: Vec<String> = keys.iter().map(|k| k.as_ref().to_string()).collect();
        let node = node.into();
        self.master_call(opts, move |m| {
            let (keys, node) = (keys.clone(), node.clone());
            async move { m.batch_replica_clear(keys, node).await }
        })
    }

    /// Removes every object whose key `pattern` matches somewhere (a regular expression, see
    /// [`KeyPattern`](crate::master::KeyPattern); anchor it with `^…$` for whole keys), as
    /// [`Client::remove_all`] does; returns how many. A bad pattern is `InvalidParams`.
    pub fn remove_by_regex(
        &self,
        pattern: impl Into<String>,
        force: bool,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        let pattern = pattern.into();
        // The master's check, made here before the round trip.
        let checked = KeyPattern::new(&pattern).map(drop);
        let call = self.master_call(opts, move |m| {
            let pattern = pattern.clone();
            async move { m.remove_by_regex(&pattern, force).await }
        });
        let call = self.forgetting(None, call);
        async move {
            checked?;
            call.await
        }
    }

    /// Where `key`'s replicas are, and its size: the master's answer to a read, which grants
    /// a read lease as a get does (Mooncake's `get_replica_desc`).
    pub fn replicas(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<ReplicaList>> + Send + 'static {
        self.key_call(
            key,
            opts,
            |m, k| async move { m.get_replica_list(&k).await },
        )
    }

    /// [`Client::replicas`] for each of `keys`; one result per key.
    pub fn batch_replicas<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<ReplicaList>>>> + Send + 'static {
        self.keys_call(keys, opts, |m, keys| async move {
            m.batch_get_replica_list(keys).await
        })
    }

    /// Whether this client can serve calls: closed, or its master unreachable (or not ready)
    /// within the call's deadline, or healthy. Never an error.
    pub fn health_check(
        &self,
        opts: impl Into<Options>,
    ) -> impl Future<Output = ClientHealth> + Send + 'static {
        let inner = self.inner.clone();
        let health = self.master_call(opts, |m| async move { m.health().await });
        async move {
            // Read when the check runs: a check made before `close` and awaited after it says
            // Closed.
            if inner.closed.load(Ordering::Acquire) {
                return ClientHealth::Closed;
            }
            match health.await {
                Ok(h) if h.ready => ClientHealth::Healthy,
                _ => ClientHealth::MasterUnreachable,
            }
        }
    }

    /// The name this client's node goes by in the cluster (its engine's name, the node of the
    /// store space it mounts): Mooncake's `get_hostname`.
    pub fn hostname(&self) -> &str {
        self.inner.engine.name()
    }

    /// One master call `f` that names no key (with failover, bounded by `opts`' deadline),
    /// inside the client's runtime.
    pub(crate) fn master_call<T, F, Fut>(
        &self,
        opts: impl Into<Options>,
        f: F,
    ) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: Fn(MasterClient) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send,
    {
        let opts = opts.into();
        self.call(move |c| async move { c.master(c.until(&opts), |m, _| f(m), "").await })
    }
}
