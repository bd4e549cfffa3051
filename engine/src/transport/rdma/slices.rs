//! One transfer's slices: which path each goes on, posting them a window at a time, posting a
//! failed one again on another path, and finality when the transfer's future is dropped.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use super::paths::{Path, PathKey};
use super::verbs::{WcStatus, WorkRequest, WrOp};
use super::{Inner, Peer, Published};
use crate::bounds::check_access;
use crate::error::Error;
use crate::request::Opcode;
use crate::transport::Job;

/// How often one slice may be posted again after other transfers' cancels flushed it.
const MAX_REQUEUES: u32 = 32;

/// A posted slice's end: its index, its tries so far, the path it went on, how it ended.
type Ended = (u64, usize, Arc<Path>, WcStatus);

/// The state of one transfer.
pub(super) struct Transfer {
    inner: Arc<Inner>,
    job: Job,
    peer: Arc<Peer>,
    published: Arc<Published>,
    /// The target range's rkey on each of the peer's NICs.
    rkeys: Vec<u32>,
    /// The local range's lkey on each local NIC.
    lkeys: Vec<u32>,
    /// Paths in the order to try them; the first `primary` are the nearest NICs'.
    order: Vec<PathKey>,
    primary: usize,
    slice: u64,
    count: u64,
    next: u64,
    /// Slices to post again, with their tries so far.
    retries: Vec<(u64, usize)>,
    turn: usize,
    /// Slices posted again after another transfer's cancel flushed them, with how often.
    requeued: HashMap<u64, u32>,
    failure: Option<Error>,
    flight: Flight,
}

impl Transfer {
    /// Resolves the keys and paths of `job`.
    pub(super) fn new(inner: Arc<Inner>, job: Job) -> Result<Transfer, Error> {
        let (peer, published) = inner.peer(&job.segment)?;
        let rkeys = published
            .rkeys(job.remote, job.len)
            .ok_or(Error::OutOfBounds {
                addr: job.remote,
                len: job.len,
            })?
            .to_vec();
        let local = job.local.addr();
        let gone = Error::AddressNotRegistered { addr: local };
        let (region, lkeys) = inner
            .regions
            .local_keys(local, job.len)
            .ok_or_else(|| gone.clone())?;
        // The keys must be those of the registration the lease is on, not of a later one at
        // the same address.
        if job.local.is_revoked() || region.serial != job.local.serial() {
            return Err(gone);
        }
        let (primary, order) = inner.candidates(region.location, published.nics.len());
        let slice = inner.config.slice_size.clamp(1, u64::from(u32::MAX));
        Ok(Transfer {
            count: job.len.div_ceil(slice),
            inner,
            job,
            peer,
            published,
            rkeys,
            lkeys,
            order,
            primary,
            slice,
            next: 0,
            retries: Vec::new(),
            turn: 0,
            requeued: HashMap::new(),
            failure: None,
            flight: Flight::default(),
        })
    }

    /// Moves every slice; resolves when all completed, or with the first error once every
    /// posted slice ended.
    pub(super) async fn run(mut self) -> Result<(), Error> {
        let mut waiting = FuturesUnordered::new();
        loop {
            while self.failure.is_none()
                && self.flight.posted < self.inner.config.max_inflight.max(1)
            {
                let (index, tries) = match self.retries.pop() {
                    Some(r) => r,
                    None if self.next < self.count => {
                        self.next += 1;
                        (self.next - 1, 0)
                    }
                    None => break,
                };
                if let Some(posted) = self.post(index, tries).await {
                    waiting.push(posted);
                }
            }
            let Some((index, tries, path, status)) = waiting.next().await else {
                break;
            };
            self.ended(index, tries, &path, status);
            let done = self.retries.is_empty() && self.next == self.count;
            if self.failure.is_none() && done && waiting.is_empty() {
                break;
            }
        }
        self.failure.take().map_or(Ok(()), Err)
    }

    /// The path for a slice on its `tries`-th try: the nearest NICs' paths in turn first, then
    /// any path not cooling down.
    fn pick(&mut self, tries: usize) -> Option<PathKey> {
        let peer_id = self.job.segment.instance_id;
        let cooldowns = &self.inner.cooldowns;
        let usable: Vec<PathKey> = self
            .order
            .iter()
            .copied()
            .filter(|&k| cooldowns.ready(peer_id, k))
            .collect();
        let first: Vec<PathKey> = self.order[..self.primary]
            .iter()
            .copied()
            .filter(|k| usable.contains(k))
            .collect();
        let turn = self.turn;
        self.turn = self.turn.wrapping_add(1);
        match (first.is_empty(), tries) {
            (false, 0) => Some(first[turn % first.len()]),
            _ if usable.is_empty() => None,
            _ => Some(usable[(turn + tries) % usable.len()]),
        }
    }

