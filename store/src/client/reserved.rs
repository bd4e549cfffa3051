//! Puts in three steps, for callers that write an object in ranges as they produce it (a KV
//! block layer by layer, Mooncake's put sessions): [`Client::batch_reserve`] asks the master
//! to place each object (one round trip for the batch), [`Client::batch_write_reserved`] writes
//! ranges of them from registered memory (no master round trip), and
//! [`Client::batch_publish`] makes them readable, or [`Client::batch_revoke`] drops them (one
//! round trip each).
//!
//! A [`Reservation`] is sealed once its publication or revocation starts: writes that have
//! started are waited for, and later ones are refused, so that no byte lands in the space after
//! the master was told it is complete, or after it was handed back for other objects.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::RwLock;

use super::located::{in_object, Pieces};
use super::sift::Sifted;
use super::{Client, Fragment, Options};
use crate::args;
use crate::error::{Error, Result};
use crate::master::{ClientId, ReplicaDesc};

/// Space the master placed for one object, not readable yet: write it with
/// [`Client::batch_write_reserved`] within the deadline of the call that reserved it, then
/// publish or revoke it. Clones share one reservation. A reservation neither published nor
/// revoked is revoked by the master when it ends this client's lease, or when the put is
/// older than its `put_release_ms`.
#[derive(Debug, Clone)]
pub struct Reservation {
    inner: Arc<Reserved>,
}

#[derive(Debug)]
struct Reserved {
    /// The client that reserved it: only its writes, publication and revocation are taken.
    client: ClientId,
    key: String,
    size: u64,
    replicas: Vec<ReplicaDesc>,
    /// The deadline of the call that reserved it: writes end by then too.
    until: Instant,
    /// `true` once a publication or revocation started. Writes hold it shared while they
    /// run; sealing takes it exclusively, so it waits for every running write.
    sealed: Arc<RwLock<bool>>,
    /// Set when a write started and did not succeed (failed, timed out, or was dropped): some
    /// replica may hold partial bytes, so the reservation may only be revoked.
    failed: AtomicBool,
}

/// Marks a reservation failed when dropped armed: a write that did not reach its end.
struct Attempt<'a>(&'a AtomicBool, bool);

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::Release);
        }
    }
}

impl Reservation {
    /// The object's key.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The object's size in bytes, as reserved.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Whether its publication or revocation has started (no write is taken any more).
    pub fn sealed(&self) -> bool {
        self.inner
            .sealed
            .try_read()
            .map(|sealed| *sealed)
            .unwrap_or(true)
    }

    /// Seals it, once every write that holds it has ended.
    async fn seal(&self) {
        *self.inner.sealed.write().await = true;
    }
}

