//! Reads in two steps, for callers that allocate the destination themselves once they know an
//! object's size (a Python `bytes` of exactly that size, a tensor of the right shape):
//! [`Client::locate`] finds the object and takes its read lease, [`Client::read_located`] reads
//! it into registered memory. [`Client::get_or_locate`] returns a small value at once and only
//! locates a large one, so a small read still costs one call and a large one no copy.

use std::future::Future;
use std::time::Instant;

use super::{fits, Client, Fragment, Options};
use crate::error::Result;
use crate::master::ReplicaList;

/// An object found by [`Client::locate`]: its size and replicas, under a read lease that
/// counts from when the lookup was sent. Read it with [`Client::read_located`] before the
/// lease ends (else `LeaseExpired`, -707: the space may hold another object by then).
#[derive(Debug, Clone)]
pub struct Located {
    key: String,
    list: ReplicaList,
    sent: Instant,
    /// The deadline of the call that located it: reading it ends by then too.
    until: Instant,
}

impl Located {
    /// The object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object's size in bytes.
    pub fn size(&self) -> u64 {
        self.list.size
    }
}

/// What [`Client::get_or_locate`] found: the value itself when it was small, else where it is.
#[derive(Debug)]
pub enum Fetched {
    /// The value, read into scratch memory and copied out (at most `inline_max` bytes).
    Value(Vec<u8>),
    /// A larger object, not read yet: read it with [`Client::read_located`].
    Located(Located),
}

impl Client {
    /// Finds `key` and takes its read lease, without reading it.
    pub fn locate(
        &self,
        key: impl Into<String>,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Located>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            let until = c.until(&opts);
            let (sent, list) = c.replica_list(&key, until).await?;
            Ok(Located {
                key,
                list,
                sent,
                until,
            })
        })
    }

    /// Reads a located object into registered memory at `addr` (room for `len` bytes), without
    /// a copy; returns its size. It ends by `opts`' deadline and by that of the call that
    /// located it, whichever comes first. A buffer smaller than the object is `InvalidParams` and
    /// nothing is written; a read that cannot end inside the lease is `LeaseExpired`. The
    /// memory is written until the call ends, only by this client's engine: register it
    /// local-only (see [`Client::engine`]).
    pub fn read_located(
        &self,
        found: &Located,
        addr: u64,
        len: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        let (found, opts) = (found.clone(), opts.into());
        self.call(move |c| async move {
            crate::args::buffer(addr, len)?;
            fits(&found.key, &found.list, len)?;
            let until = c.until(&opts).min(found.until);
            let whole = [Fragment::whole(addr, found.list.size)];
            c.inner
                .read_object(&found.key, &found.list, found.sent, &whole, until, None)
                .await?;
            Ok(found.list.size)
        })
    }

    /// Finds each key and takes its read lease, without reading it: one master round trip for
    /// the batch (Mooncake's get session start). One result per key, in order; read them with
    /// [`Client::batch_read_located`] before their leases end.
    pub fn batch_locate<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<Located>>>> + Send + 'static {
        let (sifted, opts) = (super::sift::keys(keys), opts.into());
        self.call(move |c| async move {
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = c.until(&opts);
            let (sent, lists) = c.replica_lists(&sifted.passed, until).await?;
            let found = sifted.passed.iter().zip(lists).map(|(key, list)| {
                Ok(Located {
                    key: key.clone(),
                    list: list?,
                    sent,
                    until,
                })
            });
            let found: Vec<_> = found.collect();
            Ok(sifted.merge(found))
        })
    }

    /// For each `(located, fragments)`, reads each fragment's `len` bytes at `offset` inside
    /// the located object into registered memory at `addr`; no master round trip. One result
    /// per item: the bytes read (the fragments' total), or why none was read (a fragment
    /// outside the object or a bad address: `InvalidParams`, and none of the item's fragments
    /// is read; a read that cannot end inside the lease: `LeaseExpired`). Each item ends by
    /// `opts`' deadline and by that of the call that located it; every fragment of every item
    /// is in flight together. The memory is written until the call ends, only by this client's
    /// engine: register it local-only (see [`Client::engine`]).
    pub fn batch_read_located<F: AsRef<[Fragment]>>(
        &self,
        items: &[(&Located, F)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<u64>>>> + Send + 'static {
        let opts = opts.into();
        let items: Vec<(Located, Result<Pieces>)> = items
            .iter()
            .map(|(found, fragments)| {
                let checked = in_object(&found.key, found.list.size, fragments.as_ref());
                ((*found).clone(), checked)
            })
            .collect();
        self.call(move |c| async move {
            let until = c.until(&opts);
            let reads = items.iter().map(|(found, checked)| {
                let c = &c;
                async move {
                    let (pieces, total) = checked.clone()?;
                    let until = until.min(found.until);
                    c.inner
                        .read_object(&found.key, &found.list, found.sent, &pieces, until, None)
                        .await?;
                    Ok(total)
                }
            });
            Ok(futures::future::join_all(reads).await)
        })
    }

    /// The value of `key` when it has at most `inline_max` bytes (as [`Client::get`]), else
    /// the located object, for [`Client::read_located`] into memory sized for it.
    pub fn get_or_locate(
        &self,
        key: impl Into<String>,
        inline_max: u64,
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Fetched>> + Send + 'static {
        let (key, opts) = (key.into(), opts.into());
        self.call(move |c| async move {
            crate::args::key(&key)?;
            let until = c.until(&opts);
            let at = c.location(&key, &opts, until).await?;
            if at.list.size <= inline_max {
                let (c, key) = (&c, &key);
                let value = c.read_at(key, at, until, |at, until| async move {
                    c.read_to_vec(key, &at.list, at.sent, until).await
                });
                return Ok(Fetched::Value(value.await?));
            }
            // Read later by the caller, with no second try: on a lease of its own, in full.
            let at = match at.cached {
                true => c.fresh_location(&key, until).await?,
                false => at,
            };
            Ok(Fetched::Located(Located {
                key,
                list: (*at.list).clone(),
                sent: at.sent,
                until,
            }))
        })
    }
}

/// An item's fragments, checked, and their total length.
pub(super) type Pieces = (Vec<Fragment>, u64);

/// The fragments of one item of a ranged call on object `key` of `size` bytes, and their total:
/// each with a good address and inside the object, or `InvalidParams` naming the first that is
/// not.
pub(super) fn in_object(key: &str, size: u64, fragments: &[Fragment]) -> Result<Pieces> {
    let mut total = 0u64;
    for f in fragments {
        crate::args::buffer(f.addr, f.len)?;
        if !f.inside(size) {
            return Err(crate::Error::params(format!(
                "bytes {}+{} lie outside {key:?} ({size} bytes)",
                f.offset, f.len
            )));
        }
        total = total
            .checked_add(f.len)
            .ok_or_else(|| crate::Error::params("the fragments' lengths add up past 2^64"))?;
    }
    Ok((fragments.to_vec(), total))
}
