//! Batches on the engine: submit (validate all, then start), wait, status, cancel, free, and
//! the one-request conveniences.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::TransferEngine;
use crate::batch::{BatchId, BatchStatus, TaskStatus};
use crate::bounds::check_access;
use crate::error::Error;
use crate::request::{SegmentHandle, TransferRequest, TransportKind};
use crate::segment::SegmentDescriptor;
use crate::transport::{Job, Transport};

/// Submits moving at most this many bytes in all start on the caller's thread (see
/// [`TransferEngine::submit`]); about 30 µs of copying at memcpy speed.
const INLINE_BYTES: u64 = 256 << 10;

/// One request, checked and resolved.
struct Planned {
    job: Job,
    transport: Arc<dyn Transport>,
    /// The initiator's own check failed: the task fails without sending anything (after one
    /// refresh of the descriptor, for a range outside a peer's cached one).
    early: Option<Error>,
    target: SegmentHandle,
    /// The transport the request forced, if any.
    forced: Option<TransportKind>,
}

impl TransferEngine {
    /// A new batch with room for `capacity` requests.
    pub fn allocate_batch(&self, capacity: usize) -> Result<BatchId, Error> {
        self.inner.batches.allocate(capacity)
    }

    /// Frees a batch; [`Error::Busy`] while a task is unfinished.
    pub fn free_batch(&self, batch: BatchId) -> Result<(), Error> {
        self.inner.batches.free(batch)
    }

