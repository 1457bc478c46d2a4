//! The pools of one ledger partition, by name.
//!
//! A partition holds a handful of pools, and every event looks one up by
//! name while the timers look at all of them: so they are kept in a list
//! in name order, found by a binary search of their names, and walked as
//! a slice. A snapshot stores them as a map by name, as before.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Pool;
use gpuledger_schemas::by_name::same_text;

/// Pools in name order, each named by its `name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Pools(Vec<Pool>);

/// Up to this many pools, one is found by comparing names for equality
/// one after another, which for a few short names is cheaper than
/// ordering them.
const FEW: usize = 8;

impl Pools {
    /// Where the pool `name` is, or would go in name order.
    fn place(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|p| (*p.name).cmp(name))
    }

    fn find(&self, name: &str) -> Option<usize> {
        if self.0.len() <= FEW {
            self.0.iter().position(|p| same_text(&p.name, name))
        } else {
            self.place(name).ok()
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Pool> {
        self.find(name).map(|i| &self.0[i])
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Pool> {
        self.find(name).map(|i| &mut self.0[i])
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Adds `pool` under its name, replacing any pool of that name.
    pub(crate) fn insert(&mut self, pool: Pool) {
        match self.place(&pool.name) {
            Ok(i) => self.0[i] = pool,
            Err(i) => self.0.insert(i, pool),
        }
    }

    /// The pools in name order.
    pub(crate) fn values(&self) -> std::slice::Iter<'_, Pool> {
        self.0.iter()
    }

    /// The pools in name order, to change.
    pub(crate) fn values_mut(&mut self) -> std::slice::IterMut<'_, Pool> {
        self.0.iter_mut()
    }

    /// The pools' names in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|p| &*p.name)
    }

    /// (name, pool) in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Pool)> {
        self.0.iter().map(|p| (&*p.name, p))
    }
}

impl Serialize for Pools {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// Each pool is told its name, which the snapshot gives as its key.
impl<'de> Deserialize<'de> for Pools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pools = BTreeMap::<String, Pool>::deserialize(d)?;
        Ok(Pools(
            pools
                .into_iter()
                .map(|(name, pool)| Pool {
                    name: name.as_str().into(),
                    ..pool
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str) -> Pool {
        Pool {
            name: name.into(),
            ..Pool::default()
        }
    }

    #[test]
    fn pools_are_found_by_name_and_walked_in_name_order() {
        let mut pools = Pools::default();
        for name in ["h200", "a100", "h100"] {
            pools.insert(pool(name));
        }
        assert_eq!(pools.keys().collect::<Vec<_>>(), ["a100", "h100", "h200"]);
        assert!(pools.contains_key("h100") && !pools.contains_key("h10"));
        assert_eq!(pools.get("h200").map(|p| &*p.name), Some("h200"));
        assert!(pools.get_mut("l4").is_none());
        // Replacing keeps one pool of the name.
        pools.insert(pool("a100"));
        assert_eq!(pools.values().len(), 3);

        let text = serde_json::to_string(&pools).expect("serializes");
        assert!(text.starts_with(r#"{"a100":"#), "{text}");
        let back: Pools = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, pools);
        assert_eq!(back.get("h100").map(|p| &*p.name), Some("h100"));

        // Past a few, found by their order.
        let mut many = Pools::default();
        for n in (0..20).rev() {
            many.insert(pool(&format!("p{n:02}")));
        }
        assert!((0..20).all(|n| many.get(&format!("p{n:02}")).is_some()));
        assert!(many.get("p20").is_none() && many.get("a").is_none());
        assert_eq!(many.keys().next(), Some("p00"));
    }
}
