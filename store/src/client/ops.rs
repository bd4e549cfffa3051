//! Batch operations: one master call for the whole batch, transfers in parallel, a result per
//! key. A batch get checks every key's lease, like a single get. An item whose arguments are
//! bad is answered `InvalidParams` in its place and not sent; a batch with nothing left to send
//! (an empty one included) makes no call. Like the single-key calls, each takes its inputs
//! borrowed or owned and returns a future that borrows nothing: keys are copied, and values in
//! plain memory copied into registered memory, when the call is made.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::grants::Held;
use super::sift::{self, Sifted};
use super::staging::Scratch;
use super::telemetry::Op;
use super::{Client, Fragment, Options};
use crate::args;
use crate::error::{Error, Result};
use crate::master::{GrantedPut, MasterClient, PutConfig, ReplicaDesc, ReplicaList};

impl Client {
    /// Stores each `(key, value)` (a put or, with [`Write::Upsert`](crate::Write), an
    /// upsert); one result per item, in order. The values are copied into registered memory
    /// when the call is made.
    pub fn batch_put<K: AsRef<str>>(
        &self,
        items: &[(K, &[u8])],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        let opts = opts.into();
        let cfg = self.put_config(&opts);
        let sifted = Sifted::new(items, |(key, value)| {
            let key = key.as_ref();
            args::key(key)?;
            args::size(value.len() as u64)?;
            args::put_config(&cfg)?;
            Ok((key.to_string(), Source::Staged(self.stage(&[value])?)))
        });
        self.call(move |c| async move { c.batch_put_sources(sifted, &opts, cfg).await })
    }

    /// Stores each `(key, addr, len)` of registered memory, without a copy (as
    /// [`Client::batch_put`] otherwise); one result per item, in order.
    pub fn batch_put_from<K: AsRef<str>>(
        &self,
        items: &[(K, u64, u64)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        let opts = opts.into();
        let cfg = self.put_config(&opts);
        let sifted = Sifted::new(items, |(key, addr, len)| {
            args::key(key.as_ref())?;
            args::put_config(&cfg)?;
            let source = Source::gathered(&[(*addr, *len)])?;
            Ok((key.as_ref().to_string(), source))
        });
        self.call(move |c| async move { c.batch_put_sources(sifted, &opts, cfg).await })
    }

    /// Stores each key's value gathered from several buffers of registered memory, in order
    /// (per-layer KV blocks that make one object), without a copy; otherwise as
    /// [`Client::batch_put_from`]: one placement and one publication round trip for the whole
    /// batch, the transfers of every buffer of every key in flight together.
    pub fn batch_put_from_buffers<K: AsRef<str>, B: AsRef<[(u64, u64)]>>(
        &self,
        items: &[(K, B)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send + 'static {
        let opts = opts.into();
        let cfg = self.put_config(&opts);
        let sifted = Sifted::new(items, |(key, buffers)| {
            args::key(key.as_ref())?;
            args::put_config(&cfg)?;
            Ok((
                key.as_ref().to_string(),
                Source::gathered(buffers.as_ref())?,
            ))
        });
        self.call(move |c| async move { c.batch_put_sources(sifted, &opts, cfg).await })
    }

    /// A batch put. The items that take a place in this client's grants (see
    /// [`grants`](super::grants)) are written there at once and published with one
    /// `batch_put_granted`; the others, side by side, take one start at the master, the
    /// transfers in parallel, then one end for those written and one revoke for those that
    /// failed. An item whose grant turned out gone at the master is placed there after.
    async fn batch_put_sources(
        &self,
        sifted: Sifted<(String, Source)>,
        opts: &Options,
        cfg: PutConfig,
    ) -> Result<Vec<Result<()>>> {
        if sifted.passed.is_empty() {
            return Ok(sifted.merge([]));
        }
        let (until, write) = (self.until(opts), opts.write);
        let started = Instant::now();
        let items = &sifted.passed;
        let (mut granted, mut placed) = (Vec::new(), Vec::new());
        for (i, item) in items.iter().enumerate() {
            let len = item.1.len();
            let held = match self.inner.grants.takes(len, &cfg) {
                true => self.grant_place(len, until).await,
                false => None,
            };
            match held {
                Some(held) => granted.push((i, (item, held))),
                None => placed.push((i, item)),
            }
        }
        let (granted_at, granted): (Vec<_>, Vec<_>) = granted.into_iter().unzip();
        let (placed_at, placed): (Vec<_>, Vec<_>) = placed.into_iter().unzip();
        let (in_grants, at_master) = futures::join!(
            self.put_in_grants(granted, &cfg, write, until),
            self.put_placed(&placed, &cfg, write, until),
        );
        // A batch none of whose items got an answer of its own fails as a whole.
        match (&in_grants, &at_master) {
            (Err(e), _) if placed_at.is_empty() => return Err(e.clone()),
            (_, Err(e)) if granted_at.is_empty() => return Err(e.clone()),
            (Err(e), Err(_)) => return Err(e.clone()),
            _ => {}
        }
        let mut results: Vec<Option<Result<()>>> = vec![None; items.len()];
        let mut again = Vec::new();
        let in_grants = each(in_grants, granted_at.len(), |e| Some(Err(e)));
        for (i, outcome) in granted_at.into_iter().zip(in_grants) {
            match outcome {
                Some(r) => results[i] = Some(r),
                None => again.push(i),
            }
        }
        let at_master = each(at_master, placed_at.len(), Err);
        for (i, r) in placed_at.into_iter().zip(at_master) {
            results[i] = Some(r);
        }
        if !again.is_empty() {
            let retried: Vec<_> = again.iter().map(|&i| &items[i]).collect();
            let answer = self.put_placed(&retried, &cfg, write, until).await;
            if let (Err(e), true) = (&answer, again.len() == items.len()) {
                return Err(e.clone());
            }
            for (i, r) in again.iter().zip(each(answer, retried.len(), Err)) {
                results[*i] = Some(r);
            }
        }
        let results: Vec<Result<()>> = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(internal("an item of a batch put got no outcome"))))
            .collect();
        let took = started.elapsed();
        for ((_, source), r) in items.iter().zip(&results) {
            if r.is_ok() {
                self.inner.metrics.took(Op::Put, source.len(), took);
            }
        }
        Ok(sifted.merge(results))
    }

