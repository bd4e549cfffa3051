//! Batch operations: one master call for the whole batch, transfers in parallel, a result per
//! key. A batch get checks every key's lease, like a single get. An item whose arguments are
//! bad is answered `InvalidParams` in its place and not sent; a batch with nothing left to send
//! (an empty one included) makes no call.

use std::future::Future;
use std::time::Instant;

use super::sift::Sifted;
use super::{Client, Options};
use crate::args;
use crate::error::{Error, Result};
use crate::master::{MasterClient, ReplicaList};

impl Client {
    /// Stores each `(key, value)`; one result per item, in order.
    pub async fn batch_put(
        &self,
        items: &[(&str, &[u8])],
        opts: &Options,
    ) -> Result<Vec<Result<()>>> {
        self.batch_bytes(items, opts, false).await
    }

    /// Stores each `(key, value)`, replacing existing values; one result per item, in order.
    pub async fn batch_upsert(
        &self,
        items: &[(&str, &[u8])],
        opts: &Options,
    ) -> Result<Vec<Result<()>>> {
        self.batch_bytes(items, opts, true).await
    }

    /// `batch_put` or (`upsert`) `batch_upsert`: the values copied into scratch memory.
    async fn batch_bytes(
        &self,
        items: &[(&str, &[u8])],
        opts: &Options,
        upsert: bool,
    ) -> Result<Vec<Result<()>>> {
        self.in_runtime(async {
            let items: Vec<(&str, Source<'_>)> =
                items.iter().map(|(k, v)| (*k, Source::Bytes(v))).collect();
            self.batch_put_sources(&items, opts, upsert).await
        })
        .await
    }

    /// Stores each `(key, addr, len)` of registered memory, without a copy; one result per
    /// item, in order.
    pub async fn batch_put_from(
        &self,
        items: &[(&str, u64, u64)],
        opts: &Options,
    ) -> Result<Vec<Result<()>>> {
        self.batch_from(items, opts, false).await
    }

    /// As [`Client::batch_put_from`], replacing existing values.
    pub async fn batch_upsert_from(
        &self,
        items: &[(&str, u64, u64)],
        opts: &Options,
    ) -> Result<Vec<Result<()>>> {
        self.batch_from(items, opts, true).await
    }

    async fn batch_from(
        &self,
        items: &[(&str, u64, u64)],
        opts: &Options,
        upsert: bool,
    ) -> Result<Vec<Result<()>>> {
        self.in_runtime(async {
            let items: Vec<(&str, Source<'_>)> = items
                .iter()
                .map(|&(k, addr, len)| (k, Source::Registered(addr, len)))
                .collect();
            self.batch_put_sources(&items, opts, upsert).await
        })
        .await
    }

    /// A batch put (or `upsert`): one start at the master, the transfers in parallel, then one
    /// end for those written and one revoke for those that failed.
    async fn batch_put_sources(
        &self,
        items: &[(&str, Source<'_>)],
        opts: &Options,
        upsert: bool,
    ) -> Result<Vec<Result<()>>> {
        let until = self.until(opts);
        let cfg = self.put_config(opts);
        let sifted = Sifted::new(items, |(key, source)| {
            args::key(key)?;
            match *source {
                Source::Bytes(value) => args::size(value.len() as u64)?,
                Source::Registered(addr, len) => args::buffer(addr, len)?,
            }
            args::put_config(&cfg)
        });
        if sifted.passed.is_empty() {
            return Ok(sifted.merge([]));
        }
        let items: Vec<(&str, Source<'_>)> = sifted.passed.iter().map(|&&item| item).collect();
        let starts: Vec<(String, u64)> = items
            .iter()
            .map(|(k, src)| (k.to_string(), src.len()))
            .collect();
        let placed = self
            .master(
                until,
                |m, _| {
                    let (starts, cfg) = (starts.clone(), cfg.clone());
                    async move {
                        match upsert {
                            true => m.batch_upsert_start(starts, &cfg).await,
                            false => m.batch_put_start(starts, &cfg).await,
                        }
                    }
                },
                "",
            )
            .await?;
        let engine = &self.inner.engine;
        let writes = items
            .iter()
            .zip(placed)
            .map(|((_, source), descs)| async move {
                let descs = match descs {
                    Ok(d) => d,
                    Err(e) => return Outcome::NotStarted(e),
                };
                let len = source.len();
                let written = async {
                    match source {
                        Source::Bytes(value) => {
                            let scratch = self.inner.staging.get(engine, len)?;
                            scratch.fill(&[value])?;
                            let keep = Some(scratch.clone());
                            self.write_replicas(scratch.addr(), len, &descs, until, keep)
                                .await
                        }
                        Source::Registered(addr, _) => {
                            self.write_replicas(*addr, len, &descs, until, None).await
                        }
                    }
                };
                match written.await {
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
                .map(|((k, _), _)| k.to_string())
                .collect()
        };
        let done = keys_where(|o| matches!(o, Outcome::Written));
        let failed = keys_where(|o| matches!(o, Outcome::Failed(_)));
        let mut ends = self
            .batch_call(until, done, true, upsert)
            .await?
            .into_iter();
        if !failed.is_empty() {
            let _ = self.batch_call(until, failed, false, upsert).await;
        }
        let results: Vec<Result<()>> = outcomes
            .into_iter()
            .map(|o| match o {
                Outcome::Written => ends.next().unwrap_or_else(|| {
                    Err(Error::Internal {
                        reason: "the master answered fewer ends than asked".into(),
                    })
                }),
                Outcome::NotStarted(e) | Outcome::Failed(e) => Err(e),
            })
            .collect();
        Ok(sifted.merge(results))
    }

    /// The value of each key; one result per key, in order.
    pub async fn batch_get(&self, keys: &[&str], opts: &Options) -> Result<Vec<Result<Vec<u8>>>> {
        self.in_runtime(async {
            let sifted = Sifted::new(keys, |key| args::key(key));
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = self.until(opts);
            let passed = sifted.passed.iter().map(|&&key| key);
            let (sent, lists) = self.replica_lists(passed.clone(), until).await?;
            let reads = passed
                .zip(lists)
                .map(|(key, list)| async move { self.read_to_vec(key, &list?, sent, until).await });
            let results = futures::future::join_all(reads).await;
            Ok(sifted.merge(results))
        })
        .await
    }

    /// Reads each `(key, addr, len)` into registered memory, without a copy; one result per key
    /// (the object's size), in order. A buffer smaller than its object is `InvalidParams` for
    /// that key and nothing is written there.
    pub async fn batch_get_into(
        &self,
        items: &[(&str, u64, u64)],
        opts: &Options,
    ) -> Result<Vec<Result<u64>>> {
        self.in_runtime(async {
            let sifted = Sifted::new(items, |&(key, addr, len)| {
                args::key(key)?;
                args::buffer(addr, len)
            });
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let until = self.until(opts);
            let (sent, lists) = self
                .replica_lists(sifted.passed.iter().map(|(k, _, _)| *k), until)
                .await?;
            let reads =
                sifted
                    .passed
                    .iter()
                    .zip(lists)
                    .map(|(&&(key, addr, len), list)| async move {
                        let list = list?;
                        super::fits(key, &list, len)?;
                        self.read_object(key, &list, sent, addr, until, None)
                            .await?;
                        Ok(list.size)
                    });
            let results = futures::future::join_all(reads).await;
            Ok(sifted.merge(results))
        })
        .await
    }

    /// One `batch_get_replica_list` for `keys` (granting their leases), and when it was sent.
    async fn replica_lists<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
        until: Instant,
    ) -> Result<(Instant, Vec<Result<ReplicaList>>)> {
        let sent = Instant::now();
        let owned: Vec<String> = keys.map(str::to_string).collect();
        let lists = self
            .master(
                until,
                |m, _| {
                    let owned = owned.clone();
                    async move { m.batch_get_replica_list(owned).await }
                },
                "",
            )
            .await?;
        Ok((sent, lists))
    }

    /// Whether each key exists; one result per key.
    pub async fn batch_exist(&self, keys: &[&str], opts: &Options) -> Result<Vec<Result<bool>>> {
        self.keys_call(
            keys,
            opts,
            |m, keys| async move { m.batch_exist(keys).await },
        )
        .await
    }

    /// One master call `f` on owned `keys` (with failover, bounded by `opts`' deadline), inside
    /// the client's runtime; one result per key, in order. Empty keys are refused in their
    /// places and not sent.
    pub(crate) async fn keys_call<T, F, Fut>(
        &self,
        keys: &[&str],
        opts: &Options,
        f: F,
    ) -> Result<Vec<Result<T>>>
    where
        F: Fn(MasterClient, Vec<String>) -> Fut,
        Fut: Future<Output = Result<Vec<Result<T>>>>,
    {
        self.in_runtime(async {
            let sifted = Sifted::new(keys, |key| args::key(key));
            if sifted.passed.is_empty() {
                return Ok(sifted.merge([]));
            }
            let owned: Vec<String> = sifted.passed.iter().map(|k| k.to_string()).collect();
            let results = self
                .master(self.until(opts), |m, _| f(m, owned.clone()), "")
                .await?;
            Ok(sifted.merge(results))
        })
        .await
    }

    /// `batch_put_end` (`end`) or `batch_put_revoke` of `keys` (their upsert forms for
    /// `upsert`).
    async fn batch_call(
        &self,
        until: Instant,
        keys: Vec<String>,
        end: bool,
        upsert: bool,
    ) -> Result<Vec<Result<()>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.master(
            until,
            |m, _| {
                let keys = keys.clone();
                async move {
                    match (end, upsert) {
                        (true, false) => m.batch_put_end(keys).await,
                        (false, false) => m.batch_put_revoke(keys).await,
                        (true, true) => m.batch_upsert_end(keys).await,
                        (false, true) => m.batch_upsert_revoke(keys).await,
                    }
                }
            },
            "",
        )
        .await
    }
}

/// Where one item of a batch put comes from.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// Plain bytes, copied into registered scratch memory first.
    Bytes(&'a [u8]),
    /// Registered memory: address and length.
    Registered(u64, u64),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(v) => v.len() as u64,
            Source::Registered(_, len) => *len,
        }
    }
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
