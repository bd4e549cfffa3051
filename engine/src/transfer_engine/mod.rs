//! The engine facade: memory, segments, batches, and the transports behind them.
//!
//! # Layout
//! `TransferEngine`'s methods live with the concept they belong to; each file holds that
//! concept's state and the facade's methods over it:
//! - this file: building and starting an engine, its own segment, opening and refreshing peer
//!   segments, memory (allocate, unregister) and the transports;
//! - `config`: [`EngineConfig`], the settings;
//! - `submit`: batches — plan, submit, wait, status, cancel, free — and the one-request
//!   conveniences;
//! - `notify`: notifications, sent once a batch completed and received into a bounded queue;
//! - `publish`: the engine's descriptor in a metadata store that stores descriptors;
//! - `peers`: watching the descriptors of open peer segments, where the store can watch;
//! - `staging`: bounce buffers for local ranges a transport cannot reach directly.

mod config;
mod notify;
mod peers;
mod publish;
mod staging;
mod submit;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::runtime::Handle;
use yuebing_rpc::{handler, Endpoint, PoolRegistry, RunningServer, Server, ServerConfig};

pub use self::config::{EngineConfig, RdmaNics};
use self::notify::NotificationQueue;
pub use self::notify::MAX_NOTIFY_MESSAGE;
use self::peers::PeerWatches;
use self::publish::Publisher;

use crate::batch::driver::Batches;
use crate::deadlines::Deadlines;
use crate::error::Error;
use crate::memory::{EngineBuffer, MemoryRegistry, Region, RemoteAccess};
use crate::metadata::{MetadataStore, P2pMetadata};
use crate::request::{SegmentHandle, TransportKind};
use crate::segment::{BufferDesc, SegmentDescriptor};
use crate::service::{
    ControlHandler, ControlServer, EngineControl, EngineControlRpc, Notification, SERVICE,
};
use crate::transport::{LocalTransport, ShmTransport, TcpTransport, Transport};

/// The handle of the engine's own segment.
const OWN: SegmentHandle = SegmentHandle(0);

struct Inner {
    config: EngineConfig,
    handle: Handle,
    instance_id: u64,
    memory: Arc<MemoryRegistry>,
    batches: Batches,
    /// Deadlines of running tasks, on one timer.
    deadlines: Deadlines,
    transports: std::sync::RwLock<Vec<Arc<dyn Transport>>>,
    segments: Mutex<HashMap<SegmentHandle, Arc<SegmentDescriptor>>>,
    next_segment: AtomicU64,
    metadata: Option<Arc<dyn MetadataStore>>,
    /// The publication of this engine's descriptor, with a store that keeps descriptors.
    publisher: OnceLock<Publisher>,
    /// Watches of open peers' descriptors, where the store can watch.
    watches: PeerWatches,
    /// Clients of peers' control services (descriptors, notifications).
    control: Option<PoolRegistry<EngineControlRpc>>,
    /// Notifications received from peers.
    notifications: NotificationQueue,
    /// Transfers, bytes and failures per transport and direction.
    counters: crate::counters::Counters,
    /// The control service; stops when the engine is dropped.
    _server: Option<RunningServer>,
    /// Why this engine runs without rdma (set when it was asked for and could not start).
    rdma_off: OnceLock<String>,
    /// Peers already told about: they publish rdma but are reached another way.
    fallbacks: Mutex<std::collections::HashSet<String>>,
    /// Bounce buffers for local ranges a transport cannot reach directly.
    staging: staging::Staging,
}

/// The Transfer Engine of one process. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct TransferEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TransferEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferEngine")
            .field("name", &self.inner.config.name)
            .field("instance_id", &self.inner.instance_id)
            .finish_non_exhaustive()
    }
}

impl TransferEngine {
    /// An engine on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`TransferEngine::new_on`] there.
    pub fn new(config: EngineConfig) -> Self {
        Self::new_on(config, Handle::current())
    }

    /// An engine whose tasks run on `handle`.
    pub fn new_on(config: EngineConfig, handle: Handle) -> Self {
        Self::build(config, handle, None, None)
    }

