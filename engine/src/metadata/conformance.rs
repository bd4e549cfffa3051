//! The conformance suite every [`MetadataStore`] passes (feature `testing`).
//!
//! Each property is an async function over a [`Backend`]: the backend's test file says how to
//! make a store and a live segment, and declares its [`Capabilities`]; the suite checks what
//! the trait promises and, for what a backend cannot do, that it declines cleanly (P2P's `put`
//! and `remove` are accepted no-ops, its `watch` is `None`). A backend's test file runs them
//! all, one `#[tokio::test]` each, with [`metadata_conformance!`](crate::metadata_conformance):
//!
//! ```ignore
//! yuebing_engine::metadata_conformance!(MyBackend::start().await);
//! ```
//!
//! Time: a property that waits for an expiry or a change polls with a generous ceiling (several
//! times the backend's TTL); none asserts a duration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::StreamExt;

use super::MetadataStore;
use crate::error::Error;
use crate::segment::{BufferDesc, SegmentDescriptor};
use crate::{Location, RemoteAccess};

/// One `#[tokio::test]` per property of the suite, each on a backend made by `$backend` (an
/// expression evaluated inside each test's async body, so it may `.await`). The caller needs
/// `tokio` (with its `macros` and `rt-multi-thread` features) as a dependency.
#[macro_export]
macro_rules! metadata_conformance {
    ($backend:expr) => {
        $crate::metadata_conformance!(@tests $backend;
            unknown_names_are_not_found,
            live_segments_are_found,
            restart_replaces_the_descriptor,
            withdrawn_segments_are_not_found,
            put_and_remove,
            expires_when_its_store_is_gone,
            watch_sees_changes_and_deletion
        );
    };
    (@tests $backend:expr; $($property:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $property() {
            let backend = $backend;
            $crate::metadata::conformance::$property(&backend).await;
        }
    )*};
}

/// What a backend does, so the suite knows what to expect of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `put` stores the descriptor and `remove` deletes it (etcd). `false`: they are accepted
    /// and ignored, descriptors are served by their engines (P2P).
    pub stores: bool,
    /// A put descriptor lives while its store keeps it alive and expires about its TTL after
    /// that store is dropped (etcd's leases).
    pub expires: bool,
    /// `watch` returns a stream (etcd); `false`: it returns `None`.
    pub watches: bool,
}

/// A segment made live by a backend, as the suite sees it.
pub trait LiveSegment: Send {
    /// The descriptor that `get` of its name must return now.
    fn descriptor(&self) -> SegmentDescriptor;
    /// Restarts it under the same name with a new instance id (P2P: a new engine on the same
    /// port; a storing backend: a new descriptor put).
    fn restart(&mut self) -> BoxFuture<'_, ()>;
    /// Makes it go away (P2P: the engine stops; a storing backend: `remove`).
    fn withdraw(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// One backend under test: a fixture the suite makes stores and segments with.
pub trait Backend: Send + Sync {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// A new store of its own (its own connections and leases) on the same metadata: what one
    /// store publishes, another sees.
    fn store(&self) -> BoxFuture<'_, Arc<dyn MetadataStore>>;
    /// Makes a new segment live, published through `store` where the backend stores.
    fn publish<'a>(
        &'a self,
        store: &'a Arc<dyn MetadataStore>,
    ) -> BoxFuture<'a, Box<dyn LiveSegment>>;
    /// A TTL short enough for a test and long enough for the backend (etcd 3.4 grants at
    /// least 2 s with its default election timeout).
    fn short_ttl(&self) -> Duration;
}

/// Ceiling of every wait for something that happens by itself (an expiry, a change).
fn ceiling(backend: &dyn Backend) -> Duration {
    backend.short_ttl() * 8 + Duration::from_secs(10)
}

/// A name no segment has: a loopback address that nothing listens on.
pub fn dead_name() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    addr.to_string()
}

/// A descriptor named `name` with one exported buffer and a transport section, so that a
/// backend that stores must keep more than the header.
pub fn sample_descriptor(name: &str) -> SegmentDescriptor {
    let mut d = SegmentDescriptor::new(name, name, SegmentDescriptor::new_instance_id());
    d.buffers.push(BufferDesc {
        addr: 0x10_0000,
        len: 1 << 20,
        location: Location::default(),
        remote: RemoteAccess::READ_WRITE,
    });
    d.transports.insert(
        "tcp".into(),
        serde_json::json!({ "endpoint": name, "connections": 2 }),
    );
    d
}

