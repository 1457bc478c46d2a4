//! The pools of one ledger partition, by name.
//!
//! A partition holds a handful of pools, and every event looks one up by
//! name while the timers look at all of them: so they are a
//! [`ByName`] (a list in name order, found by comparing names while
//! there are few). A snapshot stores them as a map by name, as before.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ledger::Pool;
use gpuledger_collections::by_name::ByName;

/// Pools in name order, each under its `name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Pools(ByName<Pool>);

impl Pools {
    pub(crate) fn get(&self, name: &str) -> Option<&Pool> {
        self.0.get(name)
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Pool> {
        self.0.get_mut(name)
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Adds `pool` under its name, replacing any pool of that name.
    pub(crate) fn insert(&mut self, pool: Pool) {
        let name = pool.name.clone();
        self.0.insert(&name, pool);
    }

    /// The pools in name order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Pool> {
        self.0.values()
    }

    /// The pools in name order, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Pool> {
        self.0.values_mut()
    }

    /// The pools' names in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys()
    }

    /// (name, pool) in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Pool)> {
        self.0.iter()
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
        let mut pools = Pools::default();
        for (name, pool) in BTreeMap::<String, Pool>::deserialize(d)? {
            pools.insert(Pool {
                name: name.as_str().into(),
                ..pool
            });
        }
        Ok(pools)
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
        assert_eq!(pools.values().count(), 3);

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