    /// Posts slice `index`; the future resolves when it ended. `None` when it could not be
    /// posted (it is retried, or the transfer failed).
    async fn post(&mut self, index: u64, tries: usize) -> Option<BoxFuture<'static, Ended>> {
        let Some(key) = self.pick(tries) else {
            self.fail(Error::PeerFailed {
                reason: format!(
                    "rdma: every path to {} failed recently",
                    self.job.segment.name
                ),
            });
            return None;
        };
        let offset = index * self.slice;
        let wr = WorkRequest {
            id: 0,
            op: match self.job.opcode {
                Opcode::Read => WrOp::Read,
                Opcode::Write => WrOp::Write,
            },
            local: self.job.local.addr() + offset,
            lkey: self.lkeys[key.0],
            remote: self.job.remote + offset,
            rkey: self.rkeys[key.1],
            // At most `slice`, which fits in u32.
            len: self.slice.min(self.job.len - offset) as u32,
        };
        let (inner, job) = (&self.inner, &self.job);
        let posted = match inner
            .path(&self.peer, &job.segment, &self.published, key)
            .await
        {
            Ok(path) => match path.post(wr).await {
                Ok(posted) => Ok((path, posted)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match posted {
            Ok((path, rx)) => {
                self.flight.add(&path);
                Some(
                    async move {
                        let status = rx.await.unwrap_or(WcStatus::Flushed);
                        (index, tries, path, status)
                    }
                    .boxed(),
                )
            }
            Err(e @ Error::StaleSegment { .. }) => {
                self.fail(e);
                None
            }
            Err(e) => {
                tracing::warn!(peer = %job.segment.name, path = ?key, error = %e, "rdma: path unavailable; trying another");
                let peer_id = job.segment.instance_id;
                inner.cooldowns.failed(peer_id, key, inner.config.cooldown);
                self.again(index, tries, e);
                None
            }
        }
    }

    /// Slice `index` ended on `path` with `status`.
    fn ended(&mut self, index: u64, tries: usize, path: &Arc<Path>, status: WcStatus) {
        self.flight.done(path);
        match status {
            WcStatus::Success => {}
            WcStatus::RemoteAccess => self.fail(refused(&self.job)),
            WcStatus::LocalProtection => self.fail(Error::AddressNotRegistered {
                addr: self.job.local.addr(),
            }),
            WcStatus::Flushed | WcStatus::Transport(_) => {
                if let WcStatus::Transport(code) = status {
                    tracing::warn!(peer = %self.job.segment.name, path = ?path.key, code, "rdma: path failed; it cools down and the slice goes on another");
                    let peer_id = self.job.segment.instance_id;
                    let period = self.inner.config.cooldown;
                    self.inner.cooldowns.failed(peer_id, path.key, period);
                }
                self.peer.discard(path);
                let requeued = self.requeued.entry(index).or_default();
                if status == WcStatus::Flushed && path.was_killed() && *requeued < MAX_REQUEUES {
                    // Flushed because another transfer was canceled on the same queue pair:
                    // no fault of the path, so no try used up (within a bound).
                    *requeued += 1;
                    self.retries.push((index, tries));
                    return;
                }
                let gave_up = Error::PeerFailed {
                    reason: format!(
                        "rdma: a slice failed on every path to {}",
                        self.job.segment.name
                    ),
                };
                self.again(index, tries, gave_up);
            }
        }
    }

    /// Posts slice `index` again, unless it was tried on as many paths as there are.
    fn again(&mut self, index: u64, tries: usize, otherwise: Error) {
        match tries < self.order.len() {
            true => self.retries.push((index, tries + 1)),
            false => self.fail(otherwise),
        }
    }

    /// The transfer fails with `e` (the first error wins); no more slices are posted.
    fn fail(&mut self, e: Error) {
        if self.failure.is_none() {
            self.failure = Some(e);
        }
    }
}

/// The error for a work request the target's NIC refused: the range is exported without the
/// right for the operation ([`Error::AccessDenied`]), or no longer registered there
/// ([`Error::OutOfBounds`]: the descriptor was stale).
fn refused(job: &Job) -> Error {
    let (addr, len) = (job.remote, job.len);
    // The descriptor's own check says which; where it allows the access, the range is gone.
    check_access(&job.segment.regions(), addr, len, job.opcode)
        .err()
        .unwrap_or(Error::OutOfBounds { addr, len })
}

/// The paths carrying a transfer's posted slices. Dropped with slices still posted (the
/// transfer's future dropped: canceled, past its deadline), it kills those paths: once the drop
/// returns, nothing of this transfer touches memory again.
#[derive(Default)]
struct Flight {
    posted: usize,
    by_path: Vec<(Arc<Path>, usize)>,
}

impl Flight {
    fn add(&mut self, path: &Arc<Path>) {
        self.posted += 1;
        match self.by_path.iter_mut().find(|(p, _)| Arc::ptr_eq(p, path)) {
            Some((_, n)) => *n += 1,
            None => self.by_path.push((path.clone(), 1)),
        }
    }

    fn done(&mut self, path: &Arc<Path>) {
        self.posted = self.posted.saturating_sub(1);
        if let Some(i) = self.by_path.iter().position(|(p, _)| Arc::ptr_eq(p, path)) {
            self.by_path[i].1 -= 1;
            if self.by_path[i].1 == 0 {
                self.by_path.swap_remove(i);
            }
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        for (path, _) in self.by_path.drain(..) {
            path.kill();
        }
    }
}
