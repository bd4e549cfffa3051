//! The engine facade: memory, segments, batches, and the transports behind them.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use yuebing_rpc::{handler, Endpoint, RunningServer, Server, ServerConfig};

use crate::batch::driver::Batches;
use crate::batch::{BatchId, BatchStatus, TaskState, TaskStatus};
use crate::bounds::check_access;
use crate::error::Error;
use crate::memory::{EngineBuffer, MemoryRegistry, Region};
use crate::metadata::{MetadataStore, P2pMetadata};
use crate::request::{SegmentHandle, TransferRequest, TransportKind};
use crate::segment::{BufferDesc, SegmentDescriptor};
use crate::service::{ControlServer, DescriptorSource, EngineControl, SERVICE};
use crate::transport::{Job, LocalTransport, TcpConfig, TcpTransport, Transport};

/// Engine settings; `EngineConfig::default()` suits one box.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The segment's name. [`TransferEngine::start`] sets it to the rpc `host:port` (the P2P
    /// metadata's naming); [`TransferEngine::new`] keeps it.
    pub name: String,
    /// Deadline of a request that sets none.
    pub default_deadline: Duration,
    /// Forces one transport for every request that does not choose its own.
    pub transport: Option<TransportKind>,
    /// Where the control service listens (port 0: any free port); the data port uses the same
    /// host.
    pub bind: String,
    /// Cluster token for control and data connections.
    pub token: Option<String>,
    /// The tcp transport's settings.
    pub tcp: TcpConfig,
    /// Where the tcp data port listens; default: the control service's host, any free port.
    /// Fixing it lets a restarted engine keep its data port, so that stale requests reach it
    /// and are refused by instance id rather than by a closed port.
    pub data_bind: Option<String>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            name: "local".into(),
            default_deadline: Duration::from_secs(30),
            transport: None,
            bind: "127.0.0.1:0".into(),
            token: None,
            tcp: TcpConfig::default(),
            data_bind: None,
        }
    }
}

/// The handle of the engine's own segment.
const OWN: SegmentHandle = SegmentHandle(0);

struct Inner {
    config: EngineConfig,
    handle: Handle,
    instance_id: u64,
    memory: Arc<MemoryRegistry>,
    batches: Batches,
    transports: std::sync::RwLock<Vec<Arc<dyn Transport>>>,
    segments: Mutex<HashMap<SegmentHandle, Arc<SegmentDescriptor>>>,
    next_segment: AtomicU64,
    metadata: Option<Arc<dyn MetadataStore>>,
    /// Serves this engine's descriptor to peers (for the control service).
    descriptor_fn: Arc<DescriptorSource>,
    /// The control service; stops when the engine is dropped.
    _server: Option<RunningServer>,
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

