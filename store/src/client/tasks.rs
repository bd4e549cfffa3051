//! Copy and move tasks: asking the master for them and about them, and running the ones it
//! assigns to this client. The master gives a task to a client that holds a source replica;
//! its ping answers `TasksWaiting`, the heartbeat takes the tasks, and each runs in a task of
//! its own: the bytes go from the replica in this client's store space to the space the master
//! placed on each target node, through the engine, and the outcome goes back with `task_end`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::replicas::Fragment;
use super::{Client, Inner, Options};
use crate::error::{Error, Result};
use crate::master::{TaskId, TaskInfo, TaskWork};

impl Client {
    /// Asks the master to add a replica of `key` on each of `targets` (node names, as
    /// [`Client::hostname`] gives them), in the background: the task's id comes back at once;
    /// [`Client::query_task`] follows it through `Pending`, `Processing` to `Success` or
    /// `Failed` (Mooncake's `create_copy_task`). Errors as `Master::task_copy`.
    pub fn create_copy_task<T: AsRef<str>>(
        &self,
        key: impl Into<String>,
        targets: &[T],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<TaskId>> + Send + 'static {
        let targets: Vec<String> = targets.iter().map(|t| t.as_ref().to_string()).collect();
        self.key_call(key, opts, move |m, key| {
            let targets = targets.clone();
            async move { m.task_copy(key, targets).await }
        })
    }

    /// Asks the master to move `key`'s replica on node `source` to node `target`, in the
    /// background (Mooncake's `create_move_task`); as [`Client::create_copy_task`], and once
    /// the copy is in place the source replica goes. Errors as `Master::task_move`.
    pub fn create_move_task(
        &self,
        key: impl Into<String>,
        source: impl Into<String>,
        target: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<TaskId>> + Send + 'static {
        let (source, target) = (source.into(), target.into());
        self.key_call(key, opts, move |m, key| {
            let (source, target) = (source.clone(), target.clone());
            async move { m.task_move(key, source, target).await }
        })
    }

    /// Where a copy or move task is (Mooncake's `query_task`). Errors: `TaskNotFound` (an
    /// unknown id, or one finished so long ago that the master forgot it).
    pub fn query_task(
        &self,
        id: TaskId,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<TaskInfo>> + Send + 'static {
        self.master_call(opts, move |m| async move { m.task_query(id).await })
    }
}

/// The tasks this client runs, by id: each runs once however often it is named, and all stop
/// when the client closes or goes.
#[derive(Debug, Default)]
pub(crate) struct Runner(Mutex<HashMap<TaskId, tokio::task::AbortHandle>>);

impl Runner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, tokio::task::AbortHandle>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops every task and returns their ids (the caller reports them failed; one it does
    /// not report the master fails at its end of time). A copy cut short has its space held
    /// until its release time: bytes of it may still land.
    pub(crate) fn stop_all(&self) -> Vec<TaskId> {
        self.lock()
            .drain()
            .map(|(id, task)| {
                task.abort();
                id
            })
            .collect()
    }
}

/// Reports the tasks [`Runner::stop_all`] stopped as failed, before `until` (best effort: one
/// not heard of is failed by the master at its end of time).
pub(crate) async fn report_stopped(c: &Inner, ids: Vec<TaskId>, until: Instant) {
    let stopped = yuebing_engine::Error::Canceled;
    let error = Some((
        stopped.code(),
        "the client closed before the copy ended".to_string(),
    ));
    for id in ids {
        let ended = c
            .masters
            .call(until, |m| {
                let error = error.clone();
                async move { m.until(until).task_end(id, error).await }
            })
            .await;
        if let Err(e) = ended {
            tracing::debug!(task = %id, error = %e, "a stopped task was not reported");
        }
    }
}

/// Takes this client's waiting tasks from the master and starts each (the heartbeat calls it
/// when a ping says tasks wait). A running task holds the client until it ends (at most its
/// deadline); a closed client takes none.
pub(crate) async fn take(c: &Arc<Inner>, bound: Duration) {
    if c.closed.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let until = Instant::now() + bound;
    let taken = c
        .masters
        .call(until, |m| async move { m.until(until).task_take().await })
        .await;
    let works = match taken {
        Ok(works) => works,
        Err(e) => {
            tracing::warn!(error = %e, "could not take copy/move tasks");
            return;
        }
    };
    let mut running = c.runner.lock();
    for work in works {
        if running.contains_key(&work.id) {
            continue;
        }
        let id = work.id;
        let task = c.engine.handle().spawn(run(c.clone(), work));
        running.insert(id, task.abort_handle());
    }
}

/// Runs one task and reports its outcome.
async fn run(c: Arc<Inner>, work: TaskWork) {
    let deadline = Duration::from_millis(work.deadline_ms);
    // The master's clock started first: end a margin before its end of time.
    let margin = c.cfg.lease_margin.min(deadline / 4);
    let until = yuebing_rpc::deadline_after(Instant::now(), deadline - margin);
    let copied = copy(&c, &work, until).await;
    if let Err(e) = &copied {
        tracing::warn!(task = %work.id, key = %work.key, error = %e, "copy/move task failed");
    }
    let error = copied.err().map(|e| (e.code(), e.to_string()));
    let id = work.id;
    let report_until = yuebing_rpc::deadline_after(Instant::now(), c.cfg.deadline);
    let reported = c
        .masters
        .call(report_until, |m| {
            let error = error.clone();
            async move { m.until(report_until).task_end(id, error).await }
        })
        .await;
    if let Err(e) = reported {
        tracing::warn!(task = %id, error = %e, "could not report a copy/move task; the master fails it at its end of time");
    }
    c.runner.lock().remove(&id);
}

/// Copies the source replica (in this client's store space: checked, the master's word is
/// not trusted to point there) to every target.
async fn copy(c: &Inner, work: &TaskWork, until: Instant) -> Result<()> {
    let src = &work.source;
    if src.node != c.engine.name() {
        return Err(Error::Internal {
            reason: format!(
                "task {}: its source is on {:?}, not on this node",
                work.id, src.node
            ),
        });
    }
    // Held for the whole copy: the range stays mapped even if it is unmounted meanwhile (the
    // master then fails the task: its source replica is gone).
    let source =
        c.spaces
            .buffer_holding(src.addr, src.len)
            .ok_or(yuebing_engine::Error::OutOfBounds {
                addr: src.addr,
                len: src.len,
            })?;
    if work.targets.iter().any(|t| t.len != src.len) {
        return Err(Error::Internal {
            reason: format!("task {}: a target's size is not the source's", work.id),
        });
    }
    let whole = [Fragment::whole(src.addr, src.len)];
    // A tuple's fields drop in order: the transfers before the memory they read.
    let mut op = (
        Box::pin(c.write_replicas(&whole, &work.targets, until, None)),
        source,
    );
    (&mut op.0).await
}