    /// The networked parts of an engine made by [`TransferEngine::start`]: its metadata is
    /// `config.metadata`, or the embedded P2P metadata.
    fn build_networked(
        config: EngineConfig,
        handle: Handle,
        control: PoolRegistry<EngineControlRpc>,
        server: RunningServer,
    ) -> Self {
        let metadata = config.metadata.clone().unwrap_or_else(|| {
            Arc::new(P2pMetadata::with_registry(control.clone())) as Arc<dyn MetadataStore>
        });
        let mut engine = Self::build(config, handle, Some(metadata), Some(server));
        if let Some(inner) = Arc::get_mut(&mut engine.inner) {
            inner.control = Some(control);
        }
        engine
    }

    fn build(
        config: EngineConfig,
        handle: Handle,
        metadata: Option<Arc<dyn MetadataStore>>,
        server: Option<RunningServer>,
    ) -> Self {
        let memory = Arc::new(MemoryRegistry::default());
        let instance_id = SegmentDescriptor::new_instance_id();
        let local: Arc<dyn Transport> = Arc::new(LocalTransport::new(memory.clone(), instance_id));
        let notifications = NotificationQueue::new(config.notify_queue_len);
        let deadlines = Deadlines::new(handle.clone());
        // A store given by the caller may watch; P2P cannot.
        let watches = PeerWatches::new(config.metadata.as_ref().and(metadata.as_ref()));
        let counters = crate::counters::Counters::new(config.metrics.clone());
        let inner = Arc::new(Inner {
            config,
            handle,
            instance_id,
            memory,
            batches: Batches::default(),
            deadlines,
            transports: std::sync::RwLock::new(vec![local]),
            segments: Mutex::new(HashMap::new()),
            next_segment: AtomicU64::new(1),
            metadata,
            publisher: OnceLock::new(),
            watches,
            control: None,
            notifications,
            counters,
            _server: server,
            rdma_off: OnceLock::new(),
            fallbacks: Mutex::default(),
            staging: staging::Staging::default(),
        });
        let engine = TransferEngine { inner };
        engine.refresh_own_segment();
        engine
    }

    /// A networked engine whose sockets, timers and tasks all live on `handle`'s runtime (see
    /// [`TransferEngine::start`]). The caller may be anywhere: a task of another runtime, or a
    /// plain thread with any executor; the start itself runs as a task on `handle`.
    pub async fn start_on(config: EngineConfig, handle: Handle) -> Result<TransferEngine, Error> {
        handle
            .spawn(Self::start(config))
            .await
            .map_err(|e| Error::Io {
                reason: format!("the engine's start task ended: {e}"),
            })?
    }

