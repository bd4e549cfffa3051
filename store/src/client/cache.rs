//! Leased locations: what a read learnt from the master — an object's size and replicas, under
//! a read lease — kept until the lease ends, so that a read of the same key before then goes
//! straight to a replica (one round trip instead of two).
//!
//! Why it is safe: while a lease runs the master neither evicts, removes, nor overwrites in
//! place the replicas it named (an upsert writes elsewhere, a removal or eviction holds the
//! space until the lease ends, and for a lease TTL after its start or promotion a master reuses
//! no space, since leases from before are unknown to it). So a cached read returns the bytes of
//! a version that was current when the lease was granted, never torn ones; and a location is
//! used only while its lease lasts, counted from when its request was *sent* (earlier than the
//! master's own clock started it) less the client's margin ([`lease_end`]).
//!
//! This client's own writes of a key (put, upsert, remove) forget its location first, and
//! every write moves the cache's epoch on, so that an answer asked for before the write (a
//! renewal in the background, a concurrent read) is not kept afterwards: a client reads its own
//! writes. A cached location whose read fails (the node gone, a stale segment) is forgotten
//! and the read asks the master again within the same deadline.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use std::future::Future;

use lru::LruCache;

use super::{Client, Options};
use crate::error::{Error, Result};
use crate::master::ReplicaList;

/// Where an object is, as a read uses it: its replica list and when the request that got it
/// was sent (the lease counts from then).
#[derive(Debug, Clone)]
pub(crate) struct Location {
    /// The object's size and replicas, and its lease.
    pub(crate) list: Arc<ReplicaList>,
    /// When the request for it was sent.
    pub(crate) sent: Instant,
    /// Whether it came from the cache (so a failure may be the cache's: ask the master).
    pub(crate) cached: bool,
}

/// When a lease of `lease_ms` granted to a request sent at `sent` ends for the client: `margin`
/// (at most a quarter of the lease) earlier than it would by the client's clock, which covers
/// a transfer's last bytes still on the wire when the client checks, and the drift of the two
/// machines' clocks over the lease (quartz drifts at most ~100 ppm: 1 ms in a 10 s lease).
pub(crate) fn lease_end(sent: Instant, lease_ms: u64, margin: Duration) -> Instant {
    let lease = Duration::from_millis(lease_ms);
    sent + lease - margin.min(lease / 4)
}

/// Whether a read that failed on a cached location may succeed on a fresh one by `until`: not
/// when the caller's arguments are wrong or its time is up (a timeout of the cached attempt
/// alone, cut at half the time, leaves the rest).
fn worth_asking_again(e: &Error, until: Instant) -> bool {
    match e {
        Error::InvalidParams { .. } => false,
        Error::Timeout => Instant::now() < until,
        _ => true,
    }
}

/// How a read's first try went.
enum Tried<T> {
    /// Its result, to return.
    Done(Result<T>),
    /// It failed at a cached location in a way a fresh one may not: ask the master.
    Stale(Error),
}

/// Runs `read` at `at` by `until`; at a cached location, by half the time left (a node that
/// hangs rather than refuses must leave time for a fresh try), and a failure there that a
/// fresh location may not meet ([`worth_asking_again`]) is [`Tried::Stale`].
async fn first_try<T, F, Fut>(at: Location, until: Instant, read: &F) -> Tried<T>
where
    F: Fn(Location, Instant) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if !at.cached {
        return Tried::Done(read(at, until).await);
    }
    let now = Instant::now();
    let half = now + until.saturating_duration_since(now) / 2;
    match read(at, half).await {
        Err(e) if worth_asking_again(&e, until) => Tried::Stale(e),
        result => Tried::Done(result),
    }
}

struct Entry {
    list: Arc<ReplicaList>,
    sent: Instant,
    /// The lease's end for this client ([`lease_end`]).
    end: Instant,
    /// Past this a read renews the lease in the background (half-way through it).
    renew_at: Instant,
    renewing: bool,
}

/// A write under way (see [`LeaseCache::writing`]).
pub(crate) struct Writing<'a> {
    cache: &'a LeaseCache,
    keys: Option<Vec<String>>,
}

impl Writing<'_> {
    fn forget(&self) {
        match &self.keys {
            Some(keys) => self.cache.forget(keys.iter().map(String::as_str)),
            None => self.cache.forget_all(),
        }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.forget();
    }
}

/// A cache hit: the location, and whether the caller should renew its lease now.
pub(crate) struct Hit {
    pub(crate) location: Location,
    /// When its lease ends for this client.
    pub(crate) end: Instant,
    pub(crate) renew: bool,
}

