//! [`EtcdMetadata`]: segment descriptors in etcd, each on a lease its publisher keeps alive.
//!
//! The descriptor of segment `name` is the JSON of [`SegmentDescriptor`] at
//! `<prefix>/<cluster>/segments/<name>` ([`Keys::segment`]), attached to an etcd lease of the
//! TTL given to `put`. A task on the store's runtime keeps that lease alive (about every TTL/3,
//! `keeper`); when the store is dropped, or its process dies, nothing refreshes the
//! lease and etcd deletes the descriptor about one TTL later. A lease that expired while the
//! store lived (etcd unreachable for longer than the TTL) is replaced by the keeper, which puts
//! the last descriptor again under a new one.
//!
//! `get` tries again while etcd is briefly unavailable (a leader election), within the request
//! timeout; other calls fail with a typed error at once, and the caller decides.
//!
//! One store owns a name: a put of the same name by two stores leaves the key on the lease of
//! the later one.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetResponse, PutOptions, Txn, TxnOp};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::FutureExt;
use tokio::runtime::Handle;
use yuebing_engine::{MetadataStore, SegmentDescriptor};

use crate::config::{EtcdConfig, Keys};
use crate::error::{Error, Result};
use crate::keeper::{self, Granted};
use crate::task::Task;
use crate::watch::Watcher;

/// Segment descriptors in etcd (see the module documentation). `Send + Sync`; share it in an
/// `Arc`. Its connections and keep-alive tasks live on the runtime it was made for; its calls
/// may be awaited on any tokio runtime. Dropping it stops its keep-alive tasks, so its
/// descriptors expire.
pub struct EtcdMetadata {
    inner: Arc<Inner>,
}

/// What the store and its keep-alive tasks share.
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) handle: Handle,
    pub(crate) timeout: Duration,
    /// The descriptors this store put, by name; a put or remove holds it across its etcd
    /// calls, so that calls on one store apply in order.
    pub(crate) published: tokio::sync::Mutex<HashMap<String, Publication>>,
}

/// One descriptor this store keeps alive.
pub(crate) struct Publication {
    /// The lease its key is attached to.
    pub(crate) lease: i64,
    /// The TTL asked for, in seconds.
    pub(crate) ttl: i64,
    /// The JSON put last (put again when the lease has to be replaced).
    pub(crate) value: Vec<u8>,
    /// The task that keeps the lease alive; stops when this is dropped.
    pub(crate) _keeper: Task,
}

impl std::fmt::Debug for EtcdMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMetadata")
            .field("root", &self.inner.keys.root())
            .finish_non_exhaustive()
    }
}

impl EtcdMetadata {
    /// A store for `config`'s cluster whose connections and tasks live on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`EtcdMetadata::connect_on`] there.
    pub async fn connect(config: &EtcdConfig) -> Result<Self> {
        Self::connect_on(config, Handle::current()).await
    }

    /// A store for `config`'s cluster whose connections and tasks live on `handle`'s runtime.
    /// Connections are made lazily (see [`EtcdConfig::connect_on`]).
    pub async fn connect_on(config: &EtcdConfig, handle: Handle) -> Result<Self> {
        let client = config.connect_on(&handle).await?;
        Self::with_client(client, config, handle)
    }