    /// Writes each item into its place in a grant, then publishes those written with one
    /// `batch_put_granted`. One outcome per item, in order: `None`, for the caller to place
    /// anew, where the write failed at its grant's node (the grant is forgotten: the node may
    /// be gone) or the master refused the publication as `InvalidWrite` (the grant is gone
    /// there).
    pub(super) async fn put_in_grants(
        &self,
        items: Vec<(&(String, Source), Held<'_>)>,
        cfg: &PutConfig,
        write: crate::Write,
        until: Instant,
    ) -> Result<Vec<Option<Result<()>>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let keys = items.iter().map(|((k, _), _)| k.clone()).collect();
        let _writing = self.inner.cache.writing(Some(keys));
        let writes = items
            .into_iter()
            .map(|((key, source), mut held)| async move {
                let (pieces, keep) = source.place();
                let desc = ReplicaDesc {
                    node: held.place.node.clone(),
                    addr: held.place.addr,
                    len: source.len(),
                };
                // The write ends while the grant is valid, or is abandoned (held dirty).
                let by = until.min(held.place.until);
                let wrote = self.inner.write_replicas(&pieces, &[desc], by, keep).await;
                let wrote = match wrote {
                    Ok(()) => {
                        held.written();
                        Wrote::Done
                    }
                    // The caller's buffer, or the caller's time up: the grant is not to blame.
                    Err(e @ Error::InvalidParams { .. }) => Wrote::Failed(e),
                    Err(e @ Error::Timeout) if Instant::now() >= until => Wrote::Failed(e),
                    // The grant's node may be gone: no more puts go there, and this one is
                    // placed at the master instead.
                    Err(_) => {
                        self.inner.grants.forget(held.place.grant);
                        Wrote::NodeFailed
                    }
                };
                let put = GrantedPut {
                    key: key.clone(),
                    size: source.len(),
                    parts: vec![(held.place.grant, held.place.addr)],
                };
                (put, held, wrote)
            });
        // The places stay held until the publication is answered: a retired grant is ended
        // at the master only once its last writer is done.
        let written = futures::future::join_all(writes).await;
        let puts: Vec<GrantedPut> = written
            .iter()
            .filter(|(_, _, wrote)| matches!(wrote, Wrote::Done))
            .map(|(put, ..)| put.clone())
            .collect();
        let published = match puts.is_empty() {
            true => Vec::new(),
            false => self.publish_granted(puts, cfg, write, until).await?,
        };
        let mut published = published.into_iter();
        let outcomes = written
            .into_iter()
            .map(|(_, held, wrote)| {
                match wrote {
                    Wrote::Failed(e) => return Some(Err(e)),
                    Wrote::NodeFailed => return None,
                    Wrote::Done => {}
                }
                match published.next() {
                    Some(Err(e @ Error::InvalidWrite { .. })) => {
                        self.grant_gone(&held, &e);
                        None
                    }
                    Some(r) => Some(r),
                    None => Some(Err(internal("the master answered fewer publications"))),
                }
            })
            .collect();
        Ok(outcomes)
    }