    /// The transport for requests to `target` (whose descriptor is `segment`), and, given a
    /// `range` (address and length in the target), one that reaches that range: a transport
    /// may reach only part of a peer's memory (shm maps only its engine-allocated buffers).
    /// Only the engine's own segment is served by the `local` transport: a peer's descriptor
    /// is the peer's to write, and one that claimed this engine's instance id must not turn
    /// requests meant for the peer into local copies (which reach local-only memory).
    pub(super) fn transport_for(
        &self,
        target: SegmentHandle,
        segment: &SegmentDescriptor,
        forced: Option<TransportKind>,
        range: Option<(u64, u64)>,
    ) -> Result<Arc<dyn Transport>, Error> {
        let own = target == super::OWN;
        let wanted = forced.or(self.inner.config.transport);
        // Looked up under the read lock, not on a copy of the list: this runs per request.
        self.inner
            .transports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|t| {
                (own || t.kind() != TransportKind::Local)
                    && wanted.is_none_or(|k| t.kind() == k)
                    && t.can_reach(segment, forced.is_some())
                    && range.is_none_or(|(addr, len)| t.covers(segment, addr, len))
            })
            .cloned()
            .ok_or_else(|| {
                Error::invalid(format!(
                    "no transport{} reaches segment {:?}",
                    wanted.map_or(String::new(), |k| format!(" of kind {}", k.name())),
                    segment.name
                ))
            })
    }

    /// Checks every request and resolves it into a job for its transport.
    fn plan(&self, requests: &[TransferRequest]) -> Result<Vec<Planned>, Error> {
        // The engine's clock (a test may pause the caller's runtime, not the engine's).
        let now = {
            let _runtime = self.inner.handle.enter();
            crate::deadlines::now()
        };
        let mut planned = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let bad = |why: String| Error::invalid(format!("request {i}: {why}"));
            if r.length == 0 {
                return Err(bad("length 0".into()));
            }
            if r.target_offset.checked_add(r.length).is_none() {
                // What a target would answer; no transport need handle a range that wraps.
                return Err(Error::OutOfBounds {
                    addr: r.target_offset,
                    len: r.length,
                });
            }
            let local = self.inner.memory.lease(r.source, r.length).map_err(|_| {
                bad(format!(
                    "local range {:#x}+{} is not registered",
                    r.source, r.length
                ))
            })?;
            let segment = self
                .lock_segments()
                .get(&r.target)
                .cloned()
                .ok_or_else(|| bad(format!("unknown segment {:?}", r.target)))?;
            // A peer whose descriptor the store reported gone (stopped or dead).
            self.inner.watches.check(&segment)?;
            let wanted = r.deadline.unwrap_or(self.inner.config.default_deadline);
            // A deadline past what an Instant holds means no deadline to speak of.
            let deadline = now
                .checked_add(wanted)
                .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
            // The initiator's own check against what the target published: exported buffers
            // and their rights. Requests to the engine's own segment (the `local` transport,
            // the only one that serves it, see `transport_for`) are no remote access: the local
            // transport checks its own registry (local-only memory too) when it runs.
            let early = (!r.skip_initiator_checks && r.target != super::OWN)
                .then(|| {
                    check_access(&segment.regions(), r.target_offset, r.length, r.opcode).err()
                })
                .flatten();
            // A range outside the cached descriptor is resolved again once it is fetched anew
            // (`ready`); until then the transport is chosen for the segment alone.
            let range = early.is_none().then_some((r.target_offset, r.length));
            let transport = self.transport_for(r.target, &segment, r.transport, range)?;
            let job = Job {
                opcode: r.opcode,
                local,
                remote: r.target_offset,
                len: r.length,
                segment,
                deadline,
                // A batch's work runs as a task on the engine's runtime.
                can_spin: true,
            };
            planned.push(Planned {
                job,
                transport,
                early,
                target: r.target,
                forced: r.transport,
            });
        }
        Ok(planned)
    }

    /// Adds planned tasks to the batch and returns their indices and the futures that run
    /// them (each ends with its task final).
    fn enqueue(
        &self,
        batch: BatchId,
        planned: Vec<Planned>,
    ) -> Result<(Range<usize>, Vec<impl Future<Output = ()> + Send + 'static>), Error> {
        let specs: Vec<u64> = planned.iter().map(|p| p.job.len).collect();
        let (tasks, cancel) = self.inner.batches.submit(batch, &specs)?;
        let runs = tasks
            .clone()
            .zip(planned)
            .map(|(task, p)| run_task(self.clone(), batch, task, p, cancel.clone()))
            .collect();
        Ok((tasks, runs))
    }

    /// Validates every request, then starts them all; nothing starts if one is invalid.
    /// Returns the indices of the new tasks in the batch. A small submit may already be final
    /// when this returns (see `launch`); [`wait`](Self::wait) answers at once then.
    pub fn submit(
        &self,
        batch: BatchId,
        requests: &[TransferRequest],
    ) -> Result<Range<usize>, Error> {
        let planned = self.plan(requests)?;
        let bytes: u64 = planned.iter().map(|p| p.job.len).sum();
        let (tasks, mut runs) = self.enqueue(batch, planned)?;
        // One task drives the whole submit: its transfers wait on I/O (or the blocking pool for
        // big copies), so they need not be tasks each, and small transfers skip a spawn each.
        if runs.len() == 1 {
            if let Some(run) = runs.pop() {
                self.launch(run, bytes);
            }
        } else {
            let mut all: FuturesUnordered<_> = runs.into_iter().collect();
            self.launch(async move { while all.next().await.is_some() {} }, bytes);
        }
        Ok(tasks)
    }

    /// Runs a submit's work. A small one (at most [`INLINE_BYTES`]) first runs here, on the
    /// caller's thread, as far as it gets without waiting: a same-host copy is then final before
    /// `submit` returns, and a tcp slice is on the wire, with no hand-over to another thread on
    /// the way. Whatever has to wait (an acknowledgement, a connect, a big copy) goes on as a
    /// task on the engine's runtime; so does a larger submit, at once.
    fn launch(&self, work: impl Future<Output = ()> + Send + 'static, bytes: u64) {
        let mut work = Box::pin(work);
        if bytes <= INLINE_BYTES {
            let _runtime = self.inner.handle.enter();
            // A future re-registers its waker at every poll, so the task's first poll below
            // replaces this no-op waker before anything could need it.
            let mut cx = Context::from_waker(Waker::noop());
            if work.as_mut().poll(&mut cx).is_ready() {
                return;
            }
        }
        self.inner.handle.spawn(work);
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

    /// Cancels the tasks of the batch that are unfinished now; returns how many. Each ends
    /// [`Canceled`](crate::TaskState::Canceled) once its transfer stopped (a task still waiting
    /// to start never starts). The batch stays usable: tasks submitted after `cancel` returned
    /// run normally. A submit that races the cancel (neither returned before the other began)
    /// may be canceled or not; either way its tasks end, and end Canceled only once their
    /// transfers stopped. The batch's aggregate [`status`](Self::status) counts every task, the
    /// canceled ones included; [`task_status`](Self::task_status) tells each task's outcome.
    pub fn cancel(&self, batch: BatchId) -> Result<usize, Error> {
        self.inner.batches.cancel(batch)
    }

    /// Runs one request and returns when it is final: `Ok` only if it completed (Mooncake's
    /// `transferSync`). It runs on the caller's task, without a batch: the transport wakes the
    /// caller directly when the bytes landed, with no hop through the engine's tasks. The
    /// request's deadline applies as in a batch. Dropping the future cancels the transfer, and
    /// once it is dropped no byte of the local range is touched again.
    pub async fn transfer(&self, request: TransferRequest) -> Result<(), Error> {
        let mut planned = self
            .plan(std::slice::from_ref(&request))?
            .pop()
            .ok_or_else(|| Error::invalid("no request"))?;
        let handle = self.inner.handle.clone();
        planned.job.can_spin = drives_runtime(&handle);
        let mut work = std::pin::pin!(self.execute(planned));
        // Polled inside the engine's runtime, so that transports find its reactor and blocking
        // pool even when the caller runs elsewhere (another runtime, or a plain executor).
        std::future::poll_fn(|cx| {
            let _runtime = handle.enter();
            work.as_mut().poll(cx)
        })
        .await
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

    /// Moves one planned request's bytes, bounded by its deadline; a task that found its peer
    /// restarted refreshes the segment first (see [`Self::refresh_if_restarted`]).
    async fn execute(&self, mut p: Planned) -> Result<(), Error> {
        let outcome = match self.ready(&mut p).await {
            Ok(()) => match attempt(self, p.job.clone(), &*p.transport).await {
                Err(Error::OutOfBounds { .. }) if self.may_have_moved(&p) => {
                    self.again(&mut p).await
                }
                other => other,
            },
            Err(e) => Err(e),
        };
        self.refresh_if_restarted(p.target, &outcome).await;
        outcome
    }

    /// Whether a request shm refused may reach memory the peer put at that address since its
    /// descriptor was cached (a mapped file where one of its memfds was: shm no longer serves
    /// it, another transport does). Not for a forced transport.
    fn may_have_moved(&self, p: &Planned) -> bool {
        p.transport.kind() == TransportKind::Shm && p.forced.is_none() && p.target != super::OWN
    }

    /// Sends `p` once more after fetching its peer's descriptor anew, through the transport
    /// that reaches its range now. Safe to repeat: shm refuses before copying, or copied into
    /// pages the peer released, which nobody reads.
    async fn again(&self, p: &mut Planned) -> Result<(), Error> {
        let fresh = self.refresh_segment(p.target, false).await?;
        check_access(&fresh.regions(), p.job.remote, p.job.len, p.job.opcode)?;
        let range = Some((p.job.remote, p.job.len));
        p.transport = self.transport_for(p.target, &fresh, p.forced, range)?;
        p.job.segment = fresh;
        attempt(self, p.job.clone(), &*p.transport).await
    }

    /// Whether the planned request may be sent. A range outside a peer's cached descriptor, or
    /// exported there without the right the request needs, may be memory the peer registered
    /// since (or, restarted under the same name, its new memory): the descriptor is fetched
    /// again once, and the request re-resolved against it.
    async fn ready(&self, p: &mut Planned) -> Result<(), Error> {
        match p.early.take() {
            None => Ok(()),
            Some(Error::OutOfBounds { .. } | Error::AccessDenied { .. })
                if p.target != super::OWN =>
            {
                let fresh = self.refresh_segment(p.target, false).await?;
                check_access(&fresh.regions(), p.job.remote, p.job.len, p.job.opcode)?;
                let range = Some((p.job.remote, p.job.len));
                p.transport = self.transport_for(p.target, &fresh, p.forced, range)?;
                p.job.segment = fresh;
                Ok(())
            }
            Some(e) => Err(e),
        }
    }

    /// After a task failed as if its peer restarted: later submits must reach the new
    /// instance. The task itself is not resent (its offsets belonged to the old instance).
    async fn refresh_if_restarted(&self, target: SegmentHandle, outcome: &Result<(), Error>) {
        if let Err(Error::StaleSegment { .. } | Error::PeerFailed { .. }) = outcome {
            if let Err(e) = self.refresh_segment(target, true).await {
                tracing::debug!(error = %e, "could not refresh a restarted segment");
            }
        }
    }
}

/// The transfer itself, or `Timeout` at the job's deadline.
async fn attempt(
    engine: &TransferEngine,
    job: Job,
    transport: &dyn Transport,
) -> Result<(), Error> {
    let expiry = engine.inner.deadlines.expiry(job.deadline);
    let mut counting = engine
        .inner
        .counters
        .start(transport.kind(), job.opcode, job.len);
    // A local range the transport cannot reach directly goes through a bounce it can.
    let work: futures::future::BoxFuture<'_, Result<(), Error>> =
        match transport.covers_local(job.local.addr(), job.len) {
            true => transport.transfer(job),
            false => Box::pin(super::staging::staged(engine, job, transport)),
        };
    let outcome = tokio::select! {
        _ = expiry => Err(Error::Timeout),
        r = work => r,
    };
    counting.set(&outcome);
    outcome
}

/// Runs one task of a batch to its final state: recorded only after the transfer's future is
/// gone, so a waiter (and `free_batch`) sees it final only once nothing touches its memory.
///
/// A plain function returning the future, so that the guard exists before the first poll: a
/// future dropped unpolled (the runtime shut down; the part of a large submit not yet polled)
/// still makes its task final.
fn run_task(
    engine: TransferEngine,
    batch: BatchId,
    task: usize,
    p: Planned,
    cancel: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let unrecorded = Unrecorded {
        engine: Some(engine.clone()),
        batch,
        task,
    };
    run_task_armed(engine, p, cancel, unrecorded)
}

async fn run_task_armed(
    engine: TransferEngine,
    mut p: Planned,
    cancel: CancellationToken,
    unrecorded: Unrecorded,
) {
    // Dropped last: if this future is dropped unfinished or a transport panics, the task is
    // still made final, after its transfer is gone.
    let mut unrecorded = unrecorded;
    let (batch, task) = (unrecorded.batch, unrecorded.task);
    let start = engine.inner.batches.with(|t| t.handle_started(batch, task));
    let outcome = match start {
        // Canceled while it waited: final already, and its transfer never starts.
        Ok(false) | Err(_) => None,
        Ok(true) => Some(tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Error::Canceled),
            r = async {
                engine.ready(&mut p).await?;
                attempt(&engine, p.job.clone(), &*p.transport).await
            } => r,
        }),
    };
    if let Some(outcome) = &outcome {
        engine.refresh_if_restarted(p.target, outcome).await;
    }
    unrecorded.engine = None;
    let finished = engine.inner.batches.with(|t| {
        let _ = match outcome {
            Some(Ok(())) => t.handle_completed(batch, task),
            Some(Err(e)) => t.handle_failed(batch, task, e),
            None => Ok(false),
        };
        t.unfinished(batch) == Ok(0)
    });
    if finished {
        engine.after_task(batch).await;
    }
}

