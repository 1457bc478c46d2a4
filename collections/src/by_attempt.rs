//! Maps keyed by attempt, (job_id, attempt), that are read with borrowed
//! ids: every event names its attempt by reference, and looking it up
//! should not copy the job's id. Jobs are hashed (a lookup costs one hash
//! of the id, not a string comparison per tree level); a job's few
//! attempts sit in a small vector sorted by attempt. Iteration is in no
//! particular order, so nothing that decides may depend on it: the
//! snapshot form is in (job, attempt) order.

use std::sync::Arc;

use crate::by_text::ByText;
use crate::few::Few;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which attempt of which job, borrowed.
pub type AttemptKey<'a> = (&'a str, i32);

/// Values by (job, attempt).
#[derive(Debug, Clone, PartialEq)]
pub struct ByAttempt<V>(ByText<Attempts<V>>);

/// One job's attempts, sorted by attempt. Nearly every job has one at a
/// time, kept in place: a job then costs no list of its own on the heap.
type Attempts<V> = Few<(i32, V)>;

impl<V> Default for ByAttempt<V> {
    fn default() -> Self {
        Self(ByText::default())
    }
}

impl<V> ByAttempt<V> {
    pub fn get(&self, (job, attempt): AttemptKey<'_>) -> Option<&V> {
        let attempts = self.0.get(job)?.as_slice();
        let i = find(attempts, attempt).ok()?;
        Some(&attempts[i].1)
    }

    /// The value of `(job, attempt)` to change, with the job's id as
    /// stored.
    pub fn get_mut_with_job(
        &mut self,
        (job, attempt): AttemptKey<'_>,
    ) -> Option<(&Arc<str>, &mut V)> {
        let (job, attempts) = self.0.get_key_value_mut(job)?;
        let attempts = attempts.as_mut_slice();
        let i = find(attempts, attempt).ok()?;
        Some((job, &mut attempts[i].1))
    }

    pub fn get_mut(&mut self, (job, attempt): AttemptKey<'_>) -> Option<&mut V> {
        let attempts = self.0.get_mut(job)?.as_mut_slice();
        let i = find(attempts, attempt).ok()?;
        Some(&mut attempts[i].1)
    }

    /// The value of `(job, attempt)`, made by `make` if it has none, with
    /// the job's id as stored.
    pub fn get_or_insert_with_job(
        &mut self,
        (job, attempt): AttemptKey<'_>,
        make: impl FnOnce() -> V,
    ) -> (&Arc<str>, &mut V) {
        let (job, attempts) = self.attempts_of(job);
        let i = match find(attempts.as_slice(), attempt) {
            Ok(i) => i,
            Err(i) => {
                attempts.insert(i, (attempt, make()));
                i
            }
        };
        (job, &mut attempts.as_mut_slice()[i].1)
    }

    pub fn insert(&mut self, key: AttemptKey<'_>, value: V) -> Option<V> {
        self.insert_shared(key, value).0
    }

    /// [`ByAttempt::insert`], giving the job's id as stored too.
    pub fn insert_shared(
        &mut self,
        (job, attempt): AttemptKey<'_>,
        value: V,
    ) -> (Option<V>, Arc<str>) {
        let (job, attempts) = self.attempts_of(job);
        let old = match find(attempts.as_slice(), attempt) {
            Ok(i) => Some(std::mem::replace(&mut attempts.as_mut_slice()[i].1, value)),
            Err(i) => {
                attempts.insert(i, (attempt, value));
                None
            }
        };
        (old, Arc::clone(job))
    }

    /// `job`'s attempts, with its id as stored.
    fn attempts_of(&mut self, job: &str) -> (&Arc<str>, &mut Attempts<V>) {
        // One hash of the id; it is copied only for a new job.
        self.0.get_or_insert_with_key(job, Few::none)
    }

    /// Applies `change` to the value of `(job, attempt)`, then removes it
    /// if `empty` says it is: one lookup for both.
    pub fn change<R>(
        &mut self,
        (job, attempt): AttemptKey<'_>,
        change: impl FnOnce(&mut V) -> R,
        empty: impl FnOnce(&V) -> bool,
    ) -> Option<R> {
        let changed = self.0.change(
            job,
            |_, attempts| {
                let i = find(attempts.as_slice(), attempt).ok()?;
                let value = &mut attempts.as_mut_slice()[i].1;
                let result = change(value);
                if empty(value) {
                    attempts.remove(i);
                }
                Some(result)
            },
            Few::is_empty,
        );
        changed.flatten()
    }

