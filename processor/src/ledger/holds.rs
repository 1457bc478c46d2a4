//! A pool's live holds, with what admission and the timers ask of them
//! kept up to date as they change: Σ GE per tenant and kind, Σ GE of all
//! holds and of burst holds, and the unstarted holds in expiry order. An
//! event then costs the logarithm of the live state, not a scan of it.
//!
//! Only the holds themselves are stored in a snapshot; the sums and the
//! expiry order are rebuilt when it is read.

use std::collections::{BTreeMap, BTreeSet};

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::HoldKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Ge, Hold};

/// Which attempt a hold is for: (job_id, attempt).
pub(crate) type AttemptKey = (String, i32);

/// The live holds of one pool, by attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Holds {
    by_attempt: BTreeMap<AttemptKey, Hold>,
    /// Σ GE by (tenant, kind); an entry that reaches zero is removed.
    use_by: BTreeMap<(String, HoldKind), Ge>,
    total: Ge,
    burst: Ge,
    /// Holds not yet started, by (expiry, attempt).
    expiries: BTreeSet<(Timestamp, AttemptKey)>,
}

impl Holds {
    pub(crate) fn get(&self, key: &AttemptKey) -> Option<&Hold> {
        self.by_attempt.get(key)
    }

    pub(crate) fn contains(&self, key: &AttemptKey) -> bool {
        self.by_attempt.contains_key(key)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Hold> {
        self.by_attempt.values()
    }

    /// Adds a hold (replacing any for the same attempt).
    pub(crate) fn insert(&mut self, key: AttemptKey, hold: Hold) {
        self.remove(&key);
        self.count(&hold, true);
        if let Some(at) = hold.expires_at {
            self.expiries.insert((at, key.clone()));
        }
        self.by_attempt.insert(key, hold);
    }

    /// Releases a hold.
    pub(crate) fn remove(&mut self, key: &AttemptKey) -> Option<Hold> {
        let hold = self.by_attempt.remove(key)?;
        self.count(&hold, false);
        if let Some(at) = hold.expires_at {
            self.expiries.remove(&(at, key.clone()));
        }
        Some(hold)
    }

    /// The attempt started: its hold no longer expires. Returns the hold.
    pub(crate) fn start(&mut self, key: &AttemptKey) -> Option<&Hold> {
        let hold = self.by_attempt.get_mut(key)?;
        if let Some(at) = hold.expires_at.take() {
            self.expiries.remove(&(at, key.clone()));
        }
        Some(hold)
    }

    /// Moves a hold to another kind.
    pub(crate) fn reclassify(&mut self, key: &AttemptKey, kind: HoldKind) {
        let Some(mut hold) = self.by_attempt.get(key).cloned() else {
            return;
        };
        self.count(&hold, false);
        hold.kind = kind;
        self.count(&hold, true);
        self.by_attempt.insert(key.clone(), hold);
    }

    /// Σ GE of `tenant`'s holds of `kind`.
    pub(crate) fn use_of(&self, tenant: &str, kind: HoldKind) -> Ge {
        self.use_by
            .get(&(tenant.to_owned(), kind))
            .cloned()
            .unwrap_or_else(Ge::zero)
    }

    /// Σ GE of every hold.
    pub(crate) fn total(&self) -> &Ge {
        &self.total
    }

    /// Σ GE of every tenant's burst holds.
    pub(crate) fn burst_total(&self) -> &Ge {
        &self.burst
    }

    /// The unstarted hold that expires first, if any.
    pub(crate) fn next_expiry(&self) -> Option<(Timestamp, &AttemptKey)> {
        self.expiries.first().map(|(at, key)| (*at, key))
    }

    /// `tenant`'s holds of `kind`, oldest admission first.
    pub(crate) fn by_age(&self, tenant: &str, kind: HoldKind) -> Vec<(AttemptKey, Ge)> {
        let mut holds: Vec<(&AttemptKey, &Hold)> = self
            .by_attempt
            .iter()
            .filter(|(_, h)| h.tenant == tenant && h.kind == kind)
            .collect();
        holds.sort_by_key(|(_, h)| h.admitted_seq);
        holds
            .into_iter()
            .map(|(k, h)| (k.clone(), h.ge.clone()))
            .collect()
    }

    /// Adds `hold` to the sums, or takes it out.
    fn count(&mut self, hold: &Hold, add: bool) {
        let change = |sum: &Ge| {
            if add {
                sum.clone() + hold.ge.clone()
            } else {
                sum.clone() - hold.ge.clone()
            }
        };
        self.total = change(&self.total);
        if hold.kind == HoldKind::Burst {
            self.burst = change(&self.burst);
        }
        let key = (hold.tenant.clone(), hold.kind);
        let sum = change(self.use_by.get(&key).unwrap_or(&Ge::zero()));
        if sum == Ge::zero() {
            self.use_by.remove(&key);
        } else {
            self.use_by.insert(key, sum);
        }
    }
}

impl FromIterator<(AttemptKey, Hold)> for Holds {
    fn from_iter<I: IntoIterator<Item = (AttemptKey, Hold)>>(iter: I) -> Self {
        let mut holds = Holds::default();
        for (key, hold) in iter {
            holds.insert(key, hold);
        }
        holds
    }
}

/// Stored as a list of (attempt, hold) pairs, as before the sums existed.
impl Serialize for Holds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        super::pairs::serialize(&self.by_attempt, s)
    }
}

impl<'de> Deserialize<'de> for Holds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let by_attempt: BTreeMap<AttemptKey, Hold> = super::pairs::deserialize(d)?;
        Ok(by_attempt.into_iter().collect())
    }
}