/// The bounded cache of leased locations (least recently used dropped first). With no room
/// (`entries` 0) it keeps nothing.
pub(crate) struct LeaseCache {
    map: Option<Mutex<LruCache<String, Entry>>>,
    /// Moved on by every write of this client: an answer asked for at an older epoch is not
    /// kept.
    epoch: AtomicU64,
    margin: Duration,
}

impl LeaseCache {
    /// A cache of at most `entries` locations; leases shortened by `margin` (see
    /// [`lease_end`]).
    pub(crate) fn new(entries: usize, margin: Duration) -> LeaseCache {
        LeaseCache {
            map: NonZeroUsize::new(entries).map(|n| Mutex::new(LruCache::new(n))),
            epoch: AtomicU64::new(0),
            margin,
        }
    }

    fn lock(&self) -> Option<MutexGuard<'_, LruCache<String, Entry>>> {
        self.map
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// When `list`, asked for at `sent`, stops being usable.
    fn end_of(&self, list: &ReplicaList, sent: Instant) -> Instant {
        lease_end(sent, list.lease_ms, self.margin)
    }

    /// The epoch now: pass it to [`LeaseCache::keep`] with the answer of a request sent after.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// `key`'s location if its lease lasts past `now`; a lease past its half is to be renewed
    /// (by one caller: the others are told not to).
    pub(crate) fn get(&self, key: &str, now: Instant) -> Option<Hit> {
        let mut map = self.lock()?;
        let entry = map.get_mut(key)?;
        if now >= entry.end {
            map.pop(key);
            return None;
        }
        let renew = now >= entry.renew_at && !entry.renewing;
        entry.renewing |= renew;
        Some(Hit {
            location: Location {
                list: entry.list.clone(),
                sent: entry.sent,
                cached: true,
            },
            end: entry.end,
            renew,
        })
    }

    /// Keeps `key`'s location (`list`, asked for at `sent`, in `epoch`), unless a write of this
    /// client came since `epoch` or it holds no lease worth keeping.
    pub(crate) fn keep(&self, key: &str, list: Arc<ReplicaList>, sent: Instant, epoch: u64) {
        let end = self.end_of(&list, sent);
        let Some(mut map) = self.lock() else {
            return;
        };
        // Under the lock, against `forget`'s move of the epoch (also under it).
        if self.epoch.load(Ordering::Acquire) != epoch || end <= Instant::now() {
            return;
        }
        let renew_at = sent + (end - sent) / 2;
        map.put(
            key.to_string(),
            Entry {
                list,
                sent,
                end,
                renew_at,
                renewing: false,
            },
        );
    }

    /// Forgets the locations of `keys` (before and after this client writes them, or after a
    /// read failed on one).
    pub(crate) fn forget<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        if let Some(mut map) = self.lock() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            for key in keys {
                map.pop(key);
            }
        }
    }

    /// Forgets every location (before a write of many keys: `remove_all`, by pattern).
    pub(crate) fn forget_all(&self) {
        if let Some(mut map) = self.lock() {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            map.clear();
        }
    }

    /// Forgets the locations of `keys` (`None`: all) now, and again when the guard is dropped:
    /// held across a write, so that no location of the old value is kept past it, not even
    /// one a concurrent read asked for while the write ran, and not when the write's future is
    /// dropped half-way.
    pub(crate) fn writing(&self, keys: Option<Vec<String>>) -> Writing<'_> {
        let writing = Writing { cache: self, keys };
        writing.forget();
        writing
    }

    /// A renewal ended (kept, or failed, or refused for a write since): a later read past the
    /// half of the lease kept then may renew it again.
    pub(crate) fn renewal_done(&self, key: &str) {
        if let Some(entry) = self.lock().as_mut().and_then(|m| m.peek_mut(key)) {
            entry.renewing = false;
        }
    }

    /// Locations kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().map_or(0, |m| m.len())
    }
}

impl Client {
    /// Where `key` is: its cached location while its lease lasts (unless `opts` says
    /// [`Options::uncached`]), else the master's answer, which is kept.
    pub(crate) async fn location(
        &self,
        key: &str,
        opts: &Options,
        until: Instant,
    ) -> Result<Location> {
        if let Some(hit) = self.hit(key, opts) {
            if hit.renew {
                self.renew(vec![(key.to_string(), hit.end)]);
            }
            return Ok(hit.location);
        }
        self.fresh_location(key, until).await
    }

    /// The master's answer for `key` (granting its lease), kept in the cache.
    pub(crate) async fn fresh_location(&self, key: &str, until: Instant) -> Result<Location> {
        let epoch = self.inner.cache.epoch();
        let (sent, list) = self.replica_list(key, until).await?;
        let list = Arc::new(list);
        self.inner.cache.keep(key, list.clone(), sent, epoch);
        Ok(Location {
            list,
            sent,
            cached: false,
        })
    }

