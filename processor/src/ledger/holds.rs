//! A pool's live holds, with what admission and the timers ask of them
//! kept up to date as they change: Σ GE per tenant and kind, Σ GE of all
//! holds and of burst holds, and the unstarted holds in expiry order. An
//! event then costs the logarithm of the live state, not a scan of it.
//!
//! Only the holds themselves are stored in a snapshot; the sums and the
//! expiry order are rebuilt when it is read.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::HoldKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::by_attempt::{AttemptKey, ByAttempt};
use super::{Ge, Hold};

/// One tenant's Σ GE of holds, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
struct KindSums {
    reserved: Ge,
    quota: Ge,
    burst: Ge,
}

impl KindSums {
    fn of(&mut self, kind: HoldKind) -> &mut Ge {
        match kind {
            HoldKind::Reserved => &mut self.reserved,
            HoldKind::Quota => &mut self.quota,
            HoldKind::Burst => &mut self.burst,
        }
    }

    fn is_zero(&self) -> bool {
        [&self.reserved, &self.quota, &self.burst]
            .into_iter()
            .all(|ge| *ge == Ge::zero())
    }
}

/// The live holds of one pool, by attempt.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Holds {
    by_attempt: ByAttempt<Hold>,
    /// Σ GE by tenant and kind; a tenant whose sums are all zero is removed.
    use_by: BTreeMap<String, KindSums>,
    total: Ge,
    burst: Ge,
    /// Holds not yet started, by expiry, then attempt.
    expiries: BTreeMap<Timestamp, Due>,
}

impl Holds {
    pub(crate) fn get(&self, key: AttemptKey<'_>) -> Option<&Hold> {
        self.by_attempt.get(key)
    }

