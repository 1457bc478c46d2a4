//! What the ledger keeps of its history: the billing facts budgets price,
//! every decided admission request (a retry gets the same answer) and the
//! tenant of every ended attempt (what comes after an end is rejected).
//! These grow with the ledger, so they are read by borrowed names, and
//! they stay out of the copy of the state an event is tried on.

use gpuledger_schemas::billing::Facts;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use rustc_hash::FxHashMap;

use gpuledger_collections::by_attempt::AttemptKey;
use gpuledger_collections::text_ids::{TextId, TextIds};

use super::decided::Decided;
use gpuledger_collections::by_name::ByName;

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

/// Ended attempts' tenants, by pool, then attempt. Attempts only ever
/// end, so each pool's are in flat tables: job ids numbered once, the
/// first attempt of each job to end beside its number, and any later
/// attempt of the same job (a retry) in a hash map. A snapshot stores a
/// list of ((pool, job, attempt), tenant) pairs in key order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ended(ByName<PoolEnded>);

#[derive(Debug, Clone, Default)]
struct PoolEnded {
    jobs: TextIds,
    tenants: TextIds,
    /// By job number: its first attempt to end, and that attempt's tenant.
    first: Vec<(i32, TextId)>,
    /// Every other ended attempt: (job number, attempt) → tenant.
    more: FxHashMap<(TextId, i32), TextId>,
}

impl PoolEnded {
    fn get(&self, (job, attempt): AttemptKey<'_>) -> Option<&str> {
        let n = self.jobs.find(job)?;
        let (first, tenant) = self.first[n as usize];
        let tenant = if first == attempt {
            tenant
        } else {
            *self.more.get(&(n, attempt))?
        };
        Some(self.tenants.get(tenant))
    }

    fn insert(&mut self, (job, attempt): AttemptKey<'_>, tenant: &str) {
        let tenant = self.tenants.intern(tenant);
        let n = self.jobs.intern(job);
        match self.first.get_mut(n as usize) {
            None => self.first.push((attempt, tenant)),
            Some(first) if first.0 == attempt => first.1 = tenant,
            Some(_) => {
                self.more.insert((n, attempt), tenant);
            }
        }
    }

    /// Every ended attempt and its tenant, in (job, attempt) order.
    fn sorted(&self) -> Vec<(AttemptKey<'_>, &str)> {
        let firsts = self
            .first
            .iter()
            .enumerate()
            .map(|(n, &(attempt, tenant))| {
                (
                    (self.jobs.get(n as TextId), attempt),
                    self.tenants.get(tenant),
                )
            });
        let more = self.more.iter().map(|(&(n, attempt), &tenant)| {
            ((self.jobs.get(n), attempt), self.tenants.get(tenant))
        });
        let mut all: Vec<_> = firsts.chain(more).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

impl PartialEq for Ended {
    /// The same attempts ended, with the same tenants.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().all(|(pool, attempts)| {
                other
                    .0
                    .get(pool)
                    .is_some_and(|theirs| attempts.sorted() == theirs.sorted())
            })
    }
}

impl Ended {
    /// The tenant of `key` in `pool`, if that attempt ended.
    pub(crate) fn get(&self, pool: &str, key: AttemptKey<'_>) -> Option<&str> {
        self.0.get(pool)?.get(key)
    }

    pub(crate) fn insert(&mut self, pool: &str, key: AttemptKey<'_>, tenant: &str) {
        let attempts = self.0.get_or_insert_with(pool, PoolEnded::default);
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
            ended.insert(&pool, (&job, attempt), &tenant);
        }
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_attempts_keep_their_tenants_whatever_the_order() {
        let mut a = Ended::default();
        a.insert("p", ("j-1", 1), "t1");
        a.insert("p", ("j-1", 3), "t1");
        a.insert("p", ("j-2", 1), "t2");
        a.insert("q", ("j-1", 2), "t3");
        assert_eq!(a.get("p", ("j-1", 1)), Some("t1"));
        assert_eq!(a.get("p", ("j-1", 3)), Some("t1"));
        assert_eq!(a.get("p", ("j-1", 2)), None);
        assert_eq!(a.get("p", ("j-3", 1)), None);
        assert_eq!(a.get("q", ("j-1", 2)), Some("t3"));
        assert_eq!(a.get("r", ("j-1", 2)), None);

        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(
            text,
            r#"[[["p","j-1",1],"t1"],[["p","j-1",3],"t1"],[["p","j-2",1],"t2"],[["q","j-1",2],"t3"]]"#
        );
        let back: Ended = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);

        let mut b = Ended::default();
        b.insert("q", ("j-1", 2), "t3");
        b.insert("p", ("j-2", 1), "t2");
        b.insert("p", ("j-1", 3), "t1");
        b.insert("p", ("j-1", 1), "t1");
        assert_eq!(a, b);
        b.insert("p", ("j-1", 1), "t2");
        assert_ne!(a, b);
    }
}
