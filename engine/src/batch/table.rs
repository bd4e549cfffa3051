//! The batch/task status machine, without I/O.
//!
//! Inputs are `handle_*` calls (from the engine's API and the tasks running transfers);
//! outputs are return values and effects drained with [`BatchTable::poll_effect`]. The driver:
//!
//! ```text
//! lock; feed handle_*(…); while let Some(e) = poll_effect() { wake waiters / notify }; unlock
//! ```
//!
//! Deadlines are not kept here: a task's deadline ends its transfer future (the engine's one
//! deadline path, `deadlines.rs`), and only then does its driver report it
//! (`handle_failed` with [`Error::Timeout`]), so that Timeout, like every final state, means
//! nothing touches the task's memory any more.
//!
//! A task reaches exactly one final state (Completed, Failed, Timeout, Canceled); later inputs for
//! it are ignored, so a late completion can never turn a Timeout into Completed.
//!
//! A task is final only when nothing will touch its memory again. [`BatchTable::cancel`] ends a
//! Waiting task at once (its transfer never starts: [`BatchTable::handle_started`] refuses it
//! from then on), but only marks a Pending one: it turns Canceled when its driver reports that
//! the transfer stopped (`handle_failed` with [`Error::Canceled`]), so `free` refuses the batch
//! while a transport may still write into the caller's memory.

use super::id::BatchId;
use crate::error::Error;
use std::collections::VecDeque;
use std::ops::Range;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Accepted, not started (e.g. waiting for in-flight room towards its peer).
    Waiting,
    /// Being transferred.
    Pending,
    /// All bytes landed (a write was acknowledged by the target; a read has all bytes).
    Completed,
    /// The transfer failed; the task's error says why.
    Failed,
    /// The deadline passed first.
    Timeout,
    /// Canceled by the caller.
    Canceled,
}

impl TaskState {
    /// Whether the task will not change any more.
    pub fn is_final(self) -> bool {
        !matches!(self, TaskState::Waiting | TaskState::Pending)
    }
}

/// One task's state and progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    /// State.
    pub state: TaskState,
    /// Bytes transferred so far.
    pub bytes: u64,
    /// Bytes asked for.
    pub len: u64,
    /// Why it failed (Failed, Timeout, Canceled).
    pub error: Option<Error>,
}

/// A batch's aggregate state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStatus {
    /// Waiting/Pending while any task is unfinished; Completed if all completed; else the worst
    /// final state (Failed, then Timeout, then Canceled).
    pub state: TaskState,
    /// Tasks submitted.
    pub tasks: usize,
    /// Tasks completed.
    pub completed: usize,
    /// Bytes transferred over all tasks.
    pub bytes: u64,
    /// The first error of the worst state, if any.
    pub error: Option<Error>,
    /// Why the batch's notification could not be delivered (batches submitted with one).
    pub notify_error: Option<Error>,
}

/// What the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Every task of the batch is final: wake its waiters (and send its notification if it
    /// completed).
    Finished(BatchId),
}

#[derive(Debug)]
struct Task {
    status: TaskStatus,
    /// `cancel` was asked while the task was Pending; its driver stops it.
    cancel_requested: bool,
}

#[derive(Debug)]
struct Batch {
    capacity: usize,
    tasks: Vec<Task>,
    unfinished: usize,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    batch: Option<Batch>,
}

/// Every batch of one engine.
#[derive(Debug, Default)]
pub struct BatchTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    effects: VecDeque<Effect>,
}

impl BatchTable {
    /// A new batch with room for `capacity` requests.
    pub fn allocate(&mut self, capacity: usize) -> Result<BatchId, Error> {
        if capacity == 0 {
            return Err(Error::invalid("batch capacity 0"));
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len())
                    .map_err(|_| Error::invalid("too many batches"))?;
                self.slots.push(Slot::default());
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.batch = Some(Batch {
            capacity,
            tasks: Vec::new(),
            unfinished: 0,
        });
        Ok(BatchId {
            index,
            generation: slot.generation,
        })
    }

