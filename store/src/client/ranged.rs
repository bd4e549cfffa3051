//! Ranged reads: parts of objects into registered memory (Mooncake's `get_into_ranges`), with
//! one replica-list round trip for every key of a batch (none for keys whose locations are
//! cached) and all the fragments of a key in flight together.

use std::collections::HashMap;
use std::future::Future;

use super::cache::Location;
use super::{Client, Fragment, Options};
use crate::args;
use crate::error::{Error, Result};

impl Client {
    /// For each `(key, fragments)`, reads each fragment's `len` bytes at `offset` inside the
    /// object into registered memory at `addr`. One list of results per item, one result per
    /// fragment: the bytes read (its `len`), or why it was not read. A fragment with a bad
    /// address or lying outside the object is `InvalidParams` in its place, and the item's other
    /// fragments are still read; a key that cannot be read (missing, or its replicas failing)
    /// answers its error in every fragment of its items. Items may name the same key: it is
    /// looked up once. The memory is written until the call ends, only by this client's engine:
    /// register it local-only (see [`Client::engine`]).
    pub fn batch_get_ranges<K: AsRef<str>, F: AsRef<[Fragment]>>(
        &self,
        items: &[(K, F)],
        opts: impl Into<Options>,
    ) -> impl Future<Output = Result<Vec<Vec<Result<u64>>>>> + Send + 'static {
        let opts = opts.into();
        let items: Vec<Item> = items
            .iter()
            .map(|(key, fragments)| Item::new(key.as_ref(), fragments.as_ref()))
            .collect();
        self.call(move |c| async move {
            let mut keys: Vec<String> = Vec::new();
            let mut index: HashMap<&str, usize> = HashMap::new();
            for item in items.iter().filter(|i| i.reads()) {
                index.entry(&item.key).or_insert_with(|| {
                    keys.push(item.key.clone());
                    keys.len() - 1
                });
            }
            if keys.is_empty() {
                return Ok(items.into_iter().map(Item::refused).collect());
            }
            let until = c.until(&opts);
            let found = c.locations(&keys, &opts, until).await?;
            // Each item at its key's location; an item that reads nothing is not read.
            let at: Vec<Result<Location>> = items
                .iter()
                .map(|item| match index.get(item.key.as_str()) {
                    Some(&k) if item.reads() => found[k].clone(),
                    _ => Err(Error::params("nothing to read")),
                })
                .collect();
            let item_keys: Vec<String> = items.iter().map(|i| i.key.clone()).collect();
            // The size each item was read at first: its fragments outside it are refused even
            // when the read fails.
            let sizes: Vec<Option<u64>> = at
                .iter()
                .map(|at| at.as_ref().ok().map(|at| at.list.size))
                .collect();
            let read = c
                .read_all(&item_keys, at, until, |i, at, until| {
                    let (c, item) = (&c, &items[i]);
                    async move {
                        let list = &at.list;
                        let outside = |f: &Fragment| !f.inside(list.size);
                        let pieces: Vec<Fragment> =
                            item.passed().filter(|f| !outside(f)).copied().collect();
                        if !pieces.is_empty() {
                            c.inner
                                .read_object(&item.key, list, at.sent, &pieces, until, None)
                                .await?;
                        }
                        Ok(item.answer(|f| Some(item.check(f, list.size).map(|()| f.len))))
                    }
                })
                .await;
            let answers =
                items
                    .iter()
                    .zip(read)
                    .zip(sizes)
                    .map(|((item, read), size)| match read {
                        Ok(answer) => answer,
                        Err(_) if !item.reads() => item.answer(|_| None),
                        Err(e) => item.answer(|f| {
                            let checked = size.map_or(Ok(()), |size| item.check(f, size));
                            Some(checked.and_then(|()| Err(e.clone())))
                        }),
                    });
            Ok(answers.collect())
        })
    }
}

/// One item of a ranged batch: its key and fragments, each checked where the call is made.
struct Item {
    key: String,
    /// Each fragment, or why it was refused before any round trip.
    fragments: Vec<std::result::Result<Fragment, Error>>,
}

impl Item {
    fn new(key: &str, fragments: &[Fragment]) -> Item {
        let key_ok = args::key(key);
        let fragments = fragments
            .iter()
            .map(|f| {
                key_ok.clone()?;
                args::buffer(f.addr, f.len)?;
                Ok(*f)
            })
            .collect();
        Item {
            key: key.to_string(),
            fragments,
        }
    }

    /// `InvalidParams` when `f` lies outside an object of `size` bytes.
    fn check(&self, f: &Fragment, size: u64) -> Result<()> {
        match f.inside(size) {
            true => Ok(()),
            false => Err(Error::params(format!(
                "bytes {}+{} lie outside {:?} ({size} bytes)",
                f.offset, f.len, self.key
            ))),
        }
    }

    /// Whether any fragment is to be read.
    fn reads(&self) -> bool {
        self.fragments.iter().any(|f| f.is_ok())
    }

    fn passed(&self) -> impl Iterator<Item = &Fragment> {
        self.fragments.iter().filter_map(|f| f.as_ref().ok())
    }

    /// The item's results: each refusal in its place, and `result(fragment)` for the others
    /// (`None`: nothing was read for it, which happens only when the item reads nothing).
    fn answer(&self, result: impl Fn(&Fragment) -> Option<Result<u64>>) -> Vec<Result<u64>> {
        self.fragments
            .iter()
            .map(|f| match f {
                Err(e) => Err(e.clone()),
                Ok(f) => result(f).unwrap_or_else(|| {
                    Err(Error::Internal {
                        reason: "a fragment was neither read nor refused".into(),
                    })
                }),
            })
            .collect()
    }

    fn refused(self) -> Vec<Result<u64>> {
        self.answer(|_| None)
    }
}