impl Client {
    /// Reserves space for each `(key, size)` object (a put, or with
    /// [`Write::Upsert`](crate::Write) an upsert, with the replica settings of `opts`) without
    /// writing it: one master round trip for the batch. One result per item, in order.
    pub fn batch_reserve<K: AsRef<str>>(
        &self,
        items: &[(K, u64)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<Reservation>>>> + Send + 'static {
        let opts = opts.into();
        let cfg = self.put_config(&opts);
        let sifted = Sifted::new(items, |(key, size)| {
            args::key(key.as_ref())?;
            args::size(*size)?;
            args::put_config(&cfg)?;
            Ok((key.as_ref().to_string(), *size))
        });
        self.call(move |c| async move {
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = c.until(&opts);
            let placed = c
                .put_starts(&sifted.passed, &cfg, opts.write, until)
                .await?;
            let reserved = sifted.passed.iter().zip(placed).map(|((key, size), p)| {
                Ok(Reservation {
                    inner: Arc::new(Reserved {
                        client: c.inner.id,
                        key: key.clone(),
                        size: *size,
                        replicas: p?,
                        until,
                        sealed: Arc::new(RwLock::new(false)),
                        failed: AtomicBool::new(false),
                    }),
                })
            });
            let reserved: Vec<_> = reserved.collect();
            Ok(sifted.merge(reserved))
        })
    }

    /// For each `(reservation, fragments)`, writes each fragment's `len` bytes of registered
    /// memory at `addr` to `offset` inside the reserved object, on every replica; no master
    /// round trip. One result per item: the bytes written (the fragments' total), or why
    /// nothing more was written (a fragment outside the object or a bad address:
    /// `InvalidParams`, and none of the item's fragments are written; a sealed reservation:
    /// `InvalidParams`; past the reserving call's deadline: `Timeout`). Every fragment of every
    /// item is in flight together. The memory is read until the call ends.
    pub fn batch_write_reserved<F: AsRef<[Fragment]>>(
        &self,
        items: &[(&Reservation, F)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<u64>>>> + Send + 'static {
        let opts = opts.into();
        let items: Vec<(Reservation, Result<Pieces>)> = items
            .iter()
            .map(|(r, f)| {
                let checked = self
                    .owns(r)
                    .and_then(|()| in_object(&r.inner.key, r.inner.size, f.as_ref()));
                ((*r).clone(), checked)
            })
            .collect();
        self.call(move |c| async move {
            let until = c.until(&opts);
            let writes = items.into_iter().map(|(r, checked)| {
                let c = &c;
                async move {
                    let (pieces, total) = checked?;
                    // Held until the transfers are over: a seal waits for them.
                    let sealed = r.inner.sealed.clone().read_owned().await;
                    if *sealed {
                        return Err(Error::params(format!(
                            "the reservation of {:?} was published or revoked",
                            r.inner.key
                        )));
                    }
                    let until = until.min(r.inner.until);
                    if Instant::now() >= until {
                        return Err(Error::Timeout);
                    }
                    let mut attempt = Attempt(&r.inner.failed, true);
                    c.inner
                        .write_replicas(&pieces, &r.inner.replicas, until, None)
                        .await?;
                    attempt.1 = false;
                    drop(sealed);
                    Ok(total)
                }
            });
            Ok(futures::future::join_all(writes).await)
        })
    }

    /// Seals each reservation (waiting for its running writes) and makes its object readable:
    /// one master round trip. One result per reservation, in order. A publication whose
    /// answer was lost may be asked again (the master answers a repeated one `Ok`). Refused
    /// in its place, and not sent: a reservation one of whose writes did not succeed
    /// (`InvalidWrite`: a replica may hold partial bytes; revoke it), and one past the deadline
    /// of the call that reserved it (`Timeout`: the master may have given its key to a newer
    /// put by then, and revokes it itself).
    pub fn batch_publish(
        &self,
        reservations: &[Reservation],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        self.finish(reservations, opts.into(), true)
    }

    /// Seals each reservation (waiting for its running writes) and revokes it: the object is
    /// not stored, and its key is free for a new put at once. The master holds the space until
    /// the put's release time, as for any revoked put (bytes of a transfer that timed out may
    /// still land there). One master round trip; one result per reservation, in order. One
    /// past the deadline of the call that reserved it is not sent (a revoke by key could end a
    /// newer put of the key): the master revokes it itself, and it answers `Ok`.
    pub fn batch_revoke(
        &self,
        reservations: &[Reservation],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        self.finish(reservations, opts.into(), false)
    }

    /// `InvalidParams` for a reservation another client made (its write is that client's at
    /// the master; bytes written here would go into another client's object).
    fn owns(&self, r: &Reservation) -> Result<()> {
        match r.inner.client == self.inner.id {
            true => Ok(()),
            false => Err(Error::params(format!(
                "the reservation of {:?} belongs to another client",
                r.inner.key
            ))),
        }
    }

    fn finish(
        &self,
        reservations: &[Reservation],
        opts: Options,
        publish: bool,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        let reservations = reservations.to_vec();
        self.call(move |c| async move {
            let until = c.until(&opts);
            for r in &reservations {
                tokio::time::timeout_at(until.into(), r.seal())
                    .await
                    .map_err(|_| Error::Timeout)?;
            }
            // Each reservation's answer known here, or `None`: sent to the master.
            let now = Instant::now();
            let known: Vec<Option<Result<()>>> = reservations
                .iter()
                .map(|r| match (publish, now >= r.inner.until) {
                    _ if c.owns(r).is_err() => Some(c.owns(r)),
                    (true, _) if r.inner.failed.load(Ordering::Acquire) => {
                        Some(Err(Error::InvalidWrite {
                            key: r.inner.key.clone(),
                            reason: "a write of it did not succeed: revoke it".into(),
                        }))
                    }
                    (true, true) => Some(Err(Error::Timeout)),
                    // Left to the master (see `batch_revoke`).
                    (false, true) => Some(Ok(())),
                    (_, false) => None,
                })
                .collect();
            let keys: Vec<String> = reservations
                .iter()
                .zip(&known)
                .filter(|(_, k)| k.is_none())
                .map(|(r, _)| r.inner.key.clone())
                .collect();
            let sent = keys.len();
            let results = c.batch_call(until, keys, publish).await?;
            if results.len() != sent {
                return Err(Error::Internal {
                    reason: format!(
                        "the master answered {} results for {sent} keys",
                        results.len()
                    ),
                });
            }
            let mut results = results.into_iter();
            Ok(known
                .into_iter()
                .map(|k| {
                    k.unwrap_or_else(|| {
                        results.next().unwrap_or_else(|| {
                            Err(Error::Internal {
                                reason: "fewer results than keys sent".into(),
                            })
                        })
                    })
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation() -> Reservation {
        Reservation {
            inner: Arc::new(Reserved {
                client: ClientId(1),
                key: "k".into(),
                size: 10,
                replicas: Vec::new(),
                until: Instant::now(),
                sealed: Arc::new(RwLock::new(false)),
                failed: AtomicBool::new(false),
            }),
        }
    }

    #[tokio::test]
    async fn a_seal_waits_for_every_write_that_holds_the_reservation() {
        let r = reservation();
        let writes = [
            r.inner.sealed.clone().read_owned().await,
            r.inner.sealed.clone().read_owned().await,
        ];
        let sealing = tokio::spawn({
            let r = r.clone();
            async move { r.seal().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!sealing.is_finished(), "sealed while writes ran");
        assert!(r.sealed(), "a seal under way takes no new write");
        let [first, second] = writes;
        drop(first);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!sealing.is_finished(), "sealed while a write ran");
        drop(second);
        sealing.await.unwrap();
        assert!(*r.inner.sealed.read().await);
    }
}
