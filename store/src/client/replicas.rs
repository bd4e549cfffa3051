//! Moving an object's bytes between this client's memory and its replicas: each transfer is a
//! list of [`Fragment`]s (a whole object is one; a ranged read, or a value gathered from
//! per-layer buffers, is several), all in flight together.

use std::sync::Arc;
use std::time::Instant;

use yuebing_engine::TransferRequest;

use super::staging::Scratch;
use super::telemetry::Op;
use super::Inner;
use crate::error::{Error, Result};
use crate::master::{ReplicaDesc, ReplicaList};

/// A contiguous part of a transfer: `len` bytes at `addr` in this client's registered memory,
/// and at `offset` inside the object (and so inside each of its replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Start in this client's registered memory.
    pub addr: u64,
    /// Start inside the object.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Fragment {
    /// All `len` bytes of an object, at `addr`.
    pub fn whole(addr: u64, len: u64) -> Fragment {
        Fragment {
            addr,
            offset: 0,
            len,
        }
    }

    /// Whether the fragment lies inside an object of `size` bytes (without overflow).
    pub(crate) fn inside(&self, size: u64) -> bool {
        self.offset
            .checked_add(self.len)
            .is_some_and(|end| end <= size)
    }
}

impl Inner {
    /// Writes `pieces` to every replica at once; the first failure is the result.
    pub(crate) async fn write_replicas(
        &self,
        pieces: &[Fragment],
        descs: &[ReplicaDesc],
        until: Instant,
        keep: Option<Arc<Scratch>>,
    ) -> Result<()> {
        let writes = descs.iter().map(|d| {
            let keep = keep.clone();
            async move {
                let r = self.transfer_pieces(d, pieces, until, true, keep).await;
                if r.is_err() {
                    self.peers.failed(&d.node);
                }
                r
            }
        });
        futures::future::join_all(writes)
            .await
            .into_iter()
            .collect()
    }

    /// Reads `pieces` of an object from its replicas in order; each replica gets an equal share
    /// of the time left. The transfers must end inside the lease (counted from `sent`, minus
    /// the margin), or the bytes may belong to a newer object: `LeaseExpired`.
    pub(crate) async fn read_object(
        &self,
        key: &str,
        list: &ReplicaList,
        sent: Instant,
        pieces: &[Fragment],
        until: Instant,
        keep: Option<Arc<Scratch>>,
    ) -> Result<()> {
        let lease_end = super::cache::lease_end(sent, list.lease_ms, self.cfg.lease_margin);
        let order = self.peers.order(&list.replicas);
        let mut last = None;
        for (i, d) in order.iter().enumerate() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            if now >= lease_end {
                // Never start a transfer outside the lease: the space may hold another object.
                return Err(Error::LeaseExpired { key: key.into() });
            }
            let share = (until - now) / (order.len() - i) as u32;
            let attempt_end = (now + share).min(lease_end);
            match self
                .transfer_pieces(d, pieces, attempt_end, false, keep.clone())
                .await
            {
                Ok(()) if Instant::now() > lease_end => {
                    return Err(Error::LeaseExpired { key: key.into() })
                }
                Ok(()) => {
                    self.metrics.took(Op::Get, list.size, sent.elapsed());
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(key, node = %d.node, error = %e, "replica failed, trying the next");
                    self.peers.failed(&d.node);
                    last = Some(e);
                }
            }
        }
        let now = Instant::now();
        Err(match last {
            // The attempts were cut at the lease's end: that is why they failed.
            _ if now >= lease_end && lease_end < until => Error::LeaseExpired { key: key.into() },
            _ if now >= until => Error::Timeout,
            Some(e) => e,
            None => Error::ReplicaNotReady { key: key.into() },
        })
    }

    /// Moves `pieces` between local memory and one replica within the deadline, all in flight
    /// together; the first failure is the result. `keep` (the scratch memory) is held until
    /// every transfer is over: if this future is dropped, the engine's transfers are dropped
    /// first, and from then on the engine no longer touches the memory.
    async fn transfer_pieces(
        &self,
        d: &ReplicaDesc,
        pieces: &[Fragment],
        until: Instant,
        write: bool,
        keep: Option<Arc<Scratch>>,
    ) -> Result<()> {
        if Instant::now() >= until {
            return Err(Error::Timeout);
        }
        let mut requests = Vec::with_capacity(pieces.len());
        for p in pieces {
            // The master's replica is the object's size; a fragment past it would touch the
            // memory of whatever lies next in the node's space.
            if !p.inside(d.len) {
                return Err(Error::params(format!(
                    "bytes {}+{} lie outside the object ({} bytes)",
                    p.offset, p.len, d.len
                )));
            }
            // The replica's address is the master's word: checked, not trusted to fit.
            let remote = d
                .addr
                .checked_add(p.offset)
                .filter(|r| r.checked_add(p.len).is_some())
                .ok_or_else(|| Error::Internal {
                    reason: format!(
                        "replica at {:#x} of {} bytes on {} overflows the address space",
                        d.addr, d.len, d.node
                    ),
                })?;
            requests.push((p, remote));
        }
        let handle = self.peers.handle(&d.node, until).await?;
        // The time left once the peer is known (its handshake may have taken some).
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        if handle == self.engine.own_segment() {
            for &(p, remote) in &requests {
                self.check_own_replica(remote, p.len)?;
            }
        }
        let request = |&(p, remote): &(&Fragment, u64)| {
            let req = match write {
                true => TransferRequest::write(p.addr, handle, remote, p.len),
                false => TransferRequest::read(p.addr, handle, remote, p.len),
            };
            self.engine.transfer(req.with_deadline(left))
        };
        // A tuple's fields drop in order: the transfers before the memory they move.
        match requests.as_slice() {
            [one] => {
                let mut op = (Box::pin(request(one)), keep);
                op.0.as_mut().await?;
            }
            many => {
                let mut op = (
                    futures::future::try_join_all(many.iter().map(request)),
                    keep,
                );
                (&mut op.0).await?;
            }
        }
        Ok(())
    }
}
