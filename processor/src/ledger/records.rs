//! What the ledger keeps of its history: the billing facts budgets price,
//! every decided admission request (a retry gets the same answer) and the
//! tenant of every ended attempt (what comes after an end is rejected).
//! These grow with the ledger, so they are read by borrowed names, and
//! they stay out of the copy an event is tried on.

use std::collections::BTreeMap;

use gpuledger_schemas::billing::Facts;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::by_attempt::{AttemptKey, ByAttempt};
use super::decided::Decided;

/// The parts of the state that grow with the ledger, or change only once
/// an event is known to apply. Each is changed only at the end of a
/// successful apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Records {
    /// Billing facts, for budgets: every price book, and the month's
    /// segments, windows, usage, inventory and health.
    pub(crate) billing: Facts,
    /// Decided admission requests by pool and request_id.
    pub(crate) decided: Decided,
    /// Ended attempts by pool and attempt: their tenant.
    pub(crate) ended: Ended,
}

/// Ended attempts' tenants, by pool, then attempt. A snapshot stores a list
/// of ((pool, job, attempt), tenant) pairs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ended(BTreeMap<String, ByAttempt<String>>);

impl Ended {
    /// The tenant of `key` in `pool`, if that attempt ended.
    pub(crate) fn get(&self, pool: &str, key: AttemptKey<'_>) -> Option<&String> {
        self.0.get(pool)?.get(key)
    }

    pub(crate) fn insert(&mut self, pool: &str, key: AttemptKey<'_>, tenant: String) {
        let attempts = match self.0.get_mut(pool) {
            Some(attempts) => attempts,
            None => self.0.entry(pool.to_owned()).or_default(),
        };
        attempts.insert(key, tenant);
    }
}

impl Serialize for Ended {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().flat_map(|(pool, attempts)| {
            attempts
                .sorted()
                .into_iter()
                .map(move |((job, attempt), tenant)| ((pool, job, attempt), tenant))
        }))
    }
}

impl<'de> Deserialize<'de> for Ended {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut ended = Ended::default();
        for ((pool, job, attempt), tenant) in
            Vec::<((String, String, i32), String)>::deserialize(d)?
        {
            ended.insert(&pool, (&job, attempt), tenant);
        }
        Ok(ended)
    }
}
