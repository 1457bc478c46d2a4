//! Hash maps keyed by text that keep each key's hash beside it, for the
//! live state, whose keys come and go (tables that only grow are
//! [`crate::text_ids`]). A growing table hashes every key again: with the
//! hash at hand that is a read of the entry, not of the key's text
//! wherever it lies on the heap.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::by_name::same_text;

/// Values by text key, in no order.
#[derive(Debug, Clone)]
pub struct ByText<V>(HashTable<Entry<V>>);

#[derive(Debug, Clone)]
struct Entry<V> {
    hash: u64,
    /// Shared: a key often names something the state reports (a job, a
    /// device), and its reports share the key's text.
    key: Arc<str>,
    value: V,
}

impl<V> Default for ByText<V> {
    fn default() -> Self {
        Self(HashTable::new())
    }
}

fn hash_of(key: &str) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl<V> Entry<V> {
    /// Whether this entry holds `key`, of hash `hash`: the whole hash,
    /// beside the entry, is compared first, so a key on the heap is read
    /// only where it is nearly sure to match.
    fn is(&self, hash: u64, key: &str) -> bool {
        self.hash == hash && same_text(&self.key, key)
    }
}

impl<V> ByText<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        let hash = hash_of(key);
        self.0.find(hash, |e| e.is(hash, key)).map(|e| &e.value)
    }

    /// `key`'s value, with the key as stored.
    pub fn get_key_value(&self, key: &str) -> Option<(&Arc<str>, &V)> {
        let hash = hash_of(key);
        self.0
            .find(hash, |e| e.is(hash, key))
            .map(|e| (&e.key, &e.value))
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let hash = hash_of(key);
        self.0
            .find_mut(hash, |e| e.is(hash, key))
            .map(|e| &mut e.value)
    }

    /// `key`'s value, made by `make` if it has none (the key is copied
    /// only then).
    pub fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        self.get_or_insert_with_key(key, make).1
    }

    /// [`ByText::get_or_insert_with`], with the key as stored.
    pub fn get_or_insert_with_key(
        &mut self,
        key: &str,
        make: impl FnOnce() -> V,
    ) -> (&Arc<str>, &mut V) {
        let hash = hash_of(key);
        let entry = self.0.entry(hash, |e| e.is(hash, key), |e| e.hash);
        let entry = entry
            .or_insert_with(|| Entry {
                hash,
                key: key.into(),
                value: make(),
            })
            .into_mut();
        (&entry.key, &mut entry.value)
    }

    /// `key`'s value to change, with the key as stored.
    pub fn get_key_value_mut(&mut self, key: &str) -> Option<(&Arc<str>, &mut V)> {
        let hash = hash_of(key);
        self.0
            .find_mut(hash, |e| e.is(hash, key))
            .map(|e| (&e.key, &mut e.value))
    }

    /// Applies `change` to `key`'s value (with the key as stored), then
    /// removes the entry if `empty` says it is: one lookup for both.
    pub fn change<R>(
        &mut self,
        key: &str,
        change: impl FnOnce(&Arc<str>, &mut V) -> R,
        empty: impl FnOnce(&V) -> bool,
    ) -> Option<R> {
        let hash = hash_of(key);
        let mut found = self.0.find_entry(hash, |e| e.is(hash, key)).ok()?;
        let entry = found.get_mut();
        let result = change(&entry.key, &mut entry.value);
        if empty(&found.get().value) {
            found.remove();
        }
        Some(result)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let hash = hash_of(key);
        let found = self.0.find_entry(hash, |e| e.is(hash, key)).ok()?;
        Some(found.remove().0.value)
    }

    /// Keeps only the entries `keep` says yes to (it may change them).
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        self.0.retain(|e| keep(&e.key, &mut e.value));
    }

    /// Every key and value, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|e| (&*e.key, &e.value))
    }

    /// Every entry, to change its value, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        self.0.iter_mut().map(|e| (&*e.key, &mut e.value))
    }

    /// Every value, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|e| &e.value)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V: PartialEq> PartialEq for ByText<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_replaced_and_compared_whatever_the_order() {
        let mut a = ByText::default();
        for i in 0..1_000 {
            *a.get_or_insert_with(&format!("id-{i}"), || 0) = i;
        }
        *a.get_mut("id-7").unwrap() = 70;
        assert_eq!(a.len(), 1_000);
        assert_eq!(a.get("id-7"), Some(&70));
        assert_eq!(a.get("id-999"), Some(&999));
        assert_eq!(a.get("id-1000"), None);

        let mut b = ByText::default();
        for i in (0..1_000).rev() {
            b.get_or_insert_with(&format!("id-{i}"), || if i == 7 { 70 } else { i });
        }
        assert_eq!(a, b);
        *b.get_mut("id-8").unwrap() = 0;
        assert_ne!(a, b);

        *b.get_or_insert_with("id-8", || 1) += 8;
        *b.get_or_insert_with("new", || 1) += 1;
        assert_eq!(b.get("id-8"), Some(&8));
        assert_eq!(b.get("new"), Some(&2));
        assert_eq!(b.change("new", |_, v| *v += 1, |v| *v > 2), Some(()));
        assert_eq!(b.get("new"), None);
        *b.get_or_insert_with("new", || 1) += 1;
        assert_eq!(
            b.change("new", |k, v| (k.to_string(), *v), |_| false),
            Some(("new".to_owned(), 2))
        );
        assert_eq!(
            b.get_key_value_mut("new").map(|(k, v)| (&**k, *v)),
            Some(("new", 2))
        );
        assert_eq!(b.change("none", |_, _| (), |_| true), None);
        assert_eq!(b.remove("new"), Some(2));
        assert_eq!(b.remove("new"), None);
        assert_eq!(b.len(), 1_000);
        assert_eq!(b.values().copied().max(), Some(999));
        b.retain(|key, value| {
            *value += 1;
            key != "id-0"
        });
        assert_eq!(
            (b.len(), b.get("id-0"), b.get("id-1")),
            (999, None, Some(&2))
        );
    }
}