    /// A networked engine on the current runtime: its control service (descriptor exchange,
    /// the embedded P2P metadata) and its tcp data port listen on `config.bind`'s host, and its
    /// segment is named by the control service's `host:port`. With `config.metadata`, its
    /// descriptor is published there before this returns.
    ///
    /// # Errors
    /// A bind that fails, a bad address; with `config.metadata`, the store's refusal of the
    /// first put (etcd unreachable: etcd's typed error).
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`TransferEngine::start_on`] there.
    pub async fn start(mut config: EngineConfig) -> Result<TransferEngine, Error> {
        let handle = Handle::current();
        let source: Arc<OnceLock<Weak<dyn ControlHandler>>> = Arc::default();
        let for_server = source.clone();
        let bind: Endpoint = config.bind.parse()?;
        let server = Server::new(ServerConfig {
            token: config.token.clone(),
            ..ServerConfig::default()
        })
        .service(SERVICE, move |_| {
            handler!(ControlServer {
                engine: for_server.clone()
            }
            .serve())
        })
        .bind_on(&bind, handle.clone())
        .await?;
        let addr = server
            .local_addr()
            .ok_or_else(|| Error::invalid("the control service must listen on TCP"))?;
        config.name = addr.to_string();
        let data_bind = config
            .data_bind
            .clone()
            .unwrap_or_else(|| format!("{}:0", addr.ip()));
        let tcp_config = config.tcp.clone();
        let control = P2pMetadata::registry(config.token.clone(), handle.clone());
        let engine = Self::build_networked(config, handle.clone(), control, server);
        let tcp = TcpTransport::start(
            engine.inner.memory.clone(),
            engine.inner.instance_id,
            &data_bind,
            tcp_config,
            engine.inner.config.token.clone(),
            handle,
        )
        .await?;
        engine.add_transport(Arc::new(tcp));
        if engine.inner.config.shm {
            match ShmTransport::start(
                engine.inner.memory.clone(),
                engine.inner.instance_id,
                engine.inner.config.token.clone(),
                engine.inner.config.tcp.hello_timeout,
                engine.inner.handle.clone(),
            )
            .await
            {
                Ok(shm) => engine.add_transport(Arc::new(shm)),
                Err(e) => {
                    tracing::warn!(error = %e, "shm transport unavailable; same-host peers use tcp")
                }
            }
        }
        #[cfg(feature = "rdma")]
        engine.start_rdma();
        let handler: Arc<dyn ControlHandler> = engine.inner.clone();
        let _ = source.set(Arc::downgrade(&handler));
        if let Some(store) = engine.inner.config.metadata.clone() {
            let ttl = engine.inner.config.metadata_ttl;
            engine.start_publishing(store, ttl).await?;
        }
        Ok(engine)
    }

    /// Starts the rdma transport where it is configured; where no NIC can be used, says so
    /// and goes on without it (peers on other hosts are then reached over tcp).
    #[cfg(feature = "rdma")]
    fn start_rdma(&self) {
        use crate::transport::rdma::{Handshaker, RdmaTransport};
        let Some(config) = self.inner.config.rdma.clone() else {
            return;
        };
        let Some(control) = self.inner.control.clone() else {
            return;
        };
        let handshaker: Handshaker = Arc::new(move |endpoint: String, request: Vec<u8>| {
            let control = control.clone();
            Box::pin(async move {
                let endpoint: Endpoint = endpoint.parse()?;
                let gone = |e: yuebing_rpc::Error| Error::PeerFailed {
                    reason: format!("rdma handshake with {endpoint}: {e}"),
                };
                let answer = control
                    .get(&endpoint)
                    .call_with(yuebing_rpc::CallOptions::method("connect"), |c, ctx| {
                        let request = request.clone();
                        async move { c.connect(ctx, "rdma".into(), request).await }
                    })
                    .await
                    .map_err(gone)?;
                answer.map_err(|code| Error::PeerFailed {
                    reason: format!("rdma handshake refused with code {code}"),
                })
            })
        });
        match RdmaTransport::start(
            config,
            self.inner.config.name.clone(),
            self.inner.instance_id,
            handshaker,
            self.inner.handle.clone(),
        ) {
            Ok(rdma) => self.add_transport(Arc::new(rdma)),
            Err(e) => {
                tracing::info!(error = %e, "rdma transport off; peers on other hosts use tcp");
                let _ = self.inner.rdma_off.set(e.to_string());
            }
        }
    }

    /// The runtime this engine's sockets, timers and tasks live on.
    pub fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    /// The cluster token this engine presents and requires.
    pub fn token(&self) -> Option<&yuebing_rpc::Token> {
        self.inner.config.token.as_ref()
    }

    /// This engine's segment name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Opens the segment `name` (a peer's, or this engine's own) and caches its descriptor.
    pub async fn open_segment(&self, name: &str) -> Result<SegmentHandle, Error> {
        crate::segment::check_name(name)?;
        if name == self.inner.config.name {
            return Ok(OWN);
        }
        let metadata = self.metadata()?;
        let descriptor = metadata.get(name).await?;
        self.peer_found(name);
        self.prepare_transports(&descriptor).await;
        let handle = SegmentHandle(self.inner.next_segment.fetch_add(1, Ordering::Relaxed));
        self.lock_segments()
            .insert(handle, Arc::new(descriptor.clone()));
        self.say_if_rdma_is_not_used(handle, &descriptor);
        self.watch_peer(name);
        Ok(handle)
    }

    /// Closes a segment: drops its cached descriptor and the transports' connections to it.
    pub fn close_segment(&self, handle: SegmentHandle) -> Result<(), Error> {
        if handle == OWN {
            return Err(Error::invalid("the engine's own segment cannot be closed"));
        }
        let d = self
            .lock_segments()
            .remove(&handle)
            .ok_or_else(|| Error::invalid(format!("segment {handle:?} is not open")))?;
        for t in self.transports() {
            t.forget(&d);
        }
        self.unwatch_unused(&d.name);
        Ok(())
    }

    /// The cached descriptor of an open segment.
    pub fn segment_descriptor(
        &self,
        handle: SegmentHandle,
    ) -> Result<Arc<SegmentDescriptor>, Error> {
        self.lock_segments()
            .get(&handle)
            .cloned()
            .ok_or_else(|| Error::invalid(format!("segment {handle:?} is not open")))
    }

    fn metadata(&self) -> Result<&Arc<dyn MetadataStore>, Error> {
        self.inner.metadata.as_ref().ok_or_else(|| {
            Error::invalid("this engine has no metadata service (use TransferEngine::start)")
        })
    }

    /// This engine's tcp data port, if it has one.
    pub fn data_endpoint(&self) -> Option<String> {
        self.descriptor()
            .transports
            .get("tcp")
            .and_then(|t| t.get("endpoint"))
            .and_then(|e| e.as_str())
            .map(str::to_string)
    }

    /// Fetches a fresh descriptor for `handle` and caches it. The transports drop what they
    /// keep for the old one when its peer failed (`failed`) or restarted (a new instance id).
    async fn refresh_segment(
        &self,
        handle: SegmentHandle,
        failed: bool,
    ) -> Result<Arc<SegmentDescriptor>, Error> {
        let old = self.segment_descriptor(handle)?;
        if failed {
            for t in self.transports() {
                t.forget(&old);
            }
        }
        let fresh = Arc::new(self.metadata()?.get(&old.name).await?);
        self.peer_found(&fresh.name);
        if !failed && fresh.instance_id != old.instance_id {
            for t in self.transports() {
                t.forget(&old);
            }
        }
        if fresh.instance_id != old.instance_id {
            tracing::info!(segment = %old.name, old = old.instance_id, new = fresh.instance_id, "segment restarted; descriptor refreshed");
            self.prepare_transports(&fresh).await;
        }
        self.lock_segments().insert(handle, fresh.clone());
        Ok(fresh)
    }

    /// Says so, once per peer, when a peer publishes rdma but requests to it go over tcp: a
    /// silent fallback costs users hours (NIXL #909). Which transport and why.
    fn say_if_rdma_is_not_used(&self, handle: SegmentHandle, segment: &SegmentDescriptor) {
        if !segment.transports.contains_key(TransportKind::Rdma.name()) {
            return;
        }
        let Ok(chosen) = self.transport_for(handle, segment, None, None) else {
            return;
        };
        if chosen.kind() != TransportKind::Tcp {
            return;
        }
        let first = {
            let mut told = self
                .inner
                .fallbacks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            told.insert(segment.name.clone())
        };
        if !first {
            return;
        }
        let why = match self.inner.rdma_off.get() {
            Some(reason) => format!("this engine's rdma transport is off: {reason}"),
            None if cfg!(feature = "rdma") => {
                "this engine runs without rdma (EngineConfig::rdma is None)".to_string()
            }
            None => "this build has no rdma transport (cargo feature `rdma`)".to_string(),
        };
        tracing::warn!(peer = %segment.name, "the peer publishes rdma, but requests to it go over tcp: {why}");
    }

    /// Lets every transport prepare to reach `segment` (see [`Transport::prepare`]).
    async fn prepare_transports(&self, segment: &SegmentDescriptor) {
        let work: Vec<_> = self
            .transports()
            .iter()
            .map(|t| t.prepare(segment))
            .collect();
        futures::future::join_all(work).await;
    }

    /// This engine's instance id (new at every start).
    pub fn instance_id(&self) -> u64 {
        self.inner.instance_id
    }

    /// The registered memory.
    pub fn memory(&self) -> &MemoryRegistry {
        &self.inner.memory
    }

    /// The handle of this engine's own segment.
    pub fn own_segment(&self) -> SegmentHandle {
        OWN
    }

    /// The descriptor this engine publishes.
    pub fn descriptor(&self) -> SegmentDescriptor {
        self.inner.descriptor()
    }

    fn transports(&self) -> Vec<Arc<dyn Transport>> {
        self.inner.transports()
    }

    /// Adds a transport and its registration hook (which applies to memory registered from now
    /// on). Transports are tried in the order local, shm, tcp; among equals, in the order added.
    pub fn add_transport(&self, transport: Arc<dyn Transport>) {
        if let Some(hook) = transport.registration_hook() {
            self.inner.memory.add_hook(hook);
        }
        {
            let mut ts = self
                .inner
                .transports
                .write()
                .unwrap_or_else(|p| p.into_inner());
            ts.push(transport);
            ts.sort_by_key(|t| t.kind().preference());
        }
        self.refresh_own_segment();
    }

    /// The transport requests to `handle` take (unless a request or the engine forces one).
    pub fn selected_transport(&self, handle: SegmentHandle) -> Result<TransportKind, Error> {
        let segment = self.segment_descriptor(handle)?;
        Ok(self.transport_for(handle, &segment, None, None)?.kind())
    }

    /// Caches this engine's descriptor anew, and has it published where a store keeps it.
    fn refresh_own_segment(&self) {
        let d = Arc::new(self.descriptor());
        self.lock_segments().insert(OWN, d);
        if let Some(p) = self.inner.publisher.get() {
            p.changed();
        }
    }

    fn lock_segments(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<SegmentHandle, Arc<SegmentDescriptor>>> {
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `len` bytes of memfd-backed memory and registers it local-only: this engine
    /// transfers from and into it (as the local side of its requests, or the target of its own
    /// segment), peers cannot reach it and the descriptor does not list it. Staging memory,
    /// destinations of reads, sources of writes. For memory peers reach, see
    /// [`TransferEngine::allocate_exported`].
    pub fn allocate(&self, len: usize, prefault: bool) -> Result<Arc<EngineBuffer>, Error> {
        self.allocate_exported(len, prefault, RemoteAccess::LOCAL_ONLY)
    }

    /// Allocates `len` bytes of memfd-backed memory and registers it with `remote` rights for
    /// peers (e.g. [`RemoteAccess::READ_WRITE`] for a node's store space): it is published in
    /// the descriptor, and peers may read it, write it, or both, as `remote` allows. A buffer
    /// exported read-only is allocated sealed against peers' writes
    /// ([`EngineBuffer::allocate_sealed`]), so that same-host peers can map it only read-only.
    pub fn allocate_exported(
        &self,
        len: usize,
        prefault: bool,
        remote: RemoteAccess,
    ) -> Result<Arc<EngineBuffer>, Error> {
        let buffer = Arc::new(match remote == RemoteAccess::READ {
            true => EngineBuffer::allocate_sealed(len, prefault)?,
            false => EngineBuffer::allocate(len, prefault)?,
        });
        self.inner.memory.register_buffer(buffer.clone(), remote)?;
        self.refresh_own_segment();
        Ok(buffer)
    }

    /// Maps `len` bytes of `file` from `offset` (a multiple of the page size; the range must lie
    /// inside the file) and registers them with `remote` rights for peers, as
    /// [`TransferEngine::allocate_exported`] does with memory it allocates: Mooncake's
    /// `mount_segment` of a file under `/dev/shm` or on a filesystem. Writes land in the file.
    /// Peers reach such memory over the network, never by mapping it, and if the file's owner
    /// truncates it, transfers that touch the lost pages fail (see [`EngineBuffer::map_file`]).
    /// Read-only export is refused: the engine cannot seal a caller's file against peers.
    pub fn map_file_exported(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
        remote: RemoteAccess,
    ) -> Result<Arc<EngineBuffer>, Error> {
        let buffer = Arc::new(EngineBuffer::map_file(file, offset, len)?);
        self.inner.memory.register_buffer(buffer.clone(), remote)?;
        self.refresh_own_segment();
        Ok(buffer)
    }

    /// Registers caller memory local-only (see [`TransferEngine::allocate`] and
    /// [`MemoryRegistry::register`]): the usual registration of a `get_into` destination or a
    /// `put_from` source.
    ///
    /// # Safety
    /// The contract of [`MemoryRegistry::register`].
    pub unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        location: crate::Location,
    ) -> Result<Region, Error> {
        // SAFETY: forwarded contract.
        unsafe { self.register_exported(addr, len, location, RemoteAccess::LOCAL_ONLY) }
    }

    /// Registers caller memory with `remote` rights for peers (see
    /// [`TransferEngine::allocate_exported`] and [`MemoryRegistry::register`]). The shm
    /// transport maps only engine buffers, so a same-host peer reaches exported caller memory
    /// over tcp (the descriptor's shm section lists the buffers it maps; other ranges take the
    /// next transport that reaches them).
    ///
    /// # Safety
    /// The contract of [`MemoryRegistry::register`].
    pub unsafe fn register_exported(
        &self,
        addr: *mut u8,
        len: usize,
        location: crate::Location,
        remote: RemoteAccess,
    ) -> Result<Region, Error> {
        // SAFETY: forwarded contract.
        let r = unsafe { self.inner.memory.register(addr, len, location, remote) }?;
        self.refresh_own_segment();
        Ok(r)
    }

    /// Unregisters the range that starts at `addr`. Synchronous, so usable from `Drop`: the
    /// transfers touching the range are stopped (they fail; connections serving a peer's request
    /// into it are shut down) and this waits only for a copy or syscall already under way, never
    /// for a peer. After it returns, no byte of the range is read or written. An engine buffer
    /// is retired (see [`EngineBuffer`]).
    pub fn unregister(&self, addr: u64) -> Result<Region, Error> {
        let r = self.inner.memory.unregister(addr)?;
        self.refresh_own_segment();
        Ok(r)
    }

    /// [`TransferEngine::unregister`] of `region` only if that registration is still in place
    /// (see [`MemoryRegistry::unregister_region`]): for owners that record what they
    /// registered, when something else may have unregistered it and registered the address
    /// again since.
    pub fn unregister_region(&self, region: &Region) -> Result<Region, Error> {
        let r = self.inner.memory.unregister_region(region)?;
        self.refresh_own_segment();
        Ok(r)
    }
}