/// Polls `get(name)` until it fails with `SegmentNotFound`, panicking after `within`.
pub async fn until_not_found(store: &dyn MetadataStore, name: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        match store.get(name).await {
            Err(e) if e.code() == -3203 => return,
            other if Instant::now() >= deadline => {
                panic!("{name} still there (or failing otherwise) after {within:?}: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn assert_not_found(result: Result<SegmentDescriptor, Error>, name: &str) {
    match result {
        Err(e) => assert_eq!(e.code(), -3203, "{name}: {e}"),
        Ok(d) => panic!("{name}: found {d:?}"),
    }
}

/// `get` of a name nobody published (a dead address, a string that is no address) is
/// `SegmentNotFound` (−3203), never a transport error.
pub async fn unknown_names_are_not_found(backend: &dyn Backend) {
    let store = backend.store().await;
    for name in [dead_name(), "not a name".to_string(), String::new()] {
        assert_not_found(store.get(&name).await, &name);
    }
}

/// A live segment is found with the descriptor it publishes, by its own store and by another
/// one on the same metadata.
pub async fn live_segments_are_found(backend: &dyn Backend) {
    let store = backend.store().await;
    let segment = backend.publish(&store).await;
    let expected = segment.descriptor();
    assert_eq!(store.get(&expected.name).await.unwrap(), expected);
    let other = backend.store().await;
    assert_eq!(
        other.get(&expected.name).await.unwrap(),
        expected,
        "a second store sees the first one's segment"
    );
}

/// After a restart under the same name, `get` returns the new instance.
pub async fn restart_replaces_the_descriptor(backend: &dyn Backend) {
    let store = backend.store().await;
    let mut segment = backend.publish(&store).await;
    let before = segment.descriptor();
    assert_eq!(store.get(&before.name).await.unwrap(), before);
    segment.restart().await;
    let after = segment.descriptor();
    assert_eq!(after.name, before.name);
    assert_ne!(after.instance_id, before.instance_id);
    assert_eq!(store.get(&after.name).await.unwrap(), after);
}

/// A segment that goes away is `SegmentNotFound`.
pub async fn withdrawn_segments_are_not_found(backend: &dyn Backend) {
    let store = backend.store().await;
    let segment = backend.publish(&store).await;
    let name = segment.descriptor().name;
    store.get(&name).await.unwrap();
    segment.withdraw().await;
    until_not_found(&*store, &name, ceiling(backend)).await;
}

/// `put`, a second `put` of the same name, `remove`, and `remove` of a missing name: a storing
/// backend returns what was put last and nothing after the remove; P2P accepts all four and
/// stores nothing.
pub async fn put_and_remove(backend: &dyn Backend) {
    let store = backend.store().await;
    let name = dead_name();
    let first = sample_descriptor(&name);
    let ttl = backend.short_ttl();
    store.put(&first, ttl).await.unwrap();
    if backend.capabilities().stores {
        assert_eq!(store.get(&name).await.unwrap(), first);
        let mut second = sample_descriptor(&name);
        second.buffers.clear();
        store.put(&second, ttl).await.unwrap();
        assert_eq!(store.get(&name).await.unwrap(), second, "a put replaces");
        store.remove(&name).await.unwrap();
        assert_not_found(store.get(&name).await, &name);
    } else {
        assert_not_found(store.get(&name).await, &name);
        store.remove(&name).await.unwrap();
    }
    store.remove(&name).await.unwrap();
    store.remove(&dead_name()).await.unwrap();
}

/// A descriptor put with a short TTL outlives several TTLs while its store lives (the store
/// keeps its lease alive), and expires once that store is dropped. Backends without leases:
/// nothing to check.
pub async fn expires_when_its_store_is_gone(backend: &dyn Backend) {
    if !backend.capabilities().expires {
        return;
    }
    let observer = backend.store().await;
    let owner = backend.store().await;
    let ttl = backend.short_ttl();
    let d = sample_descriptor(&dead_name());
    owner.put(&d, ttl).await.unwrap();
    // Kept alive: every look-up over three TTLs finds it.
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        assert_eq!(observer.get(&d.name).await.unwrap(), d, "kept alive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(owner);
    until_not_found(&*observer, &d.name, ceiling(backend)).await;
}

/// The next item of a watch, within the backend's ceiling.
async fn next_item<S>(backend: &dyn Backend, stream: &mut S) -> Option<SegmentDescriptor>
where
    S: futures::Stream<Item = Result<Option<SegmentDescriptor>, Error>> + Unpin,
{
    match tokio::time::timeout(ceiling(backend), stream.next()).await {
        Ok(Some(Ok(item))) => item,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch item within {:?}", ceiling(backend)),
    }
}

/// A watch starts with the current state, then sees each put, the remove, and an expiry.
/// Backends that cannot watch return `None`.
pub async fn watch_sees_changes_and_deletion(backend: &dyn Backend) {
    let store = backend.store().await;
    let name = dead_name();
    let Some(mut stream) = store.watch(&name) else {
        assert!(!backend.capabilities().watches, "declared able to watch");
        return;
    };
    assert!(backend.capabilities().watches, "declared unable to watch");
    let ttl = backend.short_ttl();
    assert_eq!(
        next_item(backend, &mut stream).await,
        None,
        "absent at first"
    );
    let first = sample_descriptor(&name);
    store.put(&first, ttl).await.unwrap();
    assert_eq!(next_item(backend, &mut stream).await, Some(first));
    let mut second = sample_descriptor(&name);
    second.buffers.clear();
    store.put(&second, ttl).await.unwrap();
    assert_eq!(next_item(backend, &mut stream).await, Some(second));
    store.remove(&name).await.unwrap();
    assert_eq!(next_item(backend, &mut stream).await, None, "removed");

    if !backend.capabilities().expires {
        return;
    }
    // A watch that starts on a present segment sees it first; the expiry shows as `None`.
    let owner = backend.store().await;
    let third = sample_descriptor(&name);
    owner.put(&third, ttl).await.unwrap();
    let mut late = store.watch(&name).expect("a second watch");
    assert_eq!(next_item(backend, &mut late).await, Some(third.clone()));
    assert_eq!(next_item(backend, &mut stream).await, Some(third));
    drop(owner);
    assert_eq!(next_item(backend, &mut late).await, None, "expired");
    assert_eq!(next_item(backend, &mut stream).await, None, "expired");
}