    /// Where each of `keys` is, in order: cached locations, and the others from one
    /// `batch_get_replica_list` (none when every key is cached).
    pub(crate) async fn locations(
        &self,
        keys: &[String],
        opts: &Options,
        until: Instant,
    ) -> Result<Vec<Result<Location>>> {
        let mut renewals = Vec::new();
        let mut out: Vec<Option<Result<Location>>> = keys
            .iter()
            .map(|k| {
                let hit = self.hit(k, opts)?;
                if hit.renew {
                    renewals.push((k.clone(), hit.end));
                }
                Some(Ok(hit.location))
            })
            .collect();
        self.renew(renewals);
        let missing: Vec<String> = keys
            .iter()
            .zip(&out)
            .filter(|(_, at)| at.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if !missing.is_empty() {
            let epoch = self.inner.cache.epoch();
            // The master's failure is the answer of the keys asked of it, not of those cached.
            let (sent, lists) = match self.replica_lists(&missing, until).await {
                Ok(answered) => answered,
                Err(e) if missing.len() == keys.len() => return Err(e),
                Err(e) => (Instant::now(), vec![Err(e); missing.len()]),
            };
            let mut answers = missing.iter().zip(lists);
            for slot in out.iter_mut().filter(|at| at.is_none()) {
                let (key, list) = answers.next().expect("one answer per missing key");
                *slot = Some(list.map(|list| {
                    let list = Arc::new(list);
                    self.inner.cache.keep(key, list.clone(), sent, epoch);
                    Location {
                        list,
                        sent,
                        cached: false,
                    }
                }));
            }
        }
        Ok(out.into_iter().map(|at| at.expect("filled")).collect())
    }

    /// Runs `read` at `at`, `key`'s location, to end by the deadline it is given; when the
    /// location was cached, that is half the time left (a node that hangs rather than refuses
    /// must leave time for the rest), and when the read failed in a way a fresh location may
    /// not ([`worth_asking_again`]), forgets it and runs `read` once more
    /// at the master's answer, by `until`.
    pub(crate) async fn read_at<T, F, Fut>(
        &self,
        key: &str,
        at: Location,
        until: Instant,
        read: F,
    ) -> Result<T>
    where
        F: Fn(Location, Instant) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match first_try(at, until, &read).await {
            Tried::Done(result) => result,
            Tried::Stale(e) => {
                tracing::debug!(key, error = %e, "a cached location failed; asking the master");
                self.inner.cache.forget([key]);
                read(self.fresh_location(key, until).await?, until).await
            }
        }
    }

