//! Copy and move tasks: the words of their interface, and the table the master core keeps of
//! them.
//!
//! A task is created at the master (`task_copy`, `task_move`), assigned to a client that holds
//! a source replica, and moves through [`TaskState`]: `Pending` until that client takes it
//! (`task_take`, prompted by its ping), `Processing` while it copies the bytes through its
//! engine into space the master placed on the target nodes, then `Success` (the new replicas
//! are published; a move drops its source) or `Failed` (the target space is released). Every
//! change is a durable record, so tasks survive a restart and a failover; finished tasks are
//! kept for queries up to a configured count, oldest dropped first.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::object::{deserialize_replicas, Replicas};
use super::space::Replica;
use super::types::{ClientId, Millis, ReplicaDesc};

/// A task's id: the master's epoch and the log position of the record that created it, so ids
/// are unique across restarts and failovers. Shown as Mooncake shows its UUIDs: `high-low`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskId(pub u128);

impl TaskId {
    /// The id of a task created by the record at `seq` in `epoch`.
    pub fn new(epoch: u64, seq: u64) -> TaskId {
        TaskId((u128::from(epoch) << 64) | u128::from(seq))
    }

    /// The two halves, as Mooncake's `UUID` pair: `(high, low)`.
    pub fn halves(self) -> (u64, u64) {
        ((self.0 >> 64) as u64, self.0 as u64)
    }

    /// The id of two halves (see [`TaskId::halves`]).
    pub fn from_halves(high: u64, low: u64) -> TaskId {
        TaskId((u128::from(high) << 64) | u128::from(low))
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (high, low) = self.halves();
        write!(f, "{high}-{low}")
    }
}

impl std::str::FromStr for TaskId {
    type Err = String;
    /// `high-low` (as displayed), or one decimal number.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a task id (HIGH-LOW, as `store copy` prints it)");
        match s.split_once('-') {
            Some((h, l)) => Ok(TaskId::from_halves(
                h.parse().map_err(|_| bad())?,
                l.parse().map_err(|_| bad())?,
            )),
            None => s.parse().map(TaskId).map_err(|_| bad()),
        }
    }
}

/// What a task does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskKind {
    /// Add a replica of the object on each of these nodes (Mooncake's `REPLICA_COPY`).
    Copy {
        /// The nodes (engine segment names).
        targets: Vec<String>,
    },
    /// Move the object's replica from `source` to `target` (Mooncake's `REPLICA_MOVE`).
    Move {
        /// The node that holds the replica now.
        source: String,
        /// The node it goes to.
        target: String,
    },
}

impl TaskKind {
    /// Mooncake's name of the kind.
    pub fn name(&self) -> &'static str {
        match self {
            TaskKind::Copy { .. } => "REPLICA_COPY",
            TaskKind::Move { .. } => "REPLICA_MOVE",
        }
    }

    /// The nodes that get a new replica.
    pub fn targets(&self) -> &[String] {
        match self {
            TaskKind::Copy { targets } => targets,
            TaskKind::Move { target, .. } => std::slice::from_ref(target),
        }
    }
}

/// Where a task is (Mooncake's `TaskStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Created; its client has not taken it yet.
    Pending,
    /// Its client is copying the bytes.
    Processing,
    /// Done: the new replicas are the object's (and a move's source is gone).
    Success,
    /// Ended without effect on the object; the message says why.
    Failed,
}

impl TaskState {
    /// Mooncake's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Processing => "PROCESSING",
            TaskState::Success => "SUCCESS",
            TaskState::Failed => "FAILED",
        }
    }

    /// Whether the task has ended (it changes no more).
    pub fn is_finished(self) -> bool {
        matches!(self, TaskState::Success | TaskState::Failed)
    }
}

/// What `task_query` answers (Mooncake's `QueryTaskResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task.
    pub id: TaskId,
    /// The object's key.
    pub key: String,
    /// What it does.
    pub kind: TaskKind,
    /// Where it is.
    pub state: TaskState,
    /// When it was created (master time, ms since the Unix epoch).
    pub created_ms: Millis,
    /// When its state last changed.
    pub updated_ms: Millis,
    /// The client that runs it (one holding a source replica).
    pub client: ClientId,
    /// Why it failed; empty otherwise.
    pub message: String,
}

/// A task handed to its client by `task_take`: copy `size` bytes from `source` (in the
/// client's own store space) to every target, then report with `task_end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskWork {
    /// The task.
    pub id: TaskId,
    /// The object's key (for logs).
    pub key: String,
    /// The replica to copy from, on the client's own node.
    pub source: ReplicaDesc,
    /// Where to copy to: space the master placed on the target nodes.
    pub targets: Vec<ReplicaDesc>,
    /// How long the client has, from the master's answer, before the master fails the task.
    pub deadline_ms: u64,
}