    /// One `batch_put_granted` of `puts` (`put_granted` of one): one outcome per put, in
    /// order.
    async fn publish_granted(
        &self,
        puts: Vec<GrantedPut>,
        cfg: &PutConfig,
        write: crate::Write,
        until: Instant,
    ) -> Result<Vec<Result<()>>> {
        if let [put] = puts.as_slice() {
            let published = self
                .master(
                    until,
                    |m, _| {
                        let (put, cfg) = (put.clone(), cfg.clone());
                        async move { m.put_granted(put, cfg, write).await }
                    },
                    &put.key,
                )
                .await;
            return Ok(vec![published]);
        }
        let n = puts.len();
        let published = self
            .master(
                until,
                |m, _| {
                    let (puts, cfg) = (puts.clone(), cfg.clone());
                    async move { m.batch_put_granted(puts, cfg, write).await }
                },
                "",
            )
            .await?;
        one_each(published, n, "publications")
    }

    /// The items placed at the master: one start for all, the transfers in parallel, then one
    /// end for those written and, side by side, one revoke for those that failed. One outcome
    /// per item, in order.
    async fn put_placed(
        &self,
        items: &[&(String, Source)],
        cfg: &PutConfig,
        write: crate::Write,
        until: Instant,
    ) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let starts: Vec<(String, u64)> = items.iter().map(|(k, s)| (k.clone(), s.len())).collect();
        let placed = self.put_starts(&starts, cfg, write, until).await?;
        let writes = items
            .iter()
            .zip(placed)
            .map(|((_, source), descs)| async move {
                let descs = match descs {
                    Ok(d) => d,
                    Err(e) => return Outcome::NotStarted(e),
                };
                let (pieces, keep) = source.place();
                match self
                    .inner
                    .write_replicas(&pieces, &descs, until, keep)
                    .await
                {
                    Ok(()) => Outcome::Written,
                    Err(e) => Outcome::Failed(e),
                }
            });
        let outcomes = futures::future::join_all(writes).await;
        let keys_where = |want: fn(&Outcome) -> bool| -> Vec<String> {
            items
                .iter()
                .zip(&outcomes)
                .filter(|(_, o)| want(o))
                .map(|((k, _), _)| k.clone())
                .collect()
        };
        let done = keys_where(|o| matches!(o, Outcome::Written));
        let failed = keys_where(|o| matches!(o, Outcome::Failed(_)));
        // A failed end must not keep the failed writes from being revoked.
        let (ends, _) = futures::join!(
            self.batch_call(until, done, true),
            self.batch_call(until, failed, false)
        );
        let mut ends = ends?.into_iter();
        Ok(outcomes
            .into_iter()
            .map(|o| match o {
                Outcome::Written => ends
                    .next()
                    .unwrap_or_else(|| Err(internal("the master answered fewer ends than asked"))),
                Outcome::NotStarted(e) | Outcome::Failed(e) => Err(e),
            })
            .collect())
    }

    /// The value of each key; one result per key, in order.
    pub fn batch_get<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<Vec<u8>>>>> + Send + 'static {
        let (sifted, opts) = (sift::keys(keys), opts.into());
        self.call(move |c| async move {
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = c.until(&opts);
            let keys = &sifted.passed;
            let found = c.locations(keys, &opts, until).await?;
            let results = c
                .read_all(keys, found, until, |i, at, until| {
                    let c = &c;
                    async move { c.read_to_vec(&keys[i], &at.list, at.sent, until).await }
                })
                .await;
            Ok(sifted.merge(results))
        })
    }

    /// Reads each `(key, addr, len)` into registered memory, without a copy; one result per key
    /// (the object's size), in order. A buffer smaller than its object is `InvalidParams` for
    /// that key and nothing is written there.
    pub fn batch_get_into<K: AsRef<str>>(
        &self,
        items: &[(K, u64, u64)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<u64>>>> + Send + 'static {
        let sifted = Sifted::new(items, |(key, addr, len)| {
            args::key(key.as_ref())?;
            args::buffer(*addr, *len)?;
            Ok((key.as_ref().to_string(), vec![(*addr, *len)]))
        });
        self.read_into_buffers(sifted, opts.into())
    }

    /// Reads each key into several buffers of registered memory, without a copy: the
    /// object's bytes fill them in order (the last ones used may be filled in part, or not at
    /// all). One result per key (the object's size), in order; buffers with less room in all
    /// than the object are `InvalidParams` for that key and nothing is written there. One
    /// replica-list round trip for the whole batch, every buffer's transfer in flight together.
    pub fn batch_get_into_buffers<K: AsRef<str>, B: AsRef<[(u64, u64)]>>(
        &self,
        items: &[(K, B)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<u64>>>> + Send + 'static {
        let sifted = Sifted::new(items, |(key, buffers)| {
            args::key(key.as_ref())?;
            for &(addr, len) in buffers.as_ref() {
                args::buffer(addr, len)?;
            }
            Ok((key.as_ref().to_string(), buffers.as_ref().to_vec()))
        });
        self.read_into_buffers(sifted, opts.into())
    }

    /// A batch read of each key into its buffers (see [`Client::batch_get_into_buffers`]).
    fn read_into_buffers(
        &self,
        sifted: Sifted<(String, Vec<(u64, u64)>)>,
        opts: Options,
    ) -> impl Future<Output = Result<Vec<Result<u64>>>> + Send + 'static {
        self.call(move |c| async move {
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = c.until(&opts);
            let keys: Vec<String> = sifted.passed.iter().map(|(k, _)| k.clone()).collect();
            let found = c.locations(&keys, &opts, until).await?;
            let results = c
                .read_all(&keys, found, until, |i, at, until| {
                    let (c, (key, buffers)) = (&c, &sifted.passed[i]);
                    async move {
                        let pieces = scatter(key, buffers, at.list.size)?;
                        c.inner
                            .read_object(key, &at.list, at.sent, &pieces, until, None)
                            .await?;
                        Ok(at.list.size)
                    }
                })
                .await;
            Ok(sifted.merge(results))
        })
    }

    /// One `batch_get_replica_list` for `keys` (granting their leases), and when it was sent.
    pub(crate) async fn replica_lists(
        &self,
        keys: &[String],
        until: Instant,
    ) -> Result<(Instant, Vec<Result<ReplicaList>>)> {
        let sent = Instant::now();
        let lists = self
            .master(
                until,
                |m, _| {
                    let keys = keys.to_vec();
                    async move { m.batch_get_replica_list(keys).await }
                },
                "",
            )
            .await?;
        Ok((sent, one_each(lists, keys.len(), "replica lists")?))
    }

    /// Whether each key exists; one result per key.
    pub fn batch_exist<K: AsRef<str>>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Result<bool>>>> + Send + 'static {
        self.keys_call(
            keys,
            opts,
            |m, keys| async move { m.batch_exist(keys).await },
        )
    }

    /// One master call `f` on the owned `keys` (with failover, bounded by `opts`' deadline),
    /// inside the client's runtime; one result per key, in order. Empty keys are refused in
    /// their places and not sent.
    pub(crate) fn keys_call<K, T, F, Fut>(
        &self,
        keys: &[K],
        opts: impl Into<Options>,
        f: F,
    ) -> impl Future<Output = Result<Vec<Result<T>>>> + Send + 'static
    where
        K: AsRef<str>,
        T: Send + 'static,
        F: Fn(MasterClient, Vec<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Result<T>>>> + Send,
    {
        let (sifted, opts) = (sift::keys(keys), opts.into());
        self.call(move |c| async move {
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = c.until(&opts);
            let results = c
                .master(until, |m, _| f(m, sifted.passed.clone()), "")
                .await?;
            Ok(sifted.merge(results))
        })
    }

    /// One `batch_put_start` for `starts` (key, size): the replicas placed for each, in order.
    pub(super) async fn put_starts(
        &self,
        starts: &[(String, u64)],
        cfg: &PutConfig,
        write: crate::Write,
        until: Instant,
    ) -> Result<Vec<Result<Vec<crate::master::ReplicaDesc>>>> {
        let _writing = self
            .inner
            .cache
            .writing(Some(starts.iter().map(|(k, _)| k.clone()).collect()));
        let placed = self
            .master(
                until,
                |m, _| {
                    let (starts, cfg) = (starts.to_vec(), cfg.clone());
                    async move { m.batch_put_start(starts, &cfg, write).await }
                },
                "",
            )
            .await?;
        one_each(placed, starts.len(), "placements")
    }

    /// `batch_put_end` (`end`) or `batch_put_revoke` of `keys`.
    pub(super) async fn batch_call(
        &self,
        until: Instant,
        keys: Vec<String>,
        end: bool,
    ) -> Result<Vec<Result<()>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let _writing = self.inner.cache.writing(Some(keys.clone()));
        self.master(
            until,
            |m, _| {
                let keys = keys.clone();
                async move {
                    match end {
                        true => m.batch_put_end(keys).await,
                        false => m.batch_put_revoke(keys).await,
                    }
                }
            },
            "",
        )
        .await
    }
}