/// Fails its task when dropped while still armed (see `run_task`).
struct Unrecorded {
    engine: Option<TransferEngine>,
    batch: BatchId,
    task: usize,
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        if let Some(engine) = self.engine.take() {
            let stopped = Error::Io {
                reason: "the engine's task stopped before the transfer ended".into(),
            };
            let _ = engine
                .inner
                .batches
                .with(|t| t.handle_failed(self.batch, self.task, stopped));
        }
    }
}

/// Whether this thread, when the future it polls yields, goes on to poll `engine`'s I/O
/// driver: a task on one of the runtime's workers, or the thread running a current-thread
/// runtime. Elsewhere (another runtime, a plain executor, the `block_on` thread of a
/// multi-thread runtime) a yield comes straight back, so polling instead of parking would only
/// burn the thread. Asked before the engine's runtime is entered.
fn drives_runtime(engine: &tokio::runtime::Handle) -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(here) if here.id() == engine.id() => {
            here.runtime_flavor() == RuntimeFlavor::CurrentThread || tokio::task::try_id().is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::drives_runtime;

    #[test]
    fn only_threads_that_poll_the_engines_driver_may_spin() {
        let ct = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let h = ct.handle().clone();
        assert!(
            ct.block_on(async { drives_runtime(&h) }),
            "current-thread runtime"
        );
        assert!(!drives_runtime(&h), "a plain thread");

        let mt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let m = mt.handle().clone();
        assert!(
            !mt.block_on(async { drives_runtime(&m) }),
            "multi-thread block_on"
        );
        let in_task = mt.block_on(async {
            let m = tokio::runtime::Handle::current();
            tokio::spawn(async move { drives_runtime(&m) })
                .await
                .unwrap()
        });
        assert!(in_task, "a task on a worker");
        // A task of another runtime: its yields go to that runtime's driver.
        assert!(
            !ct.block_on(async { drives_runtime(&m) }),
            "another runtime"
        );
    }
}

