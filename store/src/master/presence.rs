//! Which keys name completed objects, answered without the core's lock.
//!
//! `exist` and `batch_exist` are the calls an inference engine makes most (vLLM asks for tens
//! of thousands of keys per prefill), and eviction is the core's longest hold of its lock: it
//! scans and orders every object. Under one lock, a large existence check waits for a whole
//! eviction (Mooncake #3643). So the core keeps a second, concurrent view of its key set, the
//! [`Presence`], and the server answers existence from it without taking the core's lock: an
//! eviction or any other call under the lock never delays an existence check, and an existence
//! check never delays them.
//!
//! How the core guarantees that the view is its key set: the core's objects live in
//! [`Objects`], whose every change of the key set (insert, remove, retain) changes the
//! presence in the same step, under the core's lock; reads of the map go through `Deref`, and
//! nothing else can reach the map mutably. So between two calls on the core the presence holds
//! exactly the core's keys (checked by the core's invariants), and a reader sees each key's
//! latest change (papaya: a read happens after the write it observes).
//!
//! What an answer may report: per key, the state after some committed change, as `exist` under
//! the lock did, but a batch is no longer one instant (each key is). Durability: before any
//! change to the key set, the core publishes the sequence number of the record making it
//! ([`Presence::seq`], release); a reader loads it after reading the keys (acquire), so it
//! knows a number at least that of every change it saw, and waits for the log to be durable
//! that far before answering, as a read under the lock waits for every entry made so far.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::keymap::{KeyHasher, KeyMap};
use super::object::Object;
use crate::error::{Error, Result};

/// The keys of completed objects, shared by the core (which changes them) and the server
/// (which answers existence from them).
#[derive(Debug)]
pub struct Presence {
    keys: papaya::HashSet<Box<str>, RandomState>,
    /// At least the sequence number of every change made to `keys` so far.
    seq: AtomicU64,
    max_key_len: usize,
}

impl Presence {
    /// An empty view, for keys of at most `max_key_len` bytes.
    pub(crate) fn new(max_key_len: usize) -> Self {
        Presence {
            keys: papaya::HashSet::with_hasher(RandomState::default()),
            seq: AtomicU64::new(0),
            max_key_len,
        }
    }

    /// Whether a completed object has this key (see `Master::exist`).
    pub fn exist(&self, key: &str) -> Result<bool> {
        check_key(key, self.max_key_len)?;
        Ok(self.keys.pin().contains(key))
    }

    /// [`Presence::exist`] for each key, in order.
    pub fn batch_exist(&self, keys: &[String]) -> Vec<Result<bool>> {
        let pinned = self.keys.pin();
        keys.iter()
            .map(|k| check_key(k, self.max_key_len).map(|()| pinned.contains(k.as_str())))
            .collect()
    }

    /// At least the sequence number of every change seen by a read that ended before this
    /// call: the log position an answer must wait for.
    pub(crate) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// How many keys it holds.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// A key the master takes: not empty, at most `max_len` bytes.
pub(crate) fn check_key(key: &str, max_len: usize) -> Result<()> {
    crate::args::key(key)?;
    if key.len() > max_len {
        return Err(Error::params(format!(
            "key of {} bytes is longer than {max_len}",
            key.len()
        )));
    }
    Ok(())
}

/// The core's completed objects by key, and the [`Presence`] that mirrors their keys. Read
/// through `Deref`; the key set changes only through the methods here.
#[derive(Debug)]
pub(crate) struct Objects {
    map: KeyMap<Object>,
    presence: Arc<Presence>,
}

impl Deref for Objects {
    type Target = KeyMap<Object>;

    fn deref(&self) -> &KeyMap<Object> {
        &self.map
    }
}

impl Objects {
    pub(crate) fn new(hasher: KeyHasher, max_key_len: usize) -> Self {
        Objects {
            map: KeyMap::new(hasher),
            presence: Arc::new(Presence::new(max_key_len)),
        }
    }

