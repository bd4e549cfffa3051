//! Admission control: the caps on in-flight requests and bytes, with a bounded wait queue.
//!
//! A request first takes a slot of its connection, then as many byte permits as its size (capped at
//! the total, so one huge request can still run alone). Where a permit is not free the request
//! waits, but only while fewer than `queue_len` requests already wait there and for at most
//! `queue_timeout` (and never past its deadline); otherwise it gets [`Error::Overloaded`] without
//! being executed.
//!
//! A large request took its byte permits before its frame was read (see
//! [`budget`](crate::transport::budget)), from the same semaphore: admission keeps those
//! instead of charging it again, so one budget bounds the bytes being received and executed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Error;
use crate::transport::budget::frame_limit;
use crate::transport::{Payload, ReadBudget};

/// One wait point: a semaphore plus a count of waiters.
#[derive(Debug)]
struct Gate {
    name: &'static str,
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
}

impl Gate {
    fn new(name: &'static str, permits: usize) -> Self {
        Gate {
            name,
            permits: Arc::new(Semaphore::new(permits)),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Takes `n` permits, waiting (if fewer than `queue_len` wait already) until `wait()`
    /// has passed.
    async fn enter(
        &self,
        n: u32,
        queue_len: usize,
        wait: impl FnOnce() -> Duration,
    ) -> Result<OwnedSemaphorePermit, Error> {
        if let Ok(p) = self.permits.clone().try_acquire_many_owned(n) {
            return Ok(p);
        }
        let overloaded = |why: &str| Error::Overloaded {
            reason: format!("{} cap reached, {why}", self.name),
        };
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= queue_len {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(overloaded("wait queue full"));
        }
        let res = tokio::time::timeout(wait(), self.permits.clone().acquire_many_owned(n)).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match res {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_closed)) => Err(Error::ShuttingDown),
            Err(_elapsed) => Err(overloaded("waited too long")),
        }
    }
}

/// Server-wide admission state.
#[derive(Debug)]
pub(crate) struct Admission {
    bytes: Gate,
    bytes_cap: u32,
    /// Connections whose reader waits for byte permits.
    reads_waiting: Arc<AtomicUsize>,
    frame_limit: u64,
    per_connection: usize,
    queue_len: usize,
    queue_timeout: Duration,
}

/// Per-connection admission state.
#[derive(Debug)]
pub(crate) struct ConnAdmission {
    slots: Gate,
}