    /// [`Client::read_at`] for a batch: `read(i, ..)` of `keys[i]` at `found[i]`, all in
    /// parallel; the keys whose cached location failed are asked of the master together, in
    /// one round trip, and read once more. One result per key, in order.
    pub(crate) async fn read_all<T, F, Fut>(
        &self,
        keys: &[String],
        found: Vec<Result<Location>>,
        until: Instant,
        read: F,
    ) -> Vec<Result<T>>
    where
        F: Fn(usize, Location, Instant) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let first = found.into_iter().enumerate().map(|(i, at)| {
            let read = &read;
            async move {
                match at {
                    Ok(at) => first_try(at, until, &|at, by| read(i, at, by)).await,
                    Err(e) => Tried::Done(Err(e)),
                }
            }
        });
        let tried = futures::future::join_all(first).await;
        let stale: Vec<usize> = (0..tried.len())
            .filter(|&i| matches!(tried[i], Tried::Stale(_)))
            .collect();
        let mut results: Vec<Option<Result<T>>> = tried
            .into_iter()
            .map(|t| match t {
                Tried::Done(result) => Some(result),
                Tried::Stale(_) => None,
            })
            .collect();
        if stale.is_empty() {
            return results.into_iter().flatten().collect();
        }
        let again: Vec<String> = stale.iter().map(|&i| keys[i].clone()).collect();
        tracing::debug!(
            keys = again.len(),
            "cached locations failed; asking the master"
        );
        self.inner.cache.forget(again.iter().map(String::as_str));
        let fresh = Options {
            uncached: true,
            ..Options::default()
        };
        let found = match self.locations(&again, &fresh, until).await {
            Ok(found) => found,
            Err(e) => vec![Err(e); again.len()],
        };
        let reads = stale.iter().zip(found).map(|(&i, at)| {
            let read = &read;
            async move {
                let result = match at {
                    Ok(at) => read(i, at, until).await,
                    Err(e) => Err(e),
                };
                (i, result)
            }
        });
        for (i, result) in futures::future::join_all(reads).await {
            results[i] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::Internal {
                        reason: "a key of a batch read got no result".into(),
                    })
                })
            })
            .collect()
    }

    /// `write` (a call's future, of `keys`; `None`: any key) with their locations forgotten
    /// when it starts and when it ends or is dropped (see [`LeaseCache::writing`]).
    pub(crate) fn forgetting<T>(
        &self,
        keys: Option<Vec<String>>,
        write: impl Future<Output = T> + Send + 'static,
    ) -> impl Future<Output = T> + Send + 'static {
        let c = self.clone();
        async move {
            let _writing = c.inner.cache.writing(keys);
            write.await
        }
    }

    /// `key`'s cached location, if `opts` allow one and its lease lasts, and whether the
    /// caller should renew it now (past the lease's half: see [`Client::renew`]).
    fn hit(&self, key: &str, opts: &Options) -> Option<Hit> {
        if opts.uncached {
            return None;
        }
        self.inner.cache.get(key, Instant::now())
    }

    /// Asks the master for `keys` again (renewing their leases) off the caller's path, in one
    /// call, by the latest end of the leases kept for them. Not once the client is closed.
    fn renew(&self, keys: Vec<(String, Instant)>) {
        let Some(end) = keys.iter().map(|(_, end)| *end).max() else {
            return;
        };
        let keys: Vec<String> = keys.into_iter().map(|(k, _)| k).collect();
        if self.inner.closed.load(Ordering::Acquire) {
            keys.iter().for_each(|k| self.inner.cache.renewal_done(k));
            return;
        }
        let c = self.clone();
        self.inner.engine.handle().spawn(async move {
            let renewed = match keys.as_slice() {
                [key] => vec![c.fresh_location(key, end).await],
                _ => {
                    let fresh = Options {
                        uncached: true,
                        ..Options::default()
                    };
                    match c.locations(&keys, &fresh, end).await {
                        Ok(renewed) => renewed,
                        Err(e) => vec![Err(e); keys.len()],
                    }
                }
            };
            for (key, r) in keys.iter().zip(renewed) {
                match r {
                    Err(Error::ObjectNotFound { .. }) => c.inner.cache.forget([key.as_str()]),
                    Err(e) => {
                        tracing::debug!(key, error = %e, "renewing a read lease failed");
                        c.inner.cache.renewal_done(key);
                    }
                    Ok(_) => c.inner.cache.renewal_done(key),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(lease_ms: u64) -> Arc<ReplicaList> {
        Arc::new(ReplicaList {
            size: 1,
            replicas: Vec::new(),
            lease_ms,
        })
    }

    #[test]
    fn a_location_is_used_until_its_lease_less_the_margin_ends() {
        let cache = LeaseCache::new(8, Duration::from_millis(100));
        let sent = Instant::now();
        cache.keep("k", list(10_000), sent, cache.epoch());
        let hit = cache.get("k", sent + Duration::from_millis(1)).unwrap();
        assert!(hit.location.cached && !hit.renew);
        // Half-way: one reader is told to renew, the next is not.
        assert!(cache.get("k", sent + Duration::from_secs(5)).unwrap().renew);
        assert!(!cache.get("k", sent + Duration::from_secs(6)).unwrap().renew);
        cache.renewal_done("k");
        assert!(cache.get("k", sent + Duration::from_secs(6)).unwrap().renew);
        // The margin is taken off: 9.9 s after sending it is gone.
        assert!(cache
            .get("k", sent + Duration::from_millis(9_900))
            .is_none());
        assert_eq!(cache.len(), 0);
        // A short lease loses at most a quarter to the margin.
        assert_eq!(
            lease_end(sent, 200, Duration::from_millis(100)),
            sent + Duration::from_millis(150)
        );
    }

    #[test]
    fn a_write_since_the_request_was_sent_keeps_its_answer_out() {
        let cache = LeaseCache::new(8, Duration::from_millis(100));
        let sent = Instant::now();
        let before = cache.epoch();
        cache.forget(["other"]);
        cache.keep("k", list(10_000), sent, before);
        assert!(cache.get("k", sent).is_none(), "asked for before a write");
        cache.keep("k", list(10_000), sent, cache.epoch());
        assert!(cache.get("k", sent).is_some());
        cache.forget_all();
        assert!(cache.get("k", sent).is_none());
    }

    #[test]
    fn the_cache_is_bounded_and_can_be_off() {
        let cache = LeaseCache::new(2, Duration::ZERO);
        let sent = Instant::now();
        for k in ["a", "b", "c"] {
            cache.keep(k, list(10_000), sent, cache.epoch());
        }
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get("a", sent).is_none(),
            "the least recently used went"
        );
        let off = LeaseCache::new(0, Duration::ZERO);
        off.keep("a", list(10_000), sent, off.epoch());
        assert!(off.get("a", sent).is_none());
        // An expired answer is not kept.
        cache.keep("d", list(0), sent, cache.epoch());
        assert!(cache.get("d", sent).is_none());
    }
}