impl Inner {
    fn transports(&self) -> Vec<Arc<dyn Transport>> {
        self.transports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn descriptor(&self) -> SegmentDescriptor {
        let mut d = SegmentDescriptor::new(
            self.config.name.clone(),
            self.config.name.clone(),
            self.instance_id,
        );
        // Only what peers may reach: local-only memory is never published.
        d.buffers = self
            .memory
            .exported_regions()
            .into_iter()
            .map(BufferDesc::from)
            .collect();
        for t in self.transports().iter() {
            if let Some(section) = t.publish() {
                d.transports.insert(t.kind().name().into(), section);
            }
        }
        d
    }
}

impl ControlHandler for Inner {
    fn descriptor(&self) -> SegmentDescriptor {
        Inner::descriptor(self)
    }

    fn notify(&self, notification: Notification) -> Result<(), Error> {
        self.notifications.push(notification)
    }

    fn connect(&self, transport: &str, request: &[u8]) -> Result<Vec<u8>, Error> {
        let t = self
            .transports()
            .into_iter()
            .find(|t| t.kind().name() == transport)
            .ok_or_else(|| Error::invalid(format!("no {transport} transport here")))?;
        t.accept(request)
    }
}

/// Compile-time checks: the engine is shared freely between threads, and the futures of its
/// public methods may be spawned anywhere.
#[allow(dead_code)]
fn _engine_is_send_sync_and_its_futures_are_send(e: &TransferEngine) {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<TransferEngine>();
    send(&TransferEngine::start(EngineConfig::default()));
    send(&TransferEngine::start_on(
        EngineConfig::default(),
        Handle::current(),
    ));
    send(&e.open_segment("x"));
    let request = crate::TransferRequest::write(0, OWN, 0, 1);
    send(&e.transfer(request));
    send(&e.write(0, OWN, 0, 1));
    send(&e.read(0, OWN, 0, 1));
    let batch = crate::BatchId::from_u64(0);
    send(&e.wait(batch));
}