/// What an admitted request holds until it finishes.
#[derive(Debug)]
pub(crate) struct Admitted {
    _slot: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl Admission {
    pub(crate) fn new(cfg: &super::ServerConfig) -> Self {
        let bytes_cap = u32::try_from(cfg.max_in_flight_bytes.max(1)).unwrap_or(u32::MAX);
        Admission {
            bytes: Gate::new("in-flight bytes", bytes_cap as usize),
            bytes_cap,
            reads_waiting: Arc::default(),
            frame_limit: frame_limit(cfg.max_frame, u64::from(bytes_cap)),
            per_connection: cfg.max_in_flight_per_connection.max(1),
            queue_len: cfg.queue_len,
            queue_timeout: cfg.queue_timeout,
        }
    }

    /// The largest frame the server accepts: `max_frame`, or less where the byte budget is
    /// smaller (a larger frame could never get its permits).
    pub(crate) fn frame_limit(&self) -> u64 {
        self.frame_limit
    }

    /// A connection's reader's handle on the byte budget.
    pub(crate) fn read_budget(&self) -> ReadBudget {
        ReadBudget::new(
            self.bytes.permits.clone(),
            u64::from(self.bytes_cap),
            self.reads_waiting.clone(),
        )
    }

    /// Byte permits taken now: by frames being received and requests admitted or executing
    /// (and set aside for the reader first in line).
    pub(crate) fn bytes_taken(&self) -> u64 {
        let free = u64::try_from(self.bytes.permits.available_permits()).unwrap_or(u64::MAX);
        u64::from(self.bytes_cap).saturating_sub(free)
    }

    /// Connections not being read because their next frame waits for byte permits.
    pub(crate) fn reads_waiting(&self) -> usize {
        self.reads_waiting.load(Ordering::Acquire)
    }

    pub(crate) fn connection(&self) -> ConnAdmission {
        ConnAdmission {
            slots: Gate::new("in-flight requests per connection", self.per_connection),
        }
    }

    /// Waits for a slot on `conn` and byte permits for `payload` (unless its frame brought them),
    /// or refuses.
    pub(crate) async fn admit(
        &self,
        conn: &ConnAdmission,
        payload: Payload,
        deadline: Instant,
    ) -> Result<Admitted, Error> {
        let wait = || {
            deadline
                .saturating_duration_since(crate::clock::now())
                .min(self.queue_timeout)
        };
        let slot = conn.slots.enter(1, self.queue_len, wait).await?;
        let bytes = match payload.permit {
            Some(charged) => charged,
            None => {
                let n = u32::try_from(payload.len)
                    .unwrap_or(u32::MAX)
                    .clamp(1, self.bytes_cap);
                self.bytes.enter(n, self.queue_len, wait).await?
            }
        };
        Ok(Admitted {
            _slot: slot,
            _bytes: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::ServerConfig;

    fn cfg(per_conn: usize, queue: usize) -> ServerConfig {
        ServerConfig {
            max_in_flight_per_connection: per_conn,
            queue_len: queue,
            queue_timeout: Duration::from_millis(50),
            max_in_flight_bytes: 1000,
            ..ServerConfig::default()
        }
    }

    fn size(len: u64) -> Payload {
        Payload { len, permit: None }
    }

    fn later() -> Instant {
        crate::clock::now() + Duration::from_secs(10)
    }

    #[tokio::test]
    async fn full_queue_is_refused_at_once() {
        let a = Admission::new(&cfg(1, 0));
        let c = a.connection();
        let _held = a.admit(&c, size(10), later()).await.unwrap();
        let err = a.admit(&c, size(10), later()).await.unwrap_err();
        assert_eq!(err.code(), -2003);
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn waiter_gets_the_slot_when_freed_or_times_out() {
        let a = Arc::new(Admission::new(&cfg(1, 4)));
        let c = Arc::new(a.connection());
        let held = a.admit(&c, size(10), later()).await.unwrap();
        let err = a.admit(&c, size(10), later()).await.unwrap_err();
        assert!(
            matches!(err, Error::Overloaded { .. }),
            "timed out in queue"
        );
        let (a2, c2) = (a.clone(), c.clone());
        let waiter = tokio::spawn(async move { a2.admit(&c2, size(10), later()).await.is_ok() });
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn byte_cap_counts_sizes_and_lets_a_huge_request_run_alone() {
        let a = Admission::new(&cfg(10, 0));
        let c = a.connection();
        let big = a.admit(&c, size(5000), later()).await.unwrap();
        assert!(
            a.admit(&c, size(1), later()).await.is_err(),
            "all byte permits taken"
        );
        drop(big);
        let _x = a.admit(&c, size(600), later()).await.unwrap();
        assert!(a.admit(&c, size(600), later()).await.is_err());
        let _y = a.admit(&c, size(400), later()).await.unwrap();
    }

    #[tokio::test]
    async fn permits_taken_by_the_reader_are_kept_not_charged_again() {
        let a = Admission::new(&cfg(10, 0));
        let c = a.connection();
        let charged = a.bytes.permits.clone().try_acquire_many_owned(600).unwrap();
        let payload = Payload {
            len: 600,
            permit: Some(charged),
        };
        let big = a.admit(&c, payload, later()).await.unwrap();
        assert_eq!(a.bytes_taken(), 600);
        let _small = a.admit(&c, size(400), later()).await.unwrap();
        assert!(a.admit(&c, size(1), later()).await.is_err(), "budget spent");
        drop(big);
        assert_eq!(a.bytes_taken(), 400, "released when the request ends");
    }
}