/// Where the bytes of a put come from.
pub(super) enum Source {
    /// Plain bytes, copied into registered scratch memory when the call was made.
    Staged(Arc<Scratch>),
    /// Registered memory: buffers laid end to end in the object, and their total.
    Registered(Vec<Fragment>, u64),
}

impl Source {
    /// The object made of `buffers` (address, length) end to end: each buffer and the total
    /// checked (a buffer of at least one byte that does not wrap; a total that fits u64).
    pub(super) fn gathered(buffers: &[(u64, u64)]) -> Result<Source> {
        let mut pieces = Vec::with_capacity(buffers.len());
        let mut offset = 0u64;
        for &(addr, len) in buffers {
            args::buffer(addr, len)?;
            pieces.push(Fragment { addr, offset, len });
            offset = offset
                .checked_add(len)
                .ok_or_else(|| Error::params("the buffers' lengths add up past 2^64"))?;
        }
        args::size(offset)?;
        Ok(Source::Registered(pieces, offset))
    }

    pub(super) fn len(&self) -> u64 {
        match self {
            Source::Staged(scratch) => scratch.len(),
            Source::Registered(_, len) => *len,
        }
    }

    /// The pieces to write, and the scratch memory to keep while transfers may touch it.
    pub(super) fn place(&self) -> (Vec<Fragment>, Option<Arc<Scratch>>) {
        match self {
            Source::Staged(scratch) => (
                vec![Fragment::whole(scratch.addr(), scratch.len())],
                Some(scratch.clone()),
            ),
            Source::Registered(pieces, _) => (pieces.clone(), None),
        }
    }
}

