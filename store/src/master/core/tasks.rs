//! Copy and move tasks: creation, the running client's take and end, queries, and the
//! timeouts that fail tasks nobody finishes (see [`task`](crate::master::task)).
//!
//! While a task runs its object stays in place: it is neither evicted, removed without force,
//! cleared nor overwritten in place under the copy (a running task is durable state, so this
//! holds across a restart too); and the end checks that the object is still the one copied
//! (same stamp, the source replica still its own, the new ranges still live) before the new
//! replicas join it.

use super::Master;
use crate::error::{Error, Result};
use crate::master::log::Record;
use crate::master::object::Replicas;
use crate::master::space::Replica;
use crate::master::task::{TaskId, TaskInfo, TaskKind, TaskState, TaskWork, Work};
use crate::master::types::{ClientId, Millis};

/// What taking one pending task came to.
enum Take {
    Started(TaskWork),
    /// Every target holds a replica already: done without a copy.
    Done,
    /// Not now (no room on a target yet, or an in-place upsert runs): the next take retries.
    Later,
    Failed(String),
}

impl Master {
    /// Creates a task that adds a replica of `key` on each of `targets` (node names) that has
    /// none yet, run by the client of one of its replicas, chosen at random (Mooncake's
    /// `CreateCopyTask`). A target holding a replica already is left as it is: a copy there
    /// succeeds without moving a byte, as in Mooncake.
    ///
    /// Errors: `InvalidParams` (bad key, no or repeated targets, a target with no store space
    /// that takes replicas), `ObjectNotFound`, `ReplicaNotReady` (no replica whose client is
    /// live), `TaskPendingLimitExceeded`.
    pub fn task_copy(&mut self, now: Millis, key: &str, targets: &[String]) -> Result<TaskId> {
        let now = self.tick(now);
        self.check_key(key)?;
        if targets.is_empty() {
            return Err(Error::params("a copy task needs at least one target node"));
        }
        for (i, t) in targets.iter().enumerate() {
            crate::args::node(t, "target node")?;
            if targets[..i].contains(t) {
                return Err(Error::params(format!("target node {t:?} is named twice")));
            }
        }
        let o = self
            .objects
            .get(key)
            .ok_or_else(|| Error::ObjectNotFound { key: key.into() })?;
        self.check_targets(targets)?;
        let clients: Vec<ClientId> = o
            .replicas
            .iter()
            .filter_map(|r| self.runner_of(r))
            .collect();
        if clients.is_empty() {
            return Err(Error::ReplicaNotReady { key: key.into() });
        }
        let client = clients[self.rng.usize(..clients.len())];
        let kind = TaskKind::Copy {
            targets: targets.to_vec(),
        };
        self.create_task(now, key, kind, client)
    }

    /// Creates a task that moves `key`'s replica on node `source` to node `target`, run by
    /// the client of that replica (Mooncake's `CreateMoveTask`).
    ///
    /// Errors: `InvalidParams` (bad names, `source` = `target`, no replica on `source`, a
    /// target with no store space that takes replicas or holding a replica already),
    /// `ObjectNotFound`, `ReplicaNotReady` (the source's client is not live),
    /// `TaskPendingLimitExceeded`.
    pub fn task_move(
        &mut self,
        now: Millis,
        key: &str,
        source: &str,
        target: &str,
    ) -> Result<TaskId> {
        let now = self.tick(now);
        self.check_key(key)?;
        crate::args::node(source, "source node")?;
        crate::args::node(target, "target node")?;
        if source == target {
            return Err(Error::params(format!("a move from {source:?} to itself")));
        }
        let o = self
            .objects
            .get(key)
            .ok_or_else(|| Error::ObjectNotFound { key: key.into() })?;
        self.check_targets(std::slice::from_ref(&target.to_string()))?;
        if self.holds(&o.replicas, target) {
            return Err(Error::params(format!(
                "{key:?} has a replica on {target:?} already"
            )));
        }
        let replica = o
            .replicas
            .iter()
            .find(|r| self.space.node_of(r.mount) == Some(source))
            .ok_or_else(|| Error::params(format!("{key:?} has no replica on {source:?}")))?;
        let client = self
            .runner_of(replica)
            .ok_or_else(|| Error::ReplicaNotReady { key: key.into() })?;
        let kind = TaskKind::Move {
            source: source.into(),
            target: target.into(),
        };
        self.create_task(now, key, kind, client)
    }

