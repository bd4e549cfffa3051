//! The transfer engine for callers that are not async Rust: [`BlockingEngine`]. Its calls carry
//! the async engine's names, arguments and results; the asynchronous ones (`open_segment`,
//! `wait`, `transfer`, `read`, `write`) also have a `*_call` form that returns a [`Call`].
//! The synchronous ones (registration, batches, `submit`, `status`, `cancel`) never wait for a
//! peer and are safe from any thread, a callback included.

use std::ops::Range;
use std::sync::Arc;

use yuebing_engine::{
    BatchId, BatchStatus, EngineBuffer, EngineConfig, Location, Region, RemoteAccess,
    SegmentHandle, TaskStatus, TransferEngine, TransferRequest,
};

use crate::bridge::Bridge;
use crate::call::Call;
use crate::error::Result;

/// A transfer engine on a [`Bridge`]'s runtime. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct BlockingEngine {
    bridge: Bridge,
    engine: TransferEngine,
}

impl std::fmt::Debug for BlockingEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingEngine")
            .field("name", &self.engine.name())
            .finish_non_exhaustive()
    }
}

impl BlockingEngine {
    /// Starts an engine on `bridge`'s runtime (its transports, listeners and tasks live there)
    /// and blocks until it serves.
    pub fn start(bridge: &Bridge, config: EngineConfig) -> Result<BlockingEngine> {
        bridge.wait_for(|| BlockingEngine::start_call(bridge, config))
    }

    /// `start` as a [`Call`].
    pub fn start_call(bridge: &Bridge, config: EngineConfig) -> Call<BlockingEngine> {
        let (b, handle) = (bridge.clone(), bridge.handle().clone());
        bridge.call(async move {
            let engine = TransferEngine::start_on(config, handle).await?;
            Ok::<_, crate::Error>(BlockingEngine { bridge: b, engine })
        })
    }

    /// An engine already running on `bridge`'s runtime, e.g. a store client's
    /// (`BlockingClient::client().engine()`).
    pub fn from_engine(bridge: &Bridge, engine: TransferEngine) -> BlockingEngine {
        BlockingEngine {
            bridge: bridge.clone(),
            engine,
        }
    }

    /// The async engine underneath.
    pub fn engine(&self) -> &TransferEngine {
        &self.engine
    }

    /// The bridge the engine runs on.
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// Starts `op` on a clone of the async engine.
    fn op<T, F, Fut>(&self, op: F) -> Call<T>
    where
        T: Send + 'static,
        F: FnOnce(TransferEngine) -> Fut,
        Fut: std::future::Future<Output = yuebing_engine::Result<T>> + Send + 'static,
    {
        self.bridge.call(op(self.engine.clone()))
    }

    /// Makes an engine call with `op` and blocks until it ends ([`Bridge::block_on`]: on a
    /// plain thread, with a bridge that owns its runtime, it runs there).
    fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(TransferEngine) -> Fut,
        Fut: std::future::Future<Output = yuebing_engine::Result<T>> + Send + 'static,
    {
        self.bridge.block_on(op(self.engine.clone()))
    }

    /// The engine's segment name (see [`TransferEngine::name`]).
    pub fn name(&self) -> &str {
        self.engine.name()
    }

    /// Allocates local-only memory (see [`TransferEngine::allocate`]).
    pub fn allocate(&self, len: usize, prefault: bool) -> Result<Arc<EngineBuffer>> {
        self.bridge.usable()?;
        Ok(self.engine.allocate(len, prefault)?)
    }

    /// Allocates memory peers may reach as `remote` allows (see
    /// [`TransferEngine::allocate_exported`]).
    pub fn allocate_exported(
        &self,
        len: usize,
        prefault: bool,
        remote: RemoteAccess,
    ) -> Result<Arc<EngineBuffer>> {
        self.bridge.usable()?;
        Ok(self.engine.allocate_exported(len, prefault, remote)?)
    }

    /// Registers caller memory local-only (see [`TransferEngine::register`]).
    ///
    /// # Safety
    /// The contract of [`yuebing_engine::MemoryRegistry::register`].
    pub unsafe fn register(&self, addr: *mut u8, len: usize, location: Location) -> Result<Region> {
        self.bridge.usable()?;
        // SAFETY: forwarded contract.
        Ok(unsafe { self.engine.register(addr, len, location) }?)
    }

    /// Registers caller memory with `remote` rights for peers (see
    /// [`TransferEngine::register_exported`]).
    ///
    /// # Safety
    /// The contract of [`yuebing_engine::MemoryRegistry::register`].
    pub unsafe fn register_exported(
        &self,
        addr: *mut u8,
        len: usize,
        location: Location,
        remote: RemoteAccess,
    ) -> Result<Region> {
        self.bridge.usable()?;
        // SAFETY: forwarded contract.
        Ok(unsafe { self.engine.register_exported(addr, len, location, remote) }?)
    }

