//! Maps keyed by attempt, (job_id, attempt), that are read with borrowed
//! ids: every event names its attempt by reference, and looking it up
//! should not copy the job's id. A job's attempts sit in a small map
//! under its id; iteration runs in (job, attempt) order, as a map keyed by
//! the pair would.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which attempt of which job, borrowed.
pub(crate) type AttemptKey<'a> = (&'a str, i32);

/// An attempt as messages name it: `job "j-1" attempt 2`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named<'a>(pub(crate) AttemptKey<'a>);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (job, attempt) = self.0;
        write!(f, "job {job:?} attempt {attempt}")
    }
}

/// Values by attempt. A snapshot stores a list of ((job, attempt), value)
/// pairs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ByAttempt<V>(BTreeMap<String, BTreeMap<i32, V>>);

impl<V> Default for ByAttempt<V> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

impl<V> ByAttempt<V> {
    pub(crate) fn get(&self, (job, attempt): AttemptKey<'_>) -> Option<&V> {
        self.0.get(job)?.get(&attempt)
    }

    pub(crate) fn get_mut(&mut self, (job, attempt): AttemptKey<'_>) -> Option<&mut V> {
        self.0.get_mut(job)?.get_mut(&attempt)
    }

    pub(crate) fn contains(&self, key: AttemptKey<'_>) -> bool {
        self.get(key).is_some()
    }

    /// The attempt's value, made by `make` if there is none yet.
    pub(crate) fn get_or_insert_with(
        &mut self,
        (job, attempt): AttemptKey<'_>,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        self.attempts_of(job).entry(attempt).or_insert_with(make)
    }

    /// Sets the attempt's value, returning the one it replaces.
    pub(crate) fn insert(&mut self, (job, attempt): AttemptKey<'_>, value: V) -> Option<V> {
        self.attempts_of(job).insert(attempt, value)
    }

    /// The job's attempts, an empty map made for it if it had none (its id
    /// is copied only then).
    fn attempts_of(&mut self, job: &str) -> &mut BTreeMap<i32, V> {
        if !self.0.contains_key(job) {
            self.0.insert(job.to_owned(), BTreeMap::new());
        }
        self.0
            .get_mut(job)
            .unwrap_or_else(|| unreachable!("the job's map was just made"))
    }

    /// Takes the attempt's value out.
    pub(crate) fn remove(&mut self, (job, attempt): AttemptKey<'_>) -> Option<V> {
        let attempts = self.0.get_mut(job)?;
        let value = attempts.remove(&attempt);
        if attempts.is_empty() {
            self.0.remove(job);
        }
        value
    }

    /// Every attempt and its value, in (job, attempt) order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (AttemptKey<'_>, &V)> {
        self.0.iter().flat_map(|(job, attempts)| {
            attempts
                .iter()
                .map(move |(attempt, v)| ((job.as_str(), *attempt), v))
        })
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.0.values().flat_map(BTreeMap::values)
    }

    /// The first attempt in (job, attempt) order.
    pub(crate) fn first(&self) -> Option<(AttemptKey<'_>, &V)> {
        self.iter().next()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V: Serialize> Serialize for ByAttempt<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
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
        assert!(!map.contains(("j-3", 1)));
        let keys: Vec<_> = map.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [("j-1", 1), ("j-1", 2), ("j-2", 1)]);
        assert_eq!(map.remove(("j-2", 1)), Some("b"));
        assert_eq!(map.remove(("j-2", 1)), None);
        assert_eq!(map.first().map(|(k, _)| k), Some(("j-1", 1)));

        // Stored as the pairs a map keyed by (job, attempt) would write.
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(text, r#"[[["j-1",1],"a1'"],[["j-1",2],"a2"]]"#);
        let back: ByAttempt<String> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get(("j-1", 2)).map(String::as_str), Some("a2"));
    }
}