    /// What the master knows of a task (Mooncake's `QueryTask`). Errors: `TaskNotFound`.
    pub fn task_query(&self, id: TaskId) -> Result<TaskInfo> {
        self.tasks.info(id).ok_or_else(|| Error::TaskNotFound {
            task: id.to_string(),
        })
    }

    /// The caller's pending tasks, started: for each, space is placed on the target nodes, and
    /// the object is kept in place until the task ends (not evicted, removed without force,
    /// cleared or overwritten in place: see `Tasks::running`). Tasks that cannot start now (no room
    /// on a target yet: retried up to `max_task_retries` takes; an in-place upsert of the
    /// object runs) stay pending; tasks that cannot start at all (the object or its source
    /// replica is gone) fail. At most `max_processing_tasks` run at once. A client the master
    /// does not count as live gets none.
    pub fn task_take(&mut self, client: ClientId, now: Millis) -> Result<Vec<TaskWork>> {
        let now = self.tick(now);
        if self.clients.get(&client).is_none_or(|c| c.need_remount) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for id in self.tasks.pending_of(client) {
            if self.tasks.processing_count() >= self.cfg.max_processing_tasks {
                break;
            }
            match self.take_one(client, now, id) {
                Take::Started(work) => out.push(work),
                Take::Done => self.end_task(now, id, None, now),
                Take::Later => {}
                Take::Failed(why) => self.end_task(now, id, Some(why), now),
            }
        }
        Ok(out)
    }

    /// The caller reports how its copy for task `id` ended: `None` when every byte is in
    /// place, else its error's code and message. On success the new replicas join the object
    /// if it is still the one copied (else the task fails, its space freed); on failure their
    /// space is held until the task's release time (late bytes may still land). A repeated end
    /// is `Ok`.
    ///
    /// Errors: `TaskNotFound`, `IllegalClient` (another client's task), `InvalidParams` (a
    /// task not taken yet).
    pub fn task_end(
        &mut self,
        client: ClientId,
        now: Millis,
        id: TaskId,
        error: Option<(i32, String)>,
    ) -> Result<()> {
        let now = self.tick(now);
        let t = self.tasks.get(id).ok_or_else(|| Error::TaskNotFound {
            task: id.to_string(),
        })?;
        if t.client != client {
            return Err(Error::IllegalClient {
                key: format!("task {id}"),
            });
        }
        let w = match (t.state, &t.work) {
            (TaskState::Success | TaskState::Failed, _) => return Ok(()),
            (TaskState::Processing, Some(w)) => w,
            _ => return Err(Error::params(format!("task {id} has not been taken yet"))),
        };
        let release = self.task_release(w);
        if let Some((code, message)) = error {
            let why = format!("the copy failed: {message} (code {code})");
            self.end_task(now, id, Some(why), release);
            return Ok(());
        }
        match self.copied_object(&t.key, &t.kind, w) {
            // The client's writes are over: nothing of them can land later.
            Err(why) => self.end_task(now, id, Some(why), now),
            // A moved source stays out of use while readers may still read it.
            Ok(lease_until) => self.end_task(now, id, None, self.reuse_after(lease_until)),
        }
        Ok(())
    }

    /// Fails the unfinished tasks due by `now`: pending ones not taken within the pending
    /// timeout, running ones past their end of time (their space held until their release
    /// time: the client may still be writing).
    pub(crate) fn expire_tasks(&mut self, now: Millis) {
        for id in self.tasks.due_by(now) {
            let Some(t) = self.tasks.get(id) else {
                continue;
            };
            let (why, hold) = match &t.work {
                Some(w) => (
                    format!(
                        "not ended within {} ms of its start",
                        self.cfg.processing_task_timeout_ms
                    ),
                    self.task_release(w),
                ),
                None => (
                    format!(
                        "not taken by its client within {} ms",
                        self.cfg.pending_task_timeout_ms
                    ),
                    now,
                ),
            };
            self.end_task(now, id, Some(why), hold);
        }
    }