    fn build(
        config: EngineConfig,
        handle: Handle,
        metadata: Option<Arc<dyn MetadataStore>>,
        server: Option<RunningServer>,
    ) -> Self {
        let memory = Arc::new(MemoryRegistry::default());
        let instance_id = SegmentDescriptor::new_instance_id();
        let local: Arc<dyn Transport> = Arc::new(LocalTransport::new(memory.clone(), instance_id));
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let me = me.clone();
            Inner {
                config,
                handle,
                instance_id,
                memory,
                batches: Batches::default(),
                transports: std::sync::RwLock::new(vec![local]),
                segments: Mutex::new(HashMap::new()),
                next_segment: AtomicU64::new(1),
                metadata,
                descriptor_fn: Arc::new(move || {
                    me.upgrade()
                        .map(|inner| TransferEngine { inner }.descriptor())
                }),
                _server: server,
            }
        });
        let engine = TransferEngine { inner };
        engine.refresh_own_segment();
        engine
    }

    /// A networked engine on the current runtime: its control service (descriptor exchange,
    /// the embedded P2P metadata) and its tcp data port listen on `config.bind`'s host, and its
    /// segment is named by the control service's `host:port`.
    pub async fn start(mut config: EngineConfig) -> Result<TransferEngine, Error> {
        let handle = Handle::current();
        let source: Arc<OnceLock<Weak<DescriptorSource>>> = Arc::default();
        let for_server = source.clone();
        let bind: Endpoint = config.bind.parse()?;
        let server = Server::new(ServerConfig {
            token: config.token.clone(),
            ..ServerConfig::default()
        })
        .service(SERVICE, move |_| {
            handler!(ControlServer {
                source: for_server.clone()
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
        let metadata: Arc<dyn MetadataStore> = Arc::new(P2pMetadata::new(config.token.clone()));
        let engine = Self::build(config, handle.clone(), Some(metadata), Some(server));
        let tcp = TcpTransport::start(
            engine.inner.memory.clone(),
            engine.inner.instance_id,
            &data_bind,
            tcp_config,
            handle,
        )
        .await?;
        engine.add_transport(Arc::new(tcp));
        let _ = source.set(Arc::downgrade(&engine.inner.descriptor_fn));
        Ok(engine)
    }

    /// This engine's segment name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Opens the segment `name` (a peer's, or this engine's own) and caches its descriptor.
    pub async fn open_segment(&self, name: &str) -> Result<SegmentHandle, Error> {
        if name == self.inner.config.name {
            return Ok(OWN);
        }
        let metadata = self.metadata()?;
        let descriptor = metadata.get(name).await?;
        let handle = SegmentHandle(self.inner.next_segment.fetch_add(1, Ordering::Relaxed));
        self.lock_segments().insert(handle, Arc::new(descriptor));
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

    /// Fetches a fresh descriptor for `handle` after its segment restarted.
    async fn refresh_segment(&self, handle: SegmentHandle) -> Result<(), Error> {
        let old = self.segment_descriptor(handle)?;
        for t in self.transports() {
            t.forget(&old);
        }
        let fresh = self.metadata()?.get(&old.name).await?;
        tracing::info!(segment = %old.name, old = old.instance_id, new = fresh.instance_id, "segment restarted; descriptor refreshed");
        self.lock_segments().insert(handle, Arc::new(fresh));
        Ok(())
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
        let mut d = SegmentDescriptor::new(
            self.inner.config.name.clone(),
            self.inner.config.name.clone(),
            self.inner.instance_id,
        );
        d.buffers = self
            .inner
            .memory
            .regions()
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

    fn transports(&self) -> Vec<Arc<dyn Transport>> {
        self.inner
            .transports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds a transport (tried after those added before it) and its registration hook, which
    /// applies to memory registered from now on.
    pub fn add_transport(&self, transport: Arc<dyn Transport>) {
        if let Some(hook) = transport.registration_hook() {
            self.inner.memory.add_hook(hook);
        }
        self.inner
            .transports
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(transport);
        self.refresh_own_segment();
    }

    fn refresh_own_segment(&self) {
        let d = Arc::new(self.descriptor());
        self.lock_segments().insert(OWN, d);
    }

    fn lock_segments(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<SegmentHandle, Arc<SegmentDescriptor>>> {
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Allocates `len` bytes of memfd-backed memory and registers it.
    pub fn allocate(&self, len: usize, prefault: bool) -> Result<Arc<EngineBuffer>, Error> {
        let buffer = Arc::new(EngineBuffer::allocate(len, prefault)?);
        self.inner.memory.register_buffer(buffer.clone())?;
        self.refresh_own_segment();
        Ok(buffer)
    }

    /// Registers caller memory (see [`MemoryRegistry::register`]).
    ///
    /// # Safety
    /// The contract of [`MemoryRegistry::register`].
    pub unsafe fn register(
        &self,
        addr: *const u8,
        len: usize,
        location: crate::Location,
    ) -> Result<Region, Error> {
        // SAFETY: forwarded contract.
        let r = unsafe { self.inner.memory.register(addr, len, location) }?;
        self.refresh_own_segment();
        Ok(r)
    }

    /// Unregisters the range that starts at `addr`.
    pub fn unregister(&self, addr: u64) -> Result<Region, Error> {
        let r = self.inner.memory.unregister(addr)?;
        self.refresh_own_segment();
        Ok(r)
    }

    /// A new batch with room for `capacity` requests.
    pub fn allocate_batch(&self, capacity: usize) -> Result<BatchId, Error> {
        self.inner.batches.allocate(capacity)
    }

    /// Frees a batch; [`Error::Busy`] while a task is unfinished.
    pub fn free_batch(&self, batch: BatchId) -> Result<(), Error> {
        self.inner.batches.free(batch)
    }

    fn transport_for(
        &self,
        segment: &SegmentDescriptor,
        forced: Option<TransportKind>,
    ) -> Result<Arc<dyn Transport>, Error> {
        let wanted = forced.or(self.inner.config.transport);
        self.transports()
            .iter()
            .find(|t| wanted.is_none_or(|k| t.kind() == k) && t.can_reach(segment))
            .cloned()
            .ok_or_else(|| {
                Error::invalid(format!(
                    "no transport{} reaches segment {:?}",
                    wanted.map_or(String::new(), |k| format!(" of kind {}", k.name())),
                    segment.name
                ))
            })
    }

    /// Validates every request, then starts them all; nothing starts if one is invalid.
    /// Returns the indices of the new tasks in the batch.
    pub fn submit(
        &self,
        batch: BatchId,
        requests: &[TransferRequest],
    ) -> Result<Range<usize>, Error> {
        let now = Instant::now();
        let mut planned = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let bad = |why: String| Error::invalid(format!("request {i}: {why}"));
            if r.length == 0 {
                return Err(bad("length 0".into()));
            }
            if self.inner.memory.find(r.source, r.length).is_none() {
                return Err(bad(format!(
                    "local range {:#x}+{} is not registered",
                    r.source, r.length
                )));
            }
            let segment = self
                .lock_segments()
                .get(&r.target)
                .cloned()
                .ok_or_else(|| bad(format!("unknown segment {:?}", r.target)))?;
            let transport = self.transport_for(&segment, r.transport)?;
            let deadline = now + r.deadline.unwrap_or(self.inner.config.default_deadline);
            let early = (!r.skip_initiator_checks)
                .then(|| check_access(&segment.regions(), r.target_offset, r.length).err())
                .flatten();
            let job = Job {
                opcode: r.opcode,
                local: r.source,
                remote: r.target_offset,
                len: r.length,
                segment,
                deadline,
            };
            planned.push((job, transport, early));
        }
        let specs: Vec<(u64, Instant)> = planned
            .iter()
            .map(|(j, _, _)| (j.len, j.deadline))
            .collect();
        let tasks = self.inner.batches.with(|t| t.submit(batch, &specs))?;
        let signals = self.inner.batches.signals(batch)?;
        for (task, ((job, transport, early), target)) in tasks
            .clone()
            .zip(planned.into_iter().zip(requests.iter().map(|r| r.target)))
        {
            let engine = self.clone();
            let cancel = signals.cancel.clone();
            self.inner.handle.spawn(async move {
                let outcome = match early {
                    Some(e) => Err(e),
                    None => {
                        engine
                            .inner
                            .batches
                            .with(|t| t.handle_started(batch, task))
                            .ok();
                        let until = tokio::time::Instant::from_std(job.deadline);
                        tokio::select! {
                            _ = cancel.cancelled() => Err(Error::Canceled),
                            r = tokio::time::timeout_at(until, transport.transfer(job)) => {
                                r.unwrap_or(Err(Error::Timeout))
                            }
                        }
                    }
                };
                if let Err(Error::StaleSegment { .. } | Error::PeerFailed { .. }) = &outcome {
                    // The peer may have restarted: later submits must reach the new instance.
                    // This task is not resent (its offsets belonged to the old instance).
                    if let Err(e) = engine.refresh_segment(target).await {
                        tracing::warn!(error = %e, "could not refresh a restarted segment");
                    }
                }
                engine
                    .inner
                    .batches
                    .with(|t| match outcome {
                        Ok(()) => t.handle_completed(batch, task),
                        Err(e) => t.handle_failed(batch, task, e),
                    })
                    .ok();
            });
        }
        Ok(tasks)
    }

    /// Waits (without polling) until every task of the batch is final.
    pub async fn wait(&self, batch: BatchId) -> Result<BatchStatus, Error> {
        self.inner.batches.wait(batch).await
    }

    /// The batch's aggregate status now.
    pub fn status(&self, batch: BatchId) -> Result<BatchStatus, Error> {
        self.inner.batches.with(|t| t.status(batch))
    }

    /// One task's status now.
    pub fn task_status(&self, batch: BatchId, task: usize) -> Result<TaskStatus, Error> {
        self.inner.batches.with(|t| t.task_status(batch, task))
    }

    /// Cancels the batch's unfinished tasks; returns how many.
    pub fn cancel(&self, batch: BatchId) -> Result<usize, Error> {
        self.inner.batches.cancel(batch)
    }

    /// Runs one request in its own batch and returns when it is final: `Ok` only if Completed.
    pub async fn transfer(&self, request: TransferRequest) -> Result<(), Error> {
        let batch = self.allocate_batch(1)?;
        let result = async {
            self.submit(batch, std::slice::from_ref(&request))?;
            let status = self.wait(batch).await?;
            match status.state {
                TaskState::Completed => Ok(()),
                _ => Err(status.error.unwrap_or(Error::Canceled)),
            }
        }
        .await;
        // The batch is final (or was never submitted to), so freeing cannot be Busy.
        let _ = self.free_batch(batch);
        result
    }

    /// Writes `length` bytes from local `source` to `target_offset` in `target`.
    pub async fn write(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Result<(), Error> {
        self.transfer(TransferRequest::write(
            source,
            target,
            target_offset,
            length,
        ))
        .await
    }

    /// Reads `length` bytes from `target_offset` in `target` into local `source`.
    pub async fn read(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Result<(), Error> {
        self.transfer(TransferRequest::read(source, target, target_offset, length))
            .await
    }
}