    pub(crate) fn contains(&self, key: AttemptKey<'_>) -> bool {
        self.by_attempt.contains(key)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Hold> {
        self.by_attempt.values()
    }

    /// Adds a hold (replacing any for the same attempt).
    pub(crate) fn insert(&mut self, key: AttemptKey<'_>, hold: Hold) {
        self.remove(key);
        self.insert_new(key, hold);
    }

    /// Adds a hold for an attempt that holds none.
    pub(crate) fn insert_new(&mut self, key: AttemptKey<'_>, hold: Hold) {
        debug_assert!(!self.contains(key), "the attempt holds one already");
        self.count(&hold, true);
        let expires_at = hold.expires_at;
        let (_, job) = self.by_attempt.insert_shared(key, hold);
        if let Some(at) = expires_at {
            self.expiries.entry(at).or_default().insert(job, key.1);
        }
    }

    /// Releases a hold.
    pub(crate) fn remove(&mut self, key: AttemptKey<'_>) -> Option<Hold> {
        let hold = self.by_attempt.remove(key)?;
        self.count(&hold, false);
        if let Some(at) = hold.expires_at {
            forget_expiry(&mut self.expiries, at, key);
        }
        Some(hold)
    }

    /// The attempt started: its hold no longer expires. Returns the hold.
    pub(crate) fn start(&mut self, key: AttemptKey<'_>) -> Option<&Hold> {
        let hold = self.by_attempt.get_mut(key)?;
        if let Some(at) = hold.expires_at.take() {
            forget_expiry(&mut self.expiries, at, key);
        }
        Some(hold)
    }

    /// Moves a hold to another kind.
    pub(crate) fn reclassify(&mut self, key: AttemptKey<'_>, kind: HoldKind) {
        let Some(mut hold) = self.by_attempt.get(key).cloned() else {
            return;
        };
        self.count(&hold, false);
        hold.kind = kind;
        self.count(&hold, true);
        self.by_attempt.insert(key, hold);
    }

    /// Σ GE of `tenant`'s holds of `kind`.
    pub(crate) fn use_of(&self, tenant: &str, kind: HoldKind) -> Ge {
        self.use_by
            .get(tenant)
            .map_or_else(Ge::zero, |sums| match kind {
                HoldKind::Reserved => sums.reserved.clone(),
                HoldKind::Quota => sums.quota.clone(),
                HoldKind::Burst => sums.burst.clone(),
            })
    }

    /// Σ GE of every hold.
    pub(crate) fn total(&self) -> &Ge {
        &self.total
    }

    /// Σ GE of every tenant's burst holds.
    pub(crate) fn burst_total(&self) -> &Ge {
        &self.burst
    }

    /// When the first unstarted hold expires, if any does.
    pub(crate) fn next_expiry_at(&self) -> Option<Timestamp> {
        self.expiries.first_key_value().map(|(at, _)| *at)
    }

    /// The unstarted hold that expires first, if any.
    pub(crate) fn next_expiry(&self) -> Option<(Timestamp, AttemptKey<'_>)> {
        let (at, due) = self.expiries.first_key_value()?;
        due.first().map(|key| (*at, key))
    }

    /// `tenant`'s holds of `kind`, oldest admission first.
    pub(crate) fn by_age(&self, tenant: &str, kind: HoldKind) -> Vec<((String, i32), Ge)> {
        let mut holds: Vec<(AttemptKey<'_>, &Hold)> = self
            .by_attempt
            .iter()
            .filter(|(_, h)| *h.tenant == *tenant && h.kind == kind)
            .collect();
        holds.sort_by_key(|(_, h)| h.admitted_seq);
        holds
            .into_iter()
            .map(|((job, attempt), h)| ((job.to_owned(), attempt), h.ge.clone()))
            .collect()
    }

    /// Adds `hold` to the sums, or takes it out.
    fn count(&mut self, hold: &Hold, add: bool) {
        let change = |sum: &mut Ge| {
            let before = std::mem::take(sum);
            *sum = if add {
                before + hold.ge.clone()
            } else {
                before - hold.ge.clone()
            };
        };
        change(&mut self.total);
        if hold.kind == HoldKind::Burst {
            change(&mut self.burst);
        }
        let sums = match self.use_by.get_mut(&*hold.tenant) {
            Some(sums) => sums,
            None => self.use_by.entry(hold.tenant.to_string()).or_default(),
        };
        change(sums.of(hold.kind));
        if sums.is_zero() {
            self.use_by.remove(&*hold.tenant);
        }
    }
}

/// The attempts whose holds expire at one instant, in (job, attempt)
/// order: nearly always one. The job ids are the holds' own.
#[derive(Debug, Clone, Default, PartialEq)]
struct Due(Vec<(Arc<str>, i32)>);

impl Due {
    fn find(&self, (job, attempt): AttemptKey<'_>) -> Result<usize, usize> {
        self.0
            .binary_search_by(|(j, a)| (&**j, *a).cmp(&(job, attempt)))
    }

    fn insert(&mut self, job: Arc<str>, attempt: i32) {
        if let Err(at) = self.find((&job, attempt)) {
            self.0.insert(at, (job, attempt));
        }
    }

    fn remove(&mut self, key: AttemptKey<'_>) {
        if let Ok(at) = self.find(key) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn first(&self) -> Option<AttemptKey<'_>> {
        self.0.first().map(|(job, attempt)| (&**job, *attempt))
    }
}

/// Takes `key` out of the holds expiring at `at`.
fn forget_expiry(expiries: &mut BTreeMap<Timestamp, Due>, at: Timestamp, key: AttemptKey<'_>) {
    if let Some(due) = expiries.get_mut(&at) {
        due.remove(key);
        if due.is_empty() {
            expiries.remove(&at);
        }
    }
}

/// Stored as a list of (attempt, hold) pairs, as before the sums existed.
impl Serialize for Holds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.by_attempt.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Holds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let by_attempt = ByAttempt::<Hold>::deserialize(d)?;
        let mut holds = Holds::default();
        for (key, hold) in by_attempt.iter() {
            holds.insert(key, hold.clone());
        }
        Ok(holds)
    }
}
