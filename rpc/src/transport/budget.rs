//! The byte budget a server's reader draws on before it buffers a large frame.
//!
//! A frame whose payload (body plus attachment) is larger than [`CHARGE_ABOVE`] takes byte
//! permits from the server-wide semaphore behind `ServerConfig::max_in_flight_bytes` *before*
//! the reader allocates its buffer. While too few are free the reader waits and reads nothing
//! more from that connection, so the peer's bytes back up in TCP (its sends block) rather than in
//! this process. Once the permits are granted, the rest of the frame must arrive within the
//! server's payload timeout (see [`read`](super::read)), or the connection is closed and the
//! permits return: a peer cannot hold them by stalling mid-frame. The permits travel with the
//! decoded request ([`Payload`]); the server's admission takes them over instead of charging the
//! request again, and they are released when its handler finishes. Smaller frames are read at once and charged at admission, with its
//! bounded wait queue and `Overloaded` answers.
//!
//! A reader with a budget accepts no frame larger than the whole budget ([`frame_limit`]): such
//! a frame could never get its permits, so it is refused with `FrameTooLarge` like any frame
//! over the limit, and the server announces the lower limit in its preamble reply.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Frames with a payload up to this size are read without waiting for permits: a read buffer
/// holds that much anyway.
pub(crate) const CHARGE_ABOVE: u64 = 64 << 10;

/// The largest payload a reader accepts when its frames are charged against `budget` bytes and
/// it would otherwise accept `max_frame`.
pub(crate) fn frame_limit(max_frame: u64, budget: u64) -> u64 {
    max_frame.min(budget.max(CHARGE_ABOVE))
}

/// A received request's payload size and, if its frame was charged before it was read, the byte
/// permits it holds.
#[derive(Debug, Default)]
pub(crate) struct Payload {
    /// Body plus attachment, in bytes.
    pub(crate) len: u64,
    /// Permits for `len` bytes, taken before the frame was buffered.
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

/// One connection's handle on the server-wide byte budget.
#[derive(Debug)]
pub(crate) struct ReadBudget {
    permits: Arc<Semaphore>,
    total: u64,
    waiting: Arc<AtomicUsize>,
}

/// What a frame needs from the budget before its payload is read.
pub(crate) enum Charge {
    /// A small frame: read it now; admission charges it later.
    Free,
    /// Permits for the whole payload, taken at once.
    Held(OwnedSemaphorePermit),
    /// Too few permits are free: poll this before reading on.
    Wait(PermitWait),
    /// More than the whole budget; refuse it (the reader's limit normally does so first).
    OverBudget,
}

impl ReadBudget {
    /// A budget of `total` permits from `permits`; readers waiting on it are counted in
    /// `waiting`.
    pub(crate) fn new(permits: Arc<Semaphore>, total: u64, waiting: Arc<AtomicUsize>) -> Self {
        ReadBudget {
            permits,
            total,
            waiting,
        }
    }

    /// The whole budget, in bytes.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// What a frame of `payload` bytes needs before it is read.
    pub(crate) fn charge(&self, payload: u64) -> Charge {
        if payload <= CHARGE_ABOVE {
            return Charge::Free;
        }
        let Some(n) = u32::try_from(payload)
            .ok()
            .filter(|_| payload <= self.total)
        else {
            return Charge::OverBudget;
        };
        match self.permits.clone().try_acquire_many_owned(n) {
            Ok(permit) => Charge::Held(permit),
            // A closed semaphore fails the wait at its first poll.
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => {
                self.waiting.fetch_add(1, Ordering::AcqRel);
                Charge::Wait(PermitWait {
                    acquire: Box::pin(self.permits.clone().acquire_many_owned(n)),
                    waiting: self.waiting.clone(),
                })
            }
        }
    }
}

/// A reader's wait for byte permits; dropping it leaves the semaphore's queue.
pub(crate) struct PermitWait {
    acquire: Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>,
    waiting: Arc<AtomicUsize>,
}

impl PermitWait {
    /// The permits, once free; an error only if the semaphore was closed.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<OwnedSemaphorePermit, AcquireError>> {
        self.acquire.as_mut().poll(cx)
    }
}

impl Drop for PermitWait {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: u64) -> ReadBudget {
        ReadBudget::new(
            Arc::new(Semaphore::new(total as usize)),
            total,
            Arc::default(),
        )
    }

    #[test]
    fn limit_is_capped_by_the_budget_but_small_frames_always_fit() {
        assert_eq!(frame_limit(64 << 20, 1 << 30), 64 << 20);
        assert_eq!(frame_limit(64 << 20, 16 << 20), 16 << 20);
        assert_eq!(frame_limit(64 << 20, 1), CHARGE_ABOVE);
        assert_eq!(frame_limit(100, 1), 100);
    }

    #[tokio::test]
    async fn large_frames_wait_in_turn_and_small_ones_do_not() {
        let b = budget(1 << 20);
        assert!(matches!(b.charge(CHARGE_ABOVE), Charge::Free));
        assert!(matches!(b.charge((1 << 20) + 1), Charge::OverBudget));
        let Charge::Held(first) = b.charge(600 << 10) else {
            panic!("free permits are taken at once")
        };
        let Charge::Wait(mut wait) = b.charge(600 << 10) else {
            panic!("too few permits left")
        };
        assert_eq!(b.waiting.load(Ordering::Acquire), 1);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(wait.poll(&mut cx).is_pending());
        drop(first);
        let Poll::Ready(Ok(second)) = wait.poll(&mut cx) else {
            panic!("released permits go to the waiter")
        };
        assert_eq!(second.num_permits(), 600 << 10);
        drop(wait);
        assert_eq!(b.waiting.load(Ordering::Acquire), 0);
    }
}
