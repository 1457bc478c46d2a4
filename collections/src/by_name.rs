//! Short names compared without a call, and the small maps keyed by them.
//!
//! A ledger partition has a handful of pools and tenants, and every event
//! looks several of them up by name: the tenant's policy, its use, its
//! watch, the pool's decided requests and ended attempts, the billing
//! facts of its pool and the segments of its tenant. A `BTreeMap` with
//! `String` keys compares a name to each key it passes with a call to
//! compare memory, which for names of a dozen bytes costs more than the
//! comparing. A [`ByName`] keeps its few entries in name order in one
//! vector, finds one by [`same_text`], and reads, iterates and stores as
//! the map it replaces.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Whether `a` and `b` are the same text. Names and ids of up to 32
/// bytes are compared eight bytes at a time in place (the last eight
/// overlapping the ones before where the length is no multiple of eight);
/// longer ones by the library's comparison.
#[inline]
pub fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    if n > 32 {
        return a == b;
    }
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// The eight bytes of `bytes` from `at` (which leaves eight).
#[inline]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(word)
}

/// Up to this many entries, a name is found by comparing it for equality
/// with each in turn; past it, by a binary search of their order.
const FEW: usize = 8;

/// Values by name, in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByName<V>(Vec<(Box<str>, V)>);

impl<V> Default for ByName<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> ByName<V> {
    /// Where `name` is, or where it would go in name order.
    fn place(&self, name: &str) -> Result<usize, usize> {
        if self.0.len() <= FEW
            && let Some(i) = self.0.iter().position(|(n, _)| same_text(n, name))
        {
            return Ok(i);
        }
        self.0.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    fn find(&self, name: &str) -> Option<usize> {
        if self.0.len() <= FEW {
            self.0.iter().position(|(n, _)| same_text(n, name))
        } else {
            self.place(name).ok()
        }
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        self.find(name).map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.find(name).map(|i| &mut self.0[i].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Sets `name`'s value, giving back the one it replaces.
    pub fn insert(&mut self, name: &str, value: V) -> Option<V> {
        match self.place(name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (name.into(), value));
                None
            }
        }
    }

    /// `name`'s value, made by `make` if it has none (the name is copied
    /// only then).
    pub fn get_or_insert_with(&mut self, name: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.place(name) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (name.into(), make()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn remove(&mut self, name: &str) -> Option<V> {
        self.find(name).map(|i| self.0.remove(i).1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// (name, value) in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(n, v)| (&**n, v))
    }

    /// The names in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| &**n)
    }

    /// The values in name order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The values in name order, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Keeps only the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        self.0.retain_mut(|(n, v)| keep(n, v));
    }
}

/// Written as a map, in name order, as a `BTreeMap` writes it.
impl<V: Serialize> Serialize for ByName<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// Read from a map in any order; a name given twice keeps its last value.
impl<'de, V: Deserialize<'de>> Deserialize<'de> for ByName<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = ByName<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from names to values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut by_name = ByName::default();
                while let Some((name, value)) = map.next_entry::<String, V>()? {
                    by_name.insert(&name, value);
                }
                Ok(by_name)
            }
        }

        d.deserialize_map(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn texts_of_every_length_compare_as_strings_do() {
        let base = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
        for n in 0..=base.len() {
            let a = &base[..n];
            // A copy elsewhere in memory.
            let copy = a.to_owned();
            assert!(same_text(a, &copy), "{a}");
            // One byte changed, wherever it is, or one byte more or less.
            for at in 0..n {
                let mut b = a.as_bytes().to_vec();
                b[at] = b'_';
                let b = String::from_utf8(b).expect("ascii");
                assert!(!same_text(a, &b), "{a} {b}");
            }
            if n < base.len() {
                assert!(!same_text(a, &base[..n + 1]));
            }
            if n > 0 {
                assert!(!same_text(a, &base[..n - 1]));
            }
        }
    }

    #[test]
    fn a_map_by_name_reads_writes_and_iterates_as_a_btree_map() {
        // Past FEW entries too, where names are found by their order.
        for count in [3, 20] {
            let mut ours = ByName::default();
            let mut theirs = BTreeMap::new();
            for i in (0..count).rev().chain([1, 2]) {
                let name = format!("team-{i:02}");
                assert_eq!(ours.insert(&name, i * 10), theirs.insert(name, i * 10));
            }
            *ours.get_or_insert_with("team-01", || 0) += 1;
            *ours.get_or_insert_with("a-new-one", || 7) += 1;
            *theirs.entry("team-01".to_owned()).or_insert(0) += 1;
            *theirs.entry("a-new-one".to_owned()).or_insert(7) += 1;
            assert_eq!(ours.remove("team-02"), theirs.remove("team-02"));
            assert_eq!(ours.remove("team-02"), None);
            let all: Vec<_> = ours.iter().map(|(n, v)| (n.to_owned(), *v)).collect();
            let expected: Vec<_> = theirs.iter().map(|(n, v)| (n.clone(), *v)).collect();
            assert_eq!(all, expected);
            assert_eq!((ours.len(), ours.is_empty()), (theirs.len(), false));
            assert!(ours.contains_key("team-00") && !ours.contains_key("team-0"));
            assert_eq!(ours.get("team-01"), Some(&11));
            *ours.get_mut("team-00").expect("kept") += 5;
            assert_eq!(ours.values().next(), Some(&8));
            ours.values_mut().for_each(|v| *v += 1);
            ours.retain(|name, v| {
                *v -= 1;
                name != "team-01"
            });
            theirs.remove("team-01");
            assert_eq!(
                ours.keys().collect::<Vec<_>>(),
                theirs.keys().collect::<Vec<_>>()
            );

            let text = serde_json::to_string(&ours).expect("writes");
            theirs.insert("team-00".to_owned(), 5);
            assert_eq!(text, serde_json::to_string(&theirs).expect("writes"));
            let back: ByName<i32> = serde_json::from_str(&text).expect("reads");
            assert_eq!(back, ours);
        }
        let unordered: ByName<i32> = serde_json::from_str(r#"{"b":1,"a":2,"b":3}"#).expect("reads");
        assert_eq!(unordered.iter().collect::<Vec<_>>(), [("a", &2), ("b", &3)]);
    }
}