/// The pieces that spread an object of `size` bytes over `buffers` in order; `InvalidParams`
/// if they hold less than it.
fn scatter(key: &str, buffers: &[(u64, u64)], size: u64) -> Result<Vec<Fragment>> {
    let mut pieces = Vec::with_capacity(buffers.len());
    let mut offset = 0u64;
    for &(addr, room) in buffers {
        if offset == size {
            break;
        }
        let len = room.min(size - offset);
        pieces.push(Fragment { addr, offset, len });
        offset += len;
    }
    if offset < size {
        let room: u128 = buffers.iter().map(|&(_, l)| u128::from(l)).sum();
        return Err(Error::params(format!(
            "buffers of {room} bytes in all are smaller than {key:?} ({size} bytes)"
        )));
    }
    Ok(pieces)
}

/// How a write into a grant went.
enum Wrote {
    /// Written: to publish.
    Done,
    /// Failed for the caller's reasons (its buffer, its deadline): the put fails.
    Failed(Error),
    /// Failed at the grant's node: the put is placed at the master instead.
    NodeFailed,
}

/// What happened to one item of a batch put.
enum Outcome {
    /// Refused by the master at the start: nothing to end or revoke.
    NotStarted(Error),
    /// Started, then a transfer failed: it must be revoked.
    Failed(Error),
    /// Written to every replica: it must be ended.
    Written,
}

/// An error of this client's own making: the master's answer does not match the question.
fn internal(reason: impl Into<String>) -> Error {
    Error::Internal {
        reason: reason.into(),
    }
}

/// The master's `answers` to a batch of `n` keys, one per key in order, or an error: answers
/// of another count cannot be matched to the keys.
fn one_each<T>(answers: Vec<T>, n: usize, what: &str) -> Result<Vec<T>> {
    match answers.len() == n {
        true => Ok(answers),
        false => Err(internal(format!(
            "the master answered {} {what} for {n} keys",
            answers.len()
        ))),
    }
}

/// One outcome per item of a part of a batch: the part's answer, or its failure as a whole
/// (`fail`) in each of its `n` places.
fn each<T: Clone>(answer: Result<Vec<T>>, n: usize, fail: impl Fn(Error) -> T) -> Vec<T> {
    match answer {
        Ok(outcomes) => outcomes,
        Err(e) => vec![fail(e); n],
    }
}