/// A task's running part, from its start to its end (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Work {
    /// The replica copied from.
    pub(crate) source: Replica,
    /// Space placed for the new replicas.
    #[serde(deserialize_with = "deserialize_replicas")]
    pub(crate) targets: Replicas,
    /// The object's size.
    pub(crate) size: u64,
    /// The object's stamp when the task started: another one at the end means the object was
    /// rewritten meanwhile and the copy may hold the old bytes.
    pub(crate) stamped: Millis,
    /// When it started.
    pub(crate) started: Millis,
    /// When the master fails it if its client has not ended it.
    pub(crate) until: Millis,
}

/// One task as the master keeps it (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Task {
    pub(crate) key: Box<str>,
    pub(crate) kind: TaskKind,
    pub(crate) client: ClientId,
    pub(crate) state: TaskState,
    pub(crate) created: Millis,
    pub(crate) updated: Millis,
    pub(crate) message: String,
    pub(crate) work: Option<Work>,
}

/// Every task the master knows, with the indexes its rules need.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tasks {
    all: BTreeMap<TaskId, Task>,
    /// Pending tasks by client, oldest first per client.
    pending: BTreeSet<(ClientId, TaskId)>,
    /// Finished tasks, in the order they finished: the oldest are dropped past the limit.
    finished: VecDeque<TaskId>,
    processing: usize,
    /// When unfinished tasks fail if nothing happens to them first, and each one's time.
    due: BTreeSet<(Millis, TaskId)>,
    due_at: HashMap<TaskId, Millis>,
    /// Running tasks per object: they keep it in place (see `Tasks::running`).
    running: HashMap<Box<str>, u32>,
    /// Takes of a pending task that found no room on a target (soft state).
    tries: HashMap<TaskId, u32>,
}

impl Tasks {
    pub(crate) fn get(&self, id: TaskId) -> Option<&Task> {
        self.all.get(&id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (TaskId, &Task)> {
        self.all.iter().map(|(&id, t)| (id, t))
    }

    /// Tasks waiting for any client.
    pub(crate) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Tasks being run.
    pub(crate) fn processing_count(&self) -> usize {
        self.processing
    }

    /// `client`'s pending tasks, oldest first.
    pub(crate) fn pending_of(&self, client: ClientId) -> Vec<TaskId> {
        self.pending
            .range((client, TaskId(0))..=(client, TaskId(u128::MAX)))
            .map(|&(_, id)| id)
            .collect()
    }

    /// Whether `client` has a pending task.
    pub(crate) fn has_pending(&self, client: ClientId) -> bool {
        self.pending
            .range((client, TaskId(0))..=(client, TaskId(u128::MAX)))
            .next()
            .is_some()
    }

    /// Adds a task (from a record or a snapshot), failing at `due` unless it is finished or
    /// running (a running one fails at its work's end of time); false if its id is taken.
    pub(crate) fn insert(&mut self, id: TaskId, task: Task, due: Option<Millis>) -> bool {
        if self.all.contains_key(&id) {
            return false;
        }
        match task.state {
            TaskState::Pending => {
                self.pending.insert((task.client, id));
                if let Some(due) = due {
                    self.set_due(id, due);
                }
            }
            TaskState::Processing => {
                self.processing += 1;
                *self.running.entry(task.key.clone()).or_insert(0) += 1;
                if let Some(w) = &task.work {
                    self.set_due(id, w.until);
                }
            }
            TaskState::Success | TaskState::Failed => self.finished.push_back(id),
        }
        self.all.insert(id, task);
        true
    }

    /// Moves a pending task to processing with `work` (due at its `until`).
    pub(crate) fn start(&mut self, id: TaskId, work: Work, now: Millis) -> Result<(), String> {
        let t = self
            .all
            .get_mut(&id)
            .ok_or_else(|| format!("start of unknown task {id}"))?;
        if t.state != TaskState::Pending {
            return Err(format!("start of task {id} in state {}", t.state.name()));
        }
        self.pending.remove(&(t.client, id));
        self.tries.remove(&id);
        *self.running.entry(t.key.clone()).or_insert(0) += 1;
        let until = work.until;
        self.processing += 1;
        t.state = TaskState::Processing;
        t.updated = now;
        t.work = Some(work);
        self.set_due(id, until);
        Ok(())
    }

    fn set_due(&mut self, id: TaskId, at: Millis) {
        self.clear_due(id);
        self.due.insert((at, id));
        self.due_at.insert(id, at);
    }

    fn clear_due(&mut self, id: TaskId) {
        if let Some(at) = self.due_at.remove(&id) {
            self.due.remove(&(at, id));
        }
    }

    /// Whether a task is copying `key`: the object is then neither evicted, removed without
    /// force, cleared nor overwritten in place, and keeps this protection across a restart
    /// (running tasks are durable).
    pub(crate) fn running(&self, key: &str) -> bool {
        !self.running.is_empty() && self.running.contains_key(key)
    }

    /// Counts one more take of pending task `id` that found no room; how many so far.
    pub(crate) fn no_room(&mut self, id: TaskId) -> u32 {
        let n = self.tries.entry(id).or_insert(0);
        *n += 1;
        *n
    }

    /// When the next unfinished task is due.
    pub(crate) fn next_due(&self) -> Option<Millis> {
        self.due.first().map(|&(t, _)| t)
    }

    /// Unfinished tasks due at or before `now`, earliest first.
    pub(crate) fn due_by(&self, now: Millis) -> Vec<TaskId> {
        self.due
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, id)| id)
            .collect()
    }