    /// Takes out the value of `(job, attempt)` and gives `with` it and the
    /// job's id as stored: one lookup, also where the job goes.
    pub fn take_with<R>(
        &mut self,
        (job, attempt): AttemptKey<'_>,
        with: impl FnOnce(&Arc<str>, V) -> R,
    ) -> Option<R> {
        let taken = self.0.change(
            job,
            |job, attempts| {
                let i = find(attempts.as_slice(), attempt).ok()?;
                let (_, value) = attempts.remove(i);
                Some(with(job, value))
            },
            Few::is_empty,
        );
        taken.flatten()
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (AttemptKey<'_>, &V)> {
        self.0.iter().flat_map(|(job, attempts)| {
            attempts
                .as_slice()
                .iter()
                .map(move |(attempt, v)| ((job, *attempt), v))
        })
    }

    /// Every entry, to change its value, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (AttemptKey<'_>, &mut V)> {
        self.0.iter_mut().flat_map(|(job, attempts)| {
            attempts
                .as_mut_slice()
                .iter_mut()
                .map(move |(attempt, v)| ((job, *attempt), v))
        })
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0
            .values()
            .flat_map(|attempts| attempts.as_slice().iter().map(|(_, v)| v))
    }

    /// Every entry in (job, attempt) order.
    pub fn sorted(&self) -> Vec<(AttemptKey<'_>, &V)> {
        let mut all: Vec<_> = self.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// Where `attempt` is in a job's sorted attempts, or where it would go.
fn find<V>(attempts: &[(i32, V)], attempt: i32) -> Result<usize, usize> {
    attempts.binary_search_by_key(&attempt, |(a, _)| *a)
}

/// Stored as a list of ((job, attempt), value) pairs in key order.
impl<V: Serialize> Serialize for ByAttempt<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl<'de, V: DeserializeOwned> Deserialize<'de> for ByAttempt<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = ByAttempt::default();
        for ((job, attempt), value) in Vec::<((String, i32), V)>::deserialize(d)? {
            map.insert((&job, attempt), value);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_read_and_iterate_as_a_map_keyed_by_the_pair() {
        let mut map = ByAttempt::default();
        assert_eq!(map.insert(("j-2", 1), "b"), None);
        assert_eq!(map.insert(("j-1", 2), "a2"), None);
        assert_eq!(map.insert(("j-1", 1), "a1"), None);
        assert_eq!(map.insert(("j-1", 1), "a1'"), Some("a1"));
        assert_eq!(map.get(("j-1", 1)), Some(&"a1'"));
        assert!(map.get(("j-3", 1)).is_none());
        let keys: Vec<_> = map.sorted().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [("j-1", 1), ("j-1", 2), ("j-2", 1)]);
        assert_eq!(map.take_with(("j-2", 1), |_, v| v), Some("b"));
        assert_eq!(map.take_with(("j-2", 1), |_, v| v), None);
        // A job's attempts go from one to several and back to none.
        *map.get_or_insert_with_job(("j-3", 2), || "c2").1 = "c2'";
        map.insert(("j-3", 3), "c3");
        map.insert(("j-3", 1), "c1");
        let keys: Vec<_> = map.sorted().into_iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(
            &keys[2..],
            [(("j-3", 1), "c1"), (("j-3", 2), "c2'"), (("j-3", 3), "c3")]
        );
        for (attempt, value) in [(2, "c2'"), (1, "c1"), (3, "c3")] {
            assert_eq!(map.take_with(("j-3", attempt), |_, v| v), Some(value));
        }
        assert_eq!(map.get(("j-3", 3)), None);
        map.insert(("j-3", 1), "c1");
        let (job, value) = map
            .take_with(("j-3", 1), |j, v| (Arc::clone(j), v))
            .unwrap();
        assert_eq!((&*job, value), ("j-3", "c1"));
        assert_eq!(map.0.get("j-3"), None);

        // A change may empty a value, which then leaves; the job with it.
        map.insert(("j-4", 1), "d1");
        assert_eq!(map.change(("j-4", 1), |v| *v = "d1'", |_| false), Some(()));
        assert_eq!(map.get(("j-4", 1)), Some(&"d1'"));
        assert_eq!(map.change(("j-4", 2), |_| (), |_| true), None);
        assert_eq!(map.change(("j-4", 1), |v| *v, |_| true), Some("d1'"));
        assert_eq!(map.0.get("j-4"), None);

        // Stored as the pairs a map keyed by (job, attempt) would write.
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(text, r#"[[["j-1",1],"a1'"],[["j-1",2],"a2"]]"#);
        let back: ByAttempt<String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get(("j-1", 2)).map(String::as_str), Some("a2"));
    }
}