    /// A store on an existing client (made by [`EtcdConfig::connect_on`] on `handle`), using
    /// `config`'s keys and request timeout.
    pub fn with_client(client: Client, config: &EtcdConfig, handle: Handle) -> Result<Self> {
        Ok(EtcdMetadata {
            inner: Arc::new(Inner {
                client,
                keys: config.keys()?,
                handle,
                timeout: config.request_timeout,
                published: tokio::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Where this store's keys live.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The current descriptor of `name`.
    async fn get_descriptor(&self, name: &str) -> Result<SegmentDescriptor, yuebing_engine::Error> {
        let not_found = || yuebing_engine::Error::SegmentNotFound {
            name: name.to_string(),
        };
        if name.is_empty() {
            return Err(not_found());
        }
        let key = self.inner.keys.segment(name);
        let resp = read(&self.inner.client, &key, self.inner.timeout).await?;
        match resp.kvs().first() {
            Some(found) => decode(&key, name, found.value()),
            None => Err(not_found()),
        }
    }

    async fn put_descriptor(
        &self,
        d: &SegmentDescriptor,
        ttl: Duration,
    ) -> Result<(), yuebing_engine::Error> {
        if d.name.is_empty() {
            return Err(invalid("a segment descriptor without a name".into()));
        }
        let ttl = ttl_seconds(ttl)?;
        let key = self.inner.keys.segment(&d.name);
        let value = d.to_json();
        let mut published = self.inner.published.lock().await;
        if let Some(p) = published.get_mut(&d.name) {
            if p.ttl == ttl {
                match self.inner.put(&key, &value, p.lease).await {
                    Ok(()) => {
                        p.value = value;
                        return Ok(());
                    }
                    // The lease expired meanwhile: a new one below.
                    Err(Error::LeaseNotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let granted = self.inner.grant_and_put(&key, &value, ttl).await?;
        let keeper = keeper::spawn(&self.inner, d.name.clone(), granted);
        let old = published.insert(
            d.name.clone(),
            Publication {
                lease: granted.id,
                ttl,
                value,
                _keeper: keeper,
            },
        );
        drop(published);
        // Dropping the old publication stops its keeper. Its key moved to the new lease: the
        // old one holds nothing of ours any more.
        if let Some(lease) = old.map(|p| p.lease) {
            self.inner.revoke(lease).await;
        }
        Ok(())
    }

    async fn remove_descriptor(&self, name: &str) -> Result<()> {
        if name.is_empty() {
            return Ok(());
        }
        let key = self.inner.keys.segment(name);
        let mut published = self.inner.published.lock().await;
        // Dropping the publication stops its keeper: should the delete below fail, the
        // descriptor still goes when its lease expires.
        let publication = published.remove(name);
        let mut kv = self.inner.client.kv_client();
        match &publication {
            // Ours: deleted only while it is still on our lease, so that a late remove never
            // deletes what another store (an engine restarted under the same name) put since.
            Some(p) => {
                let txn = Txn::new()
                    .when([Compare::lease(key.as_str(), CompareOp::Equal, p.lease)])
                    .and_then([TxnOp::delete(key.as_str(), None)]);
                self.inner.call("delete", kv.txn(txn)).await?;
            }
            None => {
                self.inner
                    .call("delete", kv.delete(key.as_str(), None))
                    .await?;
            }
        }
        if let Some(p) = publication {
            self.inner.revoke(p.lease).await;
        }
        Ok(())
    }
}

impl Inner {
    /// `request` within the request timeout, its error typed.
    pub(crate) async fn call<T>(
        &self,
        op: &str,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        timed(self.timeout, op, request).await
    }

    /// Puts `value` at `key` on `lease`.
    pub(crate) async fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<()> {
        let mut kv = self.client.kv_client();
        let options = PutOptions::new().with_lease(lease);
        match tokio::time::timeout(self.timeout, kv.put(key, value, Some(options))).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if Error::is_lease_not_found(&e) => Err(Error::LeaseNotFound { lease }),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(Error::Timeout {
                op: "put".into(),
                after: self.timeout,
            }),
        }
    }

    /// Grants a lease of `ttl` seconds and puts `value` at `key` on it.
    pub(crate) async fn grant_and_put(&self, key: &str, value: &[u8], ttl: i64) -> Result<Granted> {
        let mut leases = self.client.lease_client();
        let resp = self.call("lease grant", leases.grant(ttl, None)).await?;
        let granted = Granted {
            id: resp.id(),
            ttl: resp.ttl(),
        };
        if granted.ttl <= 0 {
            return Err(Error::Rejected {
                reason: format!(
                    "etcd granted lease {:#x} a TTL of {}",
                    granted.id, granted.ttl
                ),
            });
        }
        if let Err(e) = self.put(key, value, granted.id).await {
            self.revoke(granted.id).await;
            return Err(e);
        }
        Ok(granted)
    }

    /// Revokes `lease`, best effort: a lease that cannot be revoked expires by itself.
    pub(crate) async fn revoke(&self, lease: i64) {
        let mut leases = self.client.lease_client();
        match tokio::time::timeout(self.timeout, leases.revoke(lease)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if Error::is_lease_not_found(&e) => {}
            Ok(Err(e)) => tracing::debug!(lease, error = %e, "lease not revoked; it will expire"),
            Err(_) => tracing::debug!(lease, "lease revoke timed out; it will expire"),
        }
    }
}

/// `request` within `timeout`, its error typed.
pub(crate) async fn timed<T>(
    timeout: Duration,
    op: &str,
    request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, request).await {
        Ok(result) => result.map_err(Error::from),
        Err(_) => Err(Error::Timeout {
            op: op.to_string(),
            after: timeout,
        }),
    }
}

/// Reads `key`, trying again while etcd is briefly unavailable (a leader election, a member
/// gone that the client has not given up yet) until `timeout` has passed in all.
pub(crate) async fn read(client: &Client, key: &str, timeout: Duration) -> Result<GetResponse> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut kv = client.kv_client();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match timed(left, "get", kv.get(key, None)).await {
            Err(Error::Unavailable { .. }) if left > READ_RETRY_PAUSE => {
                tokio::time::sleep(READ_RETRY_PAUSE).await;
            }
            Err(Error::Timeout { op, .. }) => return Err(Error::Timeout { op, after: timeout }),
            other => return other,
        }
    }
}

/// The pause between reads while etcd is unavailable.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(100);

fn invalid(reason: String) -> yuebing_engine::Error {
    yuebing_engine::Error::InvalidArgument { reason }
}

/// Decodes the descriptor stored at `key` for segment `name`: a value that is no descriptor of
/// that name is [`Error::BadValue`]; one of another format version keeps the engine's
/// `VersionMismatch`.
pub(crate) fn decode(
    key: &str,
    name: &str,
    value: &[u8],
) -> Result<SegmentDescriptor, yuebing_engine::Error> {
    let bad = |reason: String| -> yuebing_engine::Error {
        Error::BadValue {
            key: key.to_string(),
            reason,
        }
        .into()
    };
    match SegmentDescriptor::from_json(value) {
        Ok(d) if d.name == name => Ok(d),
        Ok(d) => Err(bad(format!("the descriptor is named {:?}", d.name))),
        Err(e @ yuebing_engine::Error::VersionMismatch { .. }) => Err(e),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// A TTL in whole seconds for etcd, rounded up; zero is refused.
fn ttl_seconds(ttl: Duration) -> Result<i64, yuebing_engine::Error> {
    if ttl.is_zero() {
        return Err(invalid("a descriptor's TTL must be positive".into()));
    }
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(secs).map_err(|_| invalid(format!("TTL {ttl:?} is too long for etcd")))
}

impl MetadataStore for EtcdMetadata {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<SegmentDescriptor, yuebing_engine::Error>> {
        self.get_descriptor(name).boxed()
    }

    fn put<'a>(
        &'a self,
        descriptor: &'a SegmentDescriptor,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), yuebing_engine::Error>> {
        self.put_descriptor(descriptor, ttl).boxed()
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), yuebing_engine::Error>> {
        async move { Ok(self.remove_descriptor(name).await?) }.boxed()
    }

    fn watch<'a>(
        &'a self,
        name: &'a str,
    ) -> Option<BoxStream<'a, Result<Option<SegmentDescriptor>, yuebing_engine::Error>>> {
        let watcher = Watcher::new(
            self.inner.client.clone(),
            self.inner.keys.segment(name),
            name.to_string(),
            self.inner.timeout,
        );
        Some(watcher.into_stream())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_seconds(Duration::from_secs(2)).unwrap(), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(2001)).unwrap(), 3);
        assert_eq!(ttl_seconds(Duration::ZERO).unwrap_err().code(), -3001);
        assert_eq!(ttl_seconds(Duration::MAX).unwrap_err().code(), -3001);
    }

    #[test]
    fn values_that_are_no_descriptor_of_that_name_are_typed_errors() {
        let key = "/yuebing/c/segments/a";
        for value in [&b""[..], b"\xff\x00", b"{}", b"[1,2]", b"{\"version\":2}"] {
            let err = decode(key, "a", value).unwrap_err();
            assert_eq!(err.code(), -5009, "{value:?}: {err}");
        }
        let other = SegmentDescriptor::new("b", "b", 1).to_json();
        assert_eq!(decode(key, "a", &other).unwrap_err().code(), -5009);
        let mut v: serde_json::Value = serde_json::from_slice(&other).unwrap();
        v["version"] = 99.into();
        v["name"] = "a".into();
        let err = decode(key, "a", &serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(err.code(), -3508, "another version: {err}");
        let ok = SegmentDescriptor::new("a", "a", 7);
        assert_eq!(decode(key, "a", &ok.to_json()).unwrap(), ok);
    }
}
