//! Reads in two steps, for callers that allocate the destination themselves once they know an
//! object's size (a Python `bytes` of exactly that size, a tensor of the right shape):
//! [`Client::locate`] finds the object and takes its read lease, [`Client::read_located`] reads
//! it into registered memory. [`Client::get_or_locate`] returns a small value at once and only
//! locates a large one, so a small read still costs one call and a large one no copy.

use std::future::Future;
use std::time::Instant;

use super::{fits, Client, Options};
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
            let whole = [super::Fragment::whole(addr, found.list.size)];
            c.read_object(&found.key, &found.list, found.sent, &whole, until, None)
                .await?;
            Ok(found.list.size)
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
            let until = c.until(&opts);
            let (sent, list) = c.replica_list(&key, until).await?;
            if list.size <= inline_max {
                return Ok(Fetched::Value(
                    c.read_to_vec(&key, &list, sent, until).await?,
                ));
            }
            Ok(Fetched::Located(Located {
                key,
                list,
                sent,
                until,
            }))
        })
    }
}