    fn batch(&self, id: BatchId) -> Result<&Batch, Error> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.batch.as_ref())
            .ok_or_else(|| Error::UnknownBatch { id: id.to_string() })
    }

    fn batch_mut(&mut self, id: BatchId) -> Result<&mut Batch, Error> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.batch.as_mut())
            .ok_or_else(|| Error::UnknownBatch { id: id.to_string() })
    }

    /// Frees a batch whose tasks are all final; its id is refused from now on.
    pub fn free(&mut self, id: BatchId) -> Result<(), Error> {
        let unfinished = self.batch(id)?.unfinished;
        if unfinished > 0 {
            return Err(Error::Busy {
                batch: id.to_string(),
                unfinished,
            });
        }
        let slot = &mut self.slots[id.index as usize];
        slot.batch = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        Ok(())
    }

    /// Adds tasks of the given lengths (all or none) and returns their indices.
    pub fn submit(&mut self, id: BatchId, tasks: &[u64]) -> Result<Range<usize>, Error> {
        let batch = self.batch_mut(id)?;
        let room = batch.capacity - batch.tasks.len();
        if tasks.len() > room {
            return Err(Error::TooManyRequests {
                requested: tasks.len(),
                room,
            });
        }
        let start = batch.tasks.len();
        batch.tasks.extend(tasks.iter().map(|&len| Task {
            status: TaskStatus {
                state: TaskState::Waiting,
                bytes: 0,
                len,
                error: None,
            },
            cancel_requested: false,
        }));
        batch.unfinished += tasks.len();
        Ok(start..batch.tasks.len())
    }

    /// Marks a waiting task as being transferred. Returns whether its transfer may start:
    /// false once it is final (canceled while it waited), and then nothing may touch its memory.
    pub fn handle_started(&mut self, id: BatchId, task: usize) -> Result<bool, Error> {
        let t = task_mut(self.batch_mut(id)?, task)?;
        if t.status.state == TaskState::Waiting {
            t.status.state = TaskState::Pending;
        }
        Ok(t.status.state == TaskState::Pending && !t.cancel_requested)
    }

    /// Adds `bytes` to a task's progress.
    pub fn handle_progress(&mut self, id: BatchId, task: usize, bytes: u64) -> Result<(), Error> {
        let t = task_mut(self.batch_mut(id)?, task)?;
        if !t.status.state.is_final() {
            t.status.bytes = (t.status.bytes + bytes).min(t.status.len);
        }
        Ok(())
    }

    /// A task's bytes all landed. Returns whether this changed its state.
    pub fn handle_completed(&mut self, id: BatchId, task: usize) -> Result<bool, Error> {
        self.finish(id, task, TaskState::Completed, None)
    }

    /// A task failed with `err` (Timeout and Canceled errors give those states). Returns whether
    /// this changed its state.
    pub fn handle_failed(&mut self, id: BatchId, task: usize, err: Error) -> Result<bool, Error> {
        let state = match err {
            Error::Timeout => TaskState::Timeout,
            Error::Canceled => TaskState::Canceled,
            _ => TaskState::Failed,
        };
        self.finish(id, task, state, Some(err))
    }

    /// Cancels every unfinished task of the batch; returns how many. Waiting tasks are
    /// Canceled now; Pending ones once their driver reports their transfer stopped (see the
    /// module docs). Tasks submitted later are not affected: the batch stays usable.
    pub fn cancel(&mut self, id: BatchId) -> Result<usize, Error> {
        let n = self.batch(id)?.tasks.len();
        let mut canceled = 0;
        for task in 0..n {
            let t = task_mut(self.batch_mut(id)?, task)?;
            match t.status.state {
                TaskState::Waiting => {
                    self.finish(id, task, TaskState::Canceled, Some(Error::Canceled))?;
                    canceled += 1;
                }
                TaskState::Pending if !t.cancel_requested => {
                    t.cancel_requested = true;
                    canceled += 1;
                }
                _ => {}
            }
        }
        Ok(canceled)
    }

    fn finish(
        &mut self,
        id: BatchId,
        task: usize,
        state: TaskState,
        error: Option<Error>,
    ) -> Result<bool, Error> {
        let batch = self.batch_mut(id)?;
        let t = task_mut(batch, task)?;
        if t.status.state.is_final() {
            return Ok(false);
        }
        if state == TaskState::Completed {
            t.status.bytes = t.status.len;
        }
        t.status.state = state;
        t.status.error = error;
        batch.unfinished -= 1;
        if batch.unfinished == 0 {
            self.effects.push_back(Effect::Finished(id));
        }
        Ok(true)
    }

    /// How many tasks of the batch are not final yet.
    pub fn unfinished(&self, id: BatchId) -> Result<usize, Error> {
        Ok(self.batch(id)?.unfinished)
    }

    /// The next effect to perform.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// One task's status.
    pub fn task_status(&self, id: BatchId, task: usize) -> Result<TaskStatus, Error> {
        let batch = self.batch(id)?;
        batch
            .tasks
            .get(task)
            .map(|t| t.status.clone())
            .ok_or_else(|| Error::invalid(format!("{id} has no task {task}")))
    }

    /// The batch's aggregate status.
    pub fn status(&self, id: BatchId) -> Result<BatchStatus, Error> {
        let batch = self.batch(id)?;
        let completed = batch
            .tasks
            .iter()
            .filter(|t| t.status.state == TaskState::Completed)
            .count();
        let bytes = batch.tasks.iter().map(|t| t.status.bytes).sum();
        let rank = |s: TaskState| match s {
            TaskState::Failed => 3,
            TaskState::Timeout => 2,
            TaskState::Canceled => 1,
            _ => 0,
        };
        let (state, error) = if batch.unfinished > 0 {
            let any_started = batch
                .tasks
                .iter()
                .any(|t| t.status.state != TaskState::Waiting);
            let s = if any_started {
                TaskState::Pending
            } else {
                TaskState::Waiting
            };
            (s, None)
        } else {
            match batch.tasks.iter().max_by_key(|t| rank(t.status.state)) {
                Some(t) if rank(t.status.state) > 0 => (t.status.state, t.status.error.clone()),
                _ => (TaskState::Completed, None),
            }
        };
        Ok(BatchStatus {
            state,
            tasks: batch.tasks.len(),
            completed,
            bytes,
            error,
            notify_error: None,
        })
    }
}