#[cfg(test)]
mod forged {
    use std::sync::Arc;

    use crate::memory::RemoteAccess;
    use crate::request::SegmentHandle;
    use crate::segment::BufferDesc;
    use crate::{EngineConfig, Location, TransferEngine, TransferRequest};

    /// A peer writes its own descriptor: one that claims this engine's instance id and lists
    /// this engine's local-only memory must not make requests meant for the peer local copies.
    #[tokio::test]
    async fn a_peer_descriptor_claiming_our_instance_never_reaches_local_only_memory() {
        let engine = TransferEngine::new(EngineConfig::default());
        let secret = engine.allocate(4096, false).unwrap();
        // SAFETY (test): nothing transfers into `secret` while these bytes are written.
        unsafe { secret.write_at(0, &[0x5a; 4096]) }.unwrap();
        let src = engine.allocate(4096, false).unwrap();
        let mut forged = engine.descriptor();
        forged.name = "peer:1".into();
        forged.transports.clear();
        forged.buffers = vec![BufferDesc {
            addr: secret.addr(),
            len: 4096,
            location: Location::default(),
            remote: RemoteAccess::READ_WRITE,
        }];
        let peer = SegmentHandle(99);
        engine.lock_segments().insert(peer, Arc::new(forged));
        for skip in [false, true] {
            let mut write = TransferRequest::write(src.addr(), peer, secret.addr(), 4096);
            write.skip_initiator_checks = skip;
            assert!(engine.transfer(write).await.is_err(), "a write went local");
            let mut read = TransferRequest::read(src.addr(), peer, secret.addr(), 4096);
            read.skip_initiator_checks = skip;
            assert!(engine.transfer(read).await.is_err(), "a read went local");
        }
        let mut back = [0u8; 4096];
        // SAFETY (test): as above.
        unsafe { secret.read_at(0, &mut back) }.unwrap();
        assert_eq!(back, [0x5a; 4096]);
    }
}