    /// Unregisters the range at `addr`; no byte of it is touched after this returns (see
    /// [`TransferEngine::unregister`]). Works after a shutdown too, so memory can always be
    /// taken back; not in a forked child ([`Bridge::not_forked`]): the registration is the
    /// parent's, and unregistering would mark its shared-memory exports released for the
    /// parent's peers too.
    pub fn unregister(&self, addr: u64) -> Result<Region> {
        self.bridge.not_forked()?;
        Ok(self.engine.unregister(addr)?)
    }

    /// `open_segment` as a [`Call`].
    pub fn open_segment_call(&self, name: impl Into<String>) -> Call<SegmentHandle> {
        let name = name.into();
        self.op(|e| async move { e.open_segment(&name).await })
    }

    /// Opens a peer's segment by name (see [`TransferEngine::open_segment`]).
    pub fn open_segment(&self, name: &str) -> Result<SegmentHandle> {
        let name = name.to_string();
        self.run(|e| async move { e.open_segment(&name).await })
    }

    /// Closes a segment handle (see [`TransferEngine::close_segment`]).
    pub fn close_segment(&self, handle: SegmentHandle) -> Result<()> {
        Ok(self.engine.close_segment(handle)?)
    }

    /// A new batch for up to `capacity` tasks (see [`TransferEngine::allocate_batch`]).
    pub fn allocate_batch(&self, capacity: usize) -> Result<BatchId> {
        self.bridge.usable()?;
        Ok(self.engine.allocate_batch(capacity)?)
    }

    /// Frees a batch whose tasks are all final (see [`TransferEngine::free_batch`]).
    pub fn free_batch(&self, batch: BatchId) -> Result<()> {
        Ok(self.engine.free_batch(batch)?)
    }

    /// Validates and starts `requests` in `batch`; returns their task indices (see
    /// [`TransferEngine::submit`]).
    pub fn submit(&self, batch: BatchId, requests: &[TransferRequest]) -> Result<Range<usize>> {
        self.bridge.usable()?;
        Ok(self.engine.submit(batch, requests)?)
    }

    /// `wait` as a [`Call`].
    pub fn wait_call(&self, batch: BatchId) -> Call<BatchStatus> {
        self.op(move |e| async move { e.wait(batch).await })
    }

    /// Blocks until every task of `batch` is final (see [`TransferEngine::wait`]).
    pub fn wait(&self, batch: BatchId) -> Result<BatchStatus> {
        self.run(move |e| async move { e.wait(batch).await })
    }

    /// The batch's status now (see [`TransferEngine::status`]).
    pub fn status(&self, batch: BatchId) -> Result<BatchStatus> {
        Ok(self.engine.status(batch)?)
    }

    /// One task's status now (see [`TransferEngine::task_status`]).
    pub fn task_status(&self, batch: BatchId, task: usize) -> Result<TaskStatus> {
        Ok(self.engine.task_status(batch, task)?)
    }

    /// Cancels the batch's unfinished tasks; returns how many (see [`TransferEngine::cancel`]).
    pub fn cancel(&self, batch: BatchId) -> Result<usize> {
        Ok(self.engine.cancel(batch)?)
    }

    /// `transfer` as a [`Call`]: its local range is touched until the call ends.
    pub fn transfer_call(&self, request: TransferRequest) -> Call<()> {
        self.op(move |e| async move { e.transfer(request).await })
    }

    /// Runs one request to its end (see [`TransferEngine::transfer`]).
    pub fn transfer(&self, request: TransferRequest) -> Result<()> {
        self.run(move |e| async move { e.transfer(request).await })
    }

    /// `write` as a [`Call`].
    pub fn write_call(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Call<()> {
        self.transfer_call(TransferRequest::write(
            source,
            target,
            target_offset,
            length,
        ))
    }

    /// Writes `length` bytes from local `source` to `target_offset` in `target` (see
    /// [`TransferEngine::write`]).
    pub fn write(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Result<()> {
        self.transfer(TransferRequest::write(
            source,
            target,
            target_offset,
            length,
        ))
    }

    /// `read` as a [`Call`].
    pub fn read_call(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Call<()> {
        self.transfer_call(TransferRequest::read(source, target, target_offset, length))
    }

    /// Reads `length` bytes from `target_offset` in `target` into local `source` (see
    /// [`TransferEngine::read`]).
    pub fn read(
        &self,
        source: u64,
        target: SegmentHandle,
        target_offset: u64,
        length: u64,
    ) -> Result<()> {
        self.transfer(TransferRequest::read(source, target, target_offset, length))
    }
}