    /// Fails `client`'s unfinished tasks (it expired or left): a running one's space is held
    /// until its release time.
    pub(crate) fn fail_tasks_of(&mut self, now: Millis, client: ClientId) {
        for id in self.tasks.unfinished_of(client) {
            let hold = self
                .tasks
                .get(id)
                .and_then(|t| t.work.as_ref())
                .map_or(now, |w| self.task_release(w));
            let why = "its client expired or left".to_string();
            self.end_task(now, id, Some(why), hold);
        }
    }

    /// When the next unfinished task is due.
    pub(crate) fn task_timeout(&self) -> Option<Millis> {
        self.tasks.next_due()
    }

    /// When a task created at `now` fails if not taken (none with a pending timeout of 0).
    pub(crate) fn pending_task_due(&self, now: Millis) -> Option<Millis> {
        match self.cfg.pending_task_timeout_ms {
            0 => None,
            t => Some(now.saturating_add(t)),
        }
    }

    /// Whether `client` has tasks to take (its ping says so).
    pub(crate) fn has_tasks(&self, client: ClientId) -> bool {
        self.tasks.has_pending(client)
    }

    fn create_task(
        &mut self,
        now: Millis,
        key: &str,
        kind: TaskKind,
        client: ClientId,
    ) -> Result<TaskId> {
        let limit = self.cfg.max_pending_tasks;
        if self.tasks.pending_count() >= limit {
            return Err(Error::TaskPendingLimitExceeded {
                limit: limit as u64,
            });
        }
        // The id is the record's own position, so it is never handed out twice.
        let id = TaskId::new(self.epoch, self.seq + 1);
        let record = Record::TaskCreate {
            id,
            key: key.into(),
            kind,
            client,
        };
        self.commit(now, record);
        Ok(id)
    }

    fn end_task(&mut self, now: Millis, id: TaskId, error: Option<String>, hold_until: Millis) {
        let record = Record::TaskEnd {
            id,
            error,
            hold_until,
        };
        self.commit(now, record);
    }

    /// Until when a running task's target space stays out of use once it failed: its client
    /// may write there until the task's end of time (counted from when it got the task, a
    /// little after the master's `until`), and bytes of a transfer cut off then may land later,
    /// as a revoked put's (see `put_release_ms`).
    fn task_release(&self, w: &Work) -> Millis {
        let put = w.started.saturating_add(self.cfg.put_release_ms);
        put.max(w.until.saturating_add(self.cfg.put_discard_ms))
    }

    /// Every target has store space that takes replicas.
    fn check_targets(&self, targets: &[String]) -> Result<()> {
        match targets.iter().find(|t| !self.space.node_allocatable(t)) {
            Some(t) => Err(Error::params(format!(
                "target node {t:?} has no store space that takes replicas (not mounted, not \
                 remounted yet, or being unmounted)"
            ))),
            None => Ok(()),
        }
    }

    /// Whether one of `replicas` lies on node `node`.
    fn holds(&self, replicas: &Replicas, node: &str) -> bool {
        replicas
            .iter()
            .any(|r| self.space.node_of(r.mount) == Some(node))
    }

    /// The live client whose readable range holds `r`: the one to run a task from it.
    fn runner_of(&self, r: &Replica) -> Option<ClientId> {
        let m = self.space.get(r.mount).filter(|m| m.ready)?;
        let live = self.clients.get(&m.client).is_some_and(|c| !c.need_remount);
        live.then_some(m.client)
    }