    /// `client`'s unfinished tasks.
    pub(crate) fn unfinished_of(&self, client: ClientId) -> Vec<TaskId> {
        self.all
            .iter()
            .filter(|(_, t)| t.client == client && !t.state.is_finished())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Ends a task that has not ended; returns its work, if it had started. Past `keep`
    /// finished tasks, the oldest are forgotten.
    pub(crate) fn finish(
        &mut self,
        id: TaskId,
        state: TaskState,
        message: String,
        now: Millis,
        keep: usize,
    ) -> Result<Option<Work>, String> {
        let t = self
            .all
            .get_mut(&id)
            .ok_or_else(|| format!("end of unknown task {id}"))?;
        match t.state {
            TaskState::Pending => {
                self.pending.remove(&(t.client, id));
            }
            TaskState::Processing => {
                self.processing -= 1;
                if let Some(n) = self.running.get_mut(&t.key) {
                    *n -= 1;
                    if *n == 0 {
                        self.running.remove(&t.key);
                    }
                }
            }
            done => return Err(format!("end of task {id}, already {}", done.name())),
        }
        self.tries.remove(&id);
        t.state = state;
        t.message = message;
        t.updated = now;
        let work = t.work.take();
        self.clear_due(id);
        self.finished.push_back(id);
        while self.finished.len() > keep {
            if let Some(old) = self.finished.pop_front() {
                self.all.remove(&old);
            }
        }
        Ok(work)
    }

    /// Drops the new replicas placed on a removed range from running tasks (the range's space
    /// is gone with it).
    pub(crate) fn forget_mount(&mut self, mount: super::types::MountId) {
        for t in self.all.values_mut() {
            if let Some(w) = t.work.as_mut() {
                w.targets.retain(|r| r.mount != mount);
            }
        }
    }

    /// Every task in a canonical order (snapshots): finished ones in the order they finished,
    /// after the others by id.
    pub(crate) fn to_vec(&self) -> Vec<(TaskId, Task)> {
        let mut out: Vec<(TaskId, Task)> = self
            .all
            .iter()
            .filter(|(_, t)| !t.state.is_finished())
            .map(|(&id, t)| (id, t.clone()))
            .collect();
        out.extend(
            self.finished
                .iter()
                .filter_map(|id| self.all.get(id).map(|t| (*id, t.clone()))),
        );
        out
    }

    pub(crate) fn info(&self, id: TaskId) -> Option<TaskInfo> {
        let t = self.all.get(&id)?;
        Some(TaskInfo {
            id,
            key: t.key.to_string(),
            kind: t.kind.clone(),
            state: t.state,
            created_ms: t.created,
            updated_ms: t.updated,
            client: t.client,
            message: t.message.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_show_and_parse_as_mooncake_pairs() {
        let id = TaskId::new(3, 17);
        assert_eq!(id.halves(), (3, 17));
        assert_eq!(id.to_string(), "3-17");
        assert_eq!("3-17".parse::<TaskId>().unwrap(), id);
        assert_eq!(TaskId::from_halves(3, 17), id);
        assert!("3-x".parse::<TaskId>().is_err());
        assert!("".parse::<TaskId>().is_err());
    }

    fn task(client: u128, state: TaskState) -> Task {
        Task {
            key: "k".into(),
            kind: TaskKind::Copy {
                targets: vec!["n".into()],
            },
            client: ClientId(client),
            state,
            created: 1,
            updated: 1,
            message: String::new(),
            work: None,
        }
    }

    #[test]
    fn finished_tasks_past_the_limit_are_forgotten_oldest_first() {
        let mut t = Tasks::default();
        for i in 1..=4 {
            assert!(t.insert(TaskId(i), task(1, TaskState::Pending), Some(10 + i as u64)));
        }
        assert!(!t.insert(TaskId(1), task(1, TaskState::Pending), None));
        assert_eq!(t.next_due(), Some(11));
        assert_eq!(t.due_by(12), vec![TaskId(1), TaskId(2)]);
        assert_eq!(t.pending_of(ClientId(1)).len(), 4);
        for i in 1..=3 {
            t.finish(TaskId(i), TaskState::Failed, "x".into(), 5, 2)
                .unwrap();
        }
        assert!(t.get(TaskId(1)).is_none());
        assert!(t.get(TaskId(2)).is_some() && t.get(TaskId(3)).is_some());
        assert_eq!(t.pending_of(ClientId(1)), vec![TaskId(4)]);
        assert_eq!(t.next_due(), Some(14));
        assert!(t
            .finish(TaskId(3), TaskState::Failed, "again".into(), 6, 2)
            .is_err());
        assert!(!t.has_pending(ClientId(2)));
    }
}