    /// The view of these keys that readers share.
    pub(crate) fn presence(&self) -> &Arc<Presence> {
        &self.presence
    }

    /// Makes `presence` this map's view from now on, filled with its keys (a standby's state
    /// replaced from a snapshot keeps the server's view). Call it where no reader can look.
    pub(crate) fn attach(&mut self, presence: Arc<Presence>) {
        let pinned = presence.keys.pin();
        pinned.clear();
        for (key, _) in self.map.iter() {
            pinned.insert(key.clone());
        }
        presence
            .seq
            .fetch_max(self.presence.seq(), Ordering::AcqRel);
        drop(pinned);
        self.presence = presence;
    }

    /// The changes that follow are made by the record numbered `seq` (published before them).
    pub(crate) fn at(&self, seq: u64) {
        self.presence.seq.fetch_max(seq, Ordering::Release);
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Object> {
        self.map.get_mut(key)
    }

    pub(crate) fn get_mut_h(&mut self, h: u64, key: &str) -> Option<&mut Object> {
        self.map.get_mut_h(h, key)
    }

    /// Inserts or replaces; returns the object replaced.
    pub(crate) fn insert(&mut self, key: Box<str>, object: Object) -> Option<Object> {
        self.presence.keys.pin().insert(key.clone());
        self.map.insert(key, object)
    }

    /// Inserts a key that must be absent; gives the pair back if it is present.
    pub(crate) fn try_insert_h(
        &mut self,
        h: u64,
        key: Box<str>,
        object: Object,
    ) -> std::result::Result<(), (Box<str>, Object)> {
        let copy = key.clone();
        self.map.try_insert_h(h, key, object)?;
        self.presence.keys.pin().insert(copy);
        Ok(())
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<Object> {
        let removed = self.map.remove(key)?;
        self.presence.keys.pin().remove(key);
        Some(removed)
    }

    /// Keeps the objects for which `f` is true.
    pub(crate) fn retain(&mut self, mut f: impl FnMut(&Box<str>, &mut Object) -> bool) {
        let pinned = self.presence.keys.pin();
        self.map.retain(|key, o| {
            let keep = f(key, o);
            if !keep {
                pinned.remove(key);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::object::Pin;

    fn object() -> Object {
        Object {
            size: 1,
            replicas: Default::default(),
            stamped: 0,
            lease_until: 0,
            pin: Pin::None,
            writing: false,
        }
    }

    #[test]
    fn the_presence_follows_every_change_of_the_key_set() {
        let mut objects = Objects::new(KeyHasher::default(), 16);
        let p = objects.presence().clone();
        objects.at(1);
        objects.insert("a".into(), object());
        let h = objects.hash("b");
        objects.try_insert_h(h, "b".into(), object()).unwrap();
        assert!(objects.try_insert_h(h, "b".into(), object()).is_err());
        objects.insert("c".into(), object());
        assert_eq!(
            p.batch_exist(&["a".into(), "b".into(), "x".into()]).len(),
            3
        );
        assert!(p.exist("a").unwrap() && p.exist("b").unwrap() && !p.exist("x").unwrap());
        objects.at(2);
        assert!(objects.remove("a").is_some() && objects.remove("a").is_none());
        objects.retain(|k, _| &**k != "b");
        assert!(!p.exist("a").unwrap() && !p.exist("b").unwrap() && p.exist("c").unwrap());
        assert_eq!((p.len(), p.seq()), (1, 2));
        assert_eq!(p.exist("").unwrap_err().code(), Error::params("").code());
        assert!(p.exist(&"k".repeat(17)).is_err(), "longer than the limit");

        let other = Arc::new(Presence::new(16));
        objects.attach(other.clone());
        assert!(other.exist("c").unwrap() && other.seq() == 2);
        objects.insert("d".into(), object());
        assert!(other.exist("d").unwrap() && !p.exist("d").unwrap());
    }
}
