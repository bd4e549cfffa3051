//! Calls on the store as a whole or on many keys at once: removals (one key, a batch, a
//! pattern, all), listings, counts, and the client's health.

use std::sync::atomic::Ordering;

use super::{Client, Options};
use crate::error::Result;
use crate::master::{KeyPattern, ListedObject, ReplicaList, Stats};

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
    pub async fn remove(&self, key: &str, force: bool, opts: &Options) -> Result<()> {
        self.key_call(key, opts, |m, k| async move { m.remove(&k, force).await })
            .await
    }

    /// Removes every object (`force`: leased ones too); returns how many.
    pub async fn remove_all(&self, force: bool, opts: &Options) -> Result<u64> {
        self.in_runtime(async {
            self.master(
                self.until(opts),
                |m, _| async move { m.remove_all(force).await },
                "",
            )
            .await
        })
        .await
    }

    /// Keys starting with `prefix`, sorted, at most `limit`.
    pub async fn list(
        &self,
        prefix: &str,
        limit: u64,
        opts: &Options,
    ) -> Result<Vec<ListedObject>> {
        self.in_runtime(async {
            self.master(
                self.until(opts),
                |m, p| async move { m.list(&p, limit).await },
                prefix,
            )
            .await
        })
        .await
    }

    /// The master's counts.
    pub async fn stats(&self, opts: &Options) -> Result<Stats> {
        self.in_runtime(async {
            self.master(self.until(opts), |m, _| async move { m.stats().await }, "")
                .await
        })
        .await
    }

    /// Removes each of `keys` (`force`: even those a reader holds a lease on); one outcome per
    /// key, in order.
    pub async fn batch_remove(
        &self,
        keys: &[&str],
        force: bool,
        opts: &Options,
    ) -> Result<Vec<Result<()>>> {
        self.keys_call(keys, opts, move |m, keys| async move {
            m.batch_remove(keys, force).await
        })
        .await
    }

    /// Removes every object whose key `pattern` matches somewhere (a regular expression, see
    /// [`KeyPattern`](crate::master::KeyPattern); anchor it with `^…$` for whole keys), as
    /// [`Client::remove_all`] does; returns how many. A bad pattern is `InvalidParams`.
    pub async fn remove_by_regex(&self, pattern: &str, force: bool, opts: &Options) -> Result<u64> {
        self.in_runtime(async {
            // The master's check, made here before the round trip.
            KeyPattern::new(pattern)?;
            self.master(
                self.until(opts),
                |m, p| async move { m.remove_by_regex(&p, force).await },
                pattern,
            )
            .await
        })
        .await
    }

    /// Where `key`'s replicas are, and its size: the master's answer to a read, which grants
    /// a read lease as a get does (Mooncake's `get_replica_desc`).
    pub async fn replicas(&self, key: &str, opts: &Options) -> Result<ReplicaList> {
        self.key_call(
            key,
            opts,
            |m, k| async move { m.get_replica_list(&k).await },
        )
        .await
    }

    /// [`Client::replicas`] for each of `keys`; one result per key.
    pub async fn batch_replicas(
        &self,
        keys: &[&str],
        opts: &Options,
    ) -> Result<Vec<Result<ReplicaList>>> {
        self.keys_call(keys, opts, |m, keys| async move {
            m.batch_get_replica_list(keys).await
        })
        .await
    }

    /// Whether this client can serve calls: closed, or its master unreachable (or not ready)
    /// within the call's deadline, or healthy. Never an error.
    pub async fn health_check(&self, opts: &Options) -> ClientHealth {
        if self.inner.closed.load(Ordering::Acquire) {
            return ClientHealth::Closed;
        }
        let health = self
            .in_runtime(async {
                self.master(self.until(opts), |m, _| async move { m.health().await }, "")
                    .await
            })
            .await;
        match health {
            Ok(h) if h.ready => ClientHealth::Healthy,
            _ => ClientHealth::MasterUnreachable,
        }
    }

    /// The name this client's node goes by in the cluster (its engine's name, the node of the
    /// store space it mounts): Mooncake's `get_hostname`.
    pub fn hostname(&self) -> &str {
        self.inner.engine.name()
    }
}
