//! A map from object keys to values whose hash the caller can compute once and reuse across
//! several maps and calls (a put touches the objects and the writes several times).

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::hash_table::{Entry, HashTable};

/// Keys are `Box<str>`; every map made from the same [`KeyHasher`] hashes alike.
#[derive(Debug, Clone)]
pub(crate) struct KeyMap<V> {
    table: HashTable<(Box<str>, V)>,
    hasher: KeyHasher,
}

/// The seeded hash shared by the master's key maps.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyHasher(RandomState);

impl KeyHasher {
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.0.hash_one(key)
    }
}

impl<V> KeyMap<V> {
    pub(crate) fn new(hasher: KeyHasher) -> Self {
        KeyMap {
            table: HashTable::new(),
            hasher,
        }
    }

    /// The hash of `key` in this map (and every map of the same hasher).
    pub(crate) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash(key)
    }

    pub(crate) fn get_h(&self, h: u64, key: &str) -> Option<&V> {
        self.table.find(h, |e| &*e.0 == key).map(|e| &e.1)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.get_h(self.hash(key), key)
    }

    pub(crate) fn get_mut_h(&mut self, h: u64, key: &str) -> Option<&mut V> {
        self.table.find_mut(h, |e| &*e.0 == key).map(|e| &mut e.1)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.get_mut_h(self.hash(key), key)
    }

    pub(crate) fn contains_key_h(&self, h: u64, key: &str) -> bool {
        self.get_h(h, key).is_some()
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert_h(&mut self, h: u64, key: Box<str>, value: V) -> Option<V> {
        let hasher = &self.hasher;
        match self.table.entry(h, |e| e.0 == key, |e| hasher.hash(&e.0)) {
            Entry::Occupied(mut o) => Some(std::mem::replace(&mut o.get_mut().1, value)),
            Entry::Vacant(v) => {
                v.insert((key, value));
                None
            }
        }
    }

    /// Inserts a key that must be absent; gives the pair back if it is present.
    pub(crate) fn try_insert_h(
        &mut self,
        h: u64,
        key: Box<str>,
        value: V,
    ) -> Result<(), (Box<str>, V)> {
        let hasher = &self.hasher;
        match self.table.entry(h, |e| e.0 == key, |e| hasher.hash(&e.0)) {
            Entry::Occupied(_) => Err((key, value)),
            Entry::Vacant(v) => {
                v.insert((key, value));
                Ok(())
            }
        }
    }

    pub(crate) fn insert(&mut self, key: Box<str>, value: V) -> Option<V> {
        let h = self.hash(&key);
        self.insert_h(h, key, value)
    }

    pub(crate) fn remove_entry_h(&mut self, h: u64, key: &str) -> Option<(Box<str>, V)> {
        match self.table.find_entry(h, |e| &*e.0 == key) {
            Ok(o) => Some(o.remove().0),
            Err(_) => None,
        }
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<V> {
        self.remove_entry_h(self.hash(key), key).map(|e| e.1)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Box<str>, &V)> {
        self.table.iter().map(|e| (&e.0, &e.1))
    }

    pub(crate) fn retain(&mut self, mut f: impl FnMut(&Box<str>, &mut V) -> bool) {
        self.table.retain(|e| f(&e.0, &mut e.1));
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map_and_shares_hashes() {
        let h = KeyHasher::default();
        let mut a: KeyMap<u32> = KeyMap::new(h.clone());
        let b: KeyMap<u8> = KeyMap::new(h.clone());
        assert_eq!(a.hash("k"), b.hash("k"));
        assert_eq!(a.insert("k".into(), 1), None);
        assert_eq!(a.insert("k".into(), 2), Some(1));
        assert_eq!(a.get("k"), Some(&2));
        *a.get_mut("k").unwrap() += 2;
        assert!(a.contains_key("k") && !a.contains_key("x"));
        for i in 0..1000 {
            a.insert(format!("x{i}").into(), i);
        }
        a.retain(|_, v| *v % 2 == 0);
        assert_eq!(a.len(), 501);
        assert_eq!(a.remove("k"), Some(4));
        assert_eq!(a.iter().count(), 500);
    }
}