fn task_mut(batch: &mut Batch, task: usize) -> Result<&mut Task, Error> {
    batch
        .tasks
        .get_mut(task)
        .ok_or_else(|| Error::invalid(format!("no task {task} in this batch")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_and_effects() {
        let mut b = BatchTable::default();
        let id = b.allocate(4).unwrap();
        let tasks = b.submit(id, &[10; 3]).unwrap();
        assert_eq!(tasks, 0..3);
        assert_eq!(b.status(id).unwrap().state, TaskState::Waiting);
        b.handle_started(id, 0).unwrap();
        b.handle_progress(id, 0, 4).unwrap();
        assert_eq!(b.task_status(id, 0).unwrap().bytes, 4);
        assert_eq!(b.status(id).unwrap().state, TaskState::Pending);
        assert_eq!(b.free(id).unwrap_err().code(), -3004, "busy");
        for i in 0..3 {
            assert!(b.handle_completed(id, i).unwrap());
        }
        assert_eq!(b.poll_effect(), Some(Effect::Finished(id)));
        assert_eq!(b.poll_effect(), None);
        let s = b.status(id).unwrap();
        assert_eq!(
            (s.state, s.completed, s.bytes),
            (TaskState::Completed, 3, 30)
        );
        b.free(id).unwrap();
    }

    #[test]
    fn capacity_is_enforced_all_or_nothing() {
        let mut b = BatchTable::default();
        let id = b.allocate(2).unwrap();
        b.submit(id, &[1]).unwrap();
        let err = b.submit(id, &[1, 1]).unwrap_err();
        assert_eq!(
            err,
            Error::TooManyRequests {
                requested: 2,
                room: 1
            }
        );
        assert_eq!(b.status(id).unwrap().tasks, 1);
        assert_eq!(b.allocate(0).unwrap_err().code(), -3001);
    }

    #[test]
    fn stale_ids_are_refused_not_reused() {
        let mut b = BatchTable::default();
        let id = b.allocate(1).unwrap();
        b.free(id).unwrap();
        let again = b.allocate(1).unwrap();
        assert_eq!(again.index, id.index, "slot reused");
        for bad in [id, BatchId::from_u64(u64::MAX)] {
            assert_eq!(b.status(bad).unwrap_err().code(), -3502);
            assert_eq!(b.free(bad).unwrap_err().code(), -3502);
        }
        assert_eq!(BatchId::from_u64(again.to_u64()), again);
        assert!(b.status(again).is_ok());
    }

    #[test]
    fn a_timeout_is_final_and_a_late_completion_is_ignored() {
        let mut b = BatchTable::default();
        let id = b.allocate(2).unwrap();
        b.submit(id, &[5, 5]).unwrap();
        assert!(b.handle_started(id, 0).unwrap());
        assert!(b.handle_failed(id, 0, Error::Timeout).unwrap());
        assert_eq!(b.task_status(id, 0).unwrap().state, TaskState::Timeout);
        assert!(!b.handle_completed(id, 0).unwrap(), "too late");
        assert_eq!(b.task_status(id, 0).unwrap().state, TaskState::Timeout);
        b.handle_completed(id, 1).unwrap();
        let s = b.status(id).unwrap();
        assert_eq!(
            (s.state, s.error),
            (TaskState::Timeout, Some(Error::Timeout))
        );
    }

    #[test]
    fn a_pending_task_is_canceled_only_when_its_driver_says_it_stopped() {
        let mut b = BatchTable::default();
        let id = b.allocate(2).unwrap();
        b.submit(id, &[1; 2]).unwrap();
        assert!(b.handle_started(id, 0).unwrap());
        assert_eq!(b.cancel(id).unwrap(), 2);
        assert_eq!(b.task_status(id, 1).unwrap().state, TaskState::Canceled);
        assert!(
            !b.handle_started(id, 1).unwrap(),
            "a canceled task never starts"
        );
        assert_eq!(b.task_status(id, 0).unwrap().state, TaskState::Pending);
        assert_eq!(
            b.free(id).unwrap_err().code(),
            -3004,
            "busy while it may still run"
        );
        assert_eq!(b.poll_effect(), None);
        assert_eq!(b.cancel(id).unwrap(), 0, "asked once");
        assert!(b.handle_failed(id, 0, Error::Canceled).unwrap());
        assert_eq!(b.poll_effect(), Some(Effect::Finished(id)));
        assert_eq!(b.status(id).unwrap().state, TaskState::Canceled);
        b.free(id).unwrap();
    }

    #[test]
    fn tasks_submitted_after_a_cancel_are_not_canceled() {
        let mut b = BatchTable::default();
        let id = b.allocate(3).unwrap();
        b.submit(id, &[1]).unwrap();
        assert!(b.handle_started(id, 0).unwrap());
        assert_eq!(b.cancel(id).unwrap(), 1);
        assert_eq!(b.submit(id, &[1, 1]).unwrap(), 1..3);
        assert!(b.handle_started(id, 1).unwrap(), "a later task starts");
        assert!(b.handle_completed(id, 1).unwrap());
        assert!(b.handle_failed(id, 0, Error::Canceled).unwrap());
        assert_eq!(b.cancel(id).unwrap(), 1, "only the task unfinished now");
        assert_eq!(b.task_status(id, 1).unwrap().state, TaskState::Completed);
        assert_eq!(b.task_status(id, 2).unwrap().state, TaskState::Canceled);
        assert_eq!(b.poll_effect(), Some(Effect::Finished(id)));
        b.free(id).unwrap();
    }

    #[test]
    fn cancel_and_failure_precedence() {
        let mut b = BatchTable::default();
        let id = b.allocate(3).unwrap();
        b.submit(id, &[1; 3]).unwrap();
        b.handle_failed(
            id,
            0,
            Error::PeerFailed {
                reason: "gone".into(),
            },
        )
        .unwrap();
        assert_eq!(b.cancel(id).unwrap(), 2);
        assert_eq!(b.task_status(id, 1).unwrap().state, TaskState::Canceled);
        let s = b.status(id).unwrap();
        assert_eq!(s.state, TaskState::Failed, "failure outranks cancel");
        assert_eq!(b.cancel(id).unwrap(), 0);
        b.free(id).unwrap();
    }
}