    fn take_one(&mut self, client: ClientId, now: Millis, id: TaskId) -> Take {
        let Some(t) = self.tasks.get(id) else {
            return Take::Later;
        };
        let (key, kind) = (t.key.clone(), t.kind.clone());
        let Some(o) = self.objects.get(&key) else {
            return Take::Failed(format!("{key:?} is gone"));
        };
        if o.writing && self.writes.get(&key).is_some_and(|w| w.in_place) {
            return Take::Later;
        }
        let own = |r: &&Replica| self.runner_of(r) == Some(client);
        let source = match &kind {
            TaskKind::Copy { .. } => o.replicas.iter().find(own),
            TaskKind::Move { source, .. } => o
                .replicas
                .iter()
                .find(|r| self.space.node_of(r.mount) == Some(source.as_str()))
                .filter(own),
        };
        let Some(&source) = source else {
            return Take::Failed(format!(
                "{key:?} has no replica in this client's store space any more"
            ));
        };
        // A copy's targets that hold a replica already need none; a move's target must not.
        let targets: Vec<&String> = kind
            .targets()
            .iter()
            .filter(|t| !self.holds(&o.replicas, t))
            .collect();
        match &kind {
            TaskKind::Copy { .. } if targets.is_empty() => return Take::Done,
            TaskKind::Move { target, .. } if targets.is_empty() => {
                return Take::Failed(format!("{key:?} has a replica on {target:?} already"));
            }
            _ => {}
        }
        let size = o.size;
        let mut placed = Replicas::new();
        for t in targets {
            match self.space.place_on(t, size) {
                Some(r) => placed.push(r),
                None => {
                    placed.iter().for_each(|r| self.space.free(*r, size));
                    return self.no_room(id, t, size);
                }
            }
        }
        let until = now.saturating_add(self.cfg.processing_task_timeout_ms);
        let describe = |r: &Replica| self.space.describe(r, size);
        let (Some(src), Some(dst)) = (
            describe(&source),
            placed.iter().map(describe).collect::<Option<Vec<_>>>(),
        ) else {
            placed.iter().for_each(|r| self.space.free(*r, size));
            return Take::Failed("a replica's range vanished".into());
        };
        self.commit(
            now,
            Record::TaskStart {
                id,
                source,
                targets: placed,
                until,
            },
        );
        Take::Started(TaskWork {
            id,
            key: key.into(),
            source: src,
            targets: dst,
            deadline_ms: self.cfg.processing_task_timeout_ms,
        })
    }

    /// No room for `size` bytes on `target`: retried at later takes, up to the limit.
    fn no_room(&mut self, id: TaskId, target: &str, size: u64) -> Take {
        let tries = self.tasks.no_room(id);
        match tries > self.cfg.max_task_retries {
            true => Take::Failed(format!(
                "no room for {size} bytes on {target:?} in {tries} tries"
            )),
            false => Take::Later,
        }
    }

    /// Whether `key` is still the object a task copied (`Ok` with its lease's end), or why
    /// not: it was removed or rewritten, lost its source replica, or a target range went.
    fn copied_object(&self, key: &str, kind: &TaskKind, w: &Work) -> Result<Millis, String> {
        let o = self
            .objects
            .get(key)
            .ok_or_else(|| format!("{key:?} is gone"))?;
        if o.stamped != w.stamped || o.size != w.size || !o.replicas.contains(&w.source) {
            return Err(format!("{key:?} was rewritten or lost its source replica"));
        }
        if o.writing && self.writes.get(key).is_some_and(|wr| wr.in_place) {
            return Err(format!("{key:?} is being overwritten"));
        }
        // The new replicas' ranges must still take replicas: one being unmounted (or not
        // remounted since a restart) would take the new replica away with it, a move's only
        // one included.
        let live = |r: &Replica| {
            self.space
                .get(r.mount)
                .is_some_and(|m| m.ready && m.draining_until.is_none())
        };
        if !w.targets.iter().all(live) {
            return Err("a target's store space is being unmounted".into());
        }
        // A target the object got a replica on meanwhile needs none; one without a replica
        // must have its new one (its range may have gone with the node's store space).
        let covered = kind.targets().iter().all(|t| {
            self.holds(&o.replicas, t)
                || w.targets
                    .iter()
                    .any(|r| self.space.node_of(r.mount) == Some(t.as_str()))
        });
        if !covered {
            return Err("a target's store space was removed".into());
        }
        Ok(o.lease_until)
    }
}
