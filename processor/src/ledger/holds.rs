//! A pool's live holds, with what admission and the timers ask of them
//! kept up to date as they change: Σ GE per tenant and kind, Σ GE of all
//! holds and of burst holds, and the unstarted holds in expiry order. An
//! event then costs the logarithm of the live state, not a scan of it.
//!
//! Only the holds themselves are stored in a snapshot; the sums and the
//! expiry order are rebuilt when it is read.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::HoldKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::by_attempt::{AttemptKey, ByAttempt};
use super::few::Few;
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
    expiries: Expiries,
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
            self.expiries.add(at, job, key.1);
        }
    }

    /// Releases a hold.
    pub(crate) fn remove(&mut self, key: AttemptKey<'_>) -> Option<Hold> {
        let hold = self.by_attempt.remove(key)?;
        self.count(&hold, false);
        if let Some(at) = hold.expires_at {
            self.expiries.forget(at, key);
        }
        Some(hold)
    }

    /// The attempt started: its hold no longer expires. Returns the hold.
    pub(crate) fn start(&mut self, key: AttemptKey<'_>) -> Option<&Hold> {
        let hold = self.by_attempt.get_mut(key)?;
        if let Some(at) = hold.expires_at.take() {
            self.expiries.forget(at, key);
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

    /// Σ GE of `tenant`'s holds of each kind: reserved, quota, burst (one
    /// lookup where admission asks for all three).
    pub(crate) fn uses_of(&self, tenant: &str) -> (Ge, Ge, Ge) {
        self.use_by.get(tenant).map_or_else(
            || (Ge::zero(), Ge::zero(), Ge::zero()),
            |sums| {
                (
                    sums.reserved.clone(),
                    sums.quota.clone(),
                    sums.burst.clone(),
                )
            },
        )
    }

    /// Σ GE of `tenant`'s holds of `kind`.
    pub(crate) fn use_of(&self, tenant: &str, kind: HoldKind) -> Ge {
        let (reserved, quota, burst) = self.uses_of(tenant);
        match kind {
            HoldKind::Reserved => reserved,
            HoldKind::Quota => quota,
            HoldKind::Burst => burst,
        }
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
        self.expiries.first().map(|(at, _)| *at)
    }

    /// The unstarted hold that expires first, if any.
    pub(crate) fn next_expiry(&self) -> Option<(Timestamp, AttemptKey<'_>)> {
        let (at, due) = self.expiries.first()?;
        let (job, attempt) = due.as_slice().first()?;
        Some((*at, (&**job, *attempt)))
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
            if add {
                *sum += &hold.ge;
            } else {
                *sum -= &hold.ge;
            }
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
/// order: nearly always one, kept without a list of its own. The job ids
/// are the holds' own.
type Due = Few<(Arc<str>, i32)>;

/// Where `key` is, or would go, in a list in (job, attempt) order.
fn find(all: &[(Arc<str>, i32)], (job, attempt): AttemptKey<'_>) -> Result<usize, usize> {
    all.binary_search_by(|(j, a)| (&**j, *a).cmp(&(job, attempt)))
}

/// The unstarted holds by expiry: instants in time order, each with the
/// attempts whose holds expire then. Holds are admitted as time goes on
/// and live equally long, so a new instant nearly always comes last; and
/// a hold mostly starts soon after it was admitted, near the back. A list
/// in time order, searched from the back first, costs less than a tree.
#[derive(Debug, Clone, Default, PartialEq)]
struct Expiries(VecDeque<(Timestamp, Due)>);

impl Expiries {
    /// Where the instant `at` is, or would go.
    fn place(&self, at: Timestamp) -> Result<usize, usize> {
        match self.0.back() {
            None => Err(0),
            Some((last, _)) if *last < at => Err(self.0.len()),
            Some((last, _)) if *last == at => Ok(self.0.len() - 1),
            Some(_) => self.0.binary_search_by(|(t, _)| t.cmp(&at)),
        }
    }

    /// The first instant, with the attempts whose holds expire then.
    fn first(&self) -> Option<&(Timestamp, Due)> {
        self.0.front()
    }

    /// The hold of (`job`, `attempt`) expires at `at`.
    fn add(&mut self, at: Timestamp, job: Arc<str>, attempt: i32) {
        let i = match self.place(at) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (at, Few::none()));
                i
            }
        };
        let due = &mut self.0[i].1;
        if let Err(place) = find(due.as_slice(), (&job, attempt)) {
            due.insert(place, (job, attempt));
        }
    }

    /// Takes `key` out of the holds expiring at `at`.
    fn forget(&mut self, at: Timestamp, key: AttemptKey<'_>) {
        let Ok(i) = self.place(at) else {
            return;
        };
        let due = &mut self.0[i].1;
        if let Ok(place) = find(due.as_slice(), key) {
            due.remove(place);
        }
        if due.is_empty() {
            self.0.remove(i);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(expires_at: i64) -> Hold {
        Hold {
            request_id: format!("r-{expires_at}").into(),
            tenant: "t".into(),
            ge: Ge::of(1, 7),
            kind: HoldKind::Quota,
            admitted_seq: 1,
            expires_at: Some(Timestamp::from_micros(expires_at)),
        }
    }

    #[test]
    fn holds_expiring_together_come_in_attempt_order_and_leave_one_by_one() {
        let mut holds = Holds::default();
        for (job, attempt) in [("b", 1), ("a", 2), ("c", 1), ("a", 1)] {
            holds.insert_new((job, attempt), hold(10));
        }
        holds.insert_new(("z", 1), hold(5));
        let next = |h: &Holds| {
            h.next_expiry()
                .map(|(at, (j, a))| (at.as_micros(), j.to_owned(), a))
        };
        assert_eq!(next(&holds), Some((5, "z".into(), 1)));
        holds.remove(("z", 1));
        let mut order = Vec::new();
        while let Some((at, job, attempt)) = next(&holds) {
            assert_eq!(at, 10);
            order.push((job.clone(), attempt));
            holds.start((&job, attempt));
        }
        let expected: Vec<(String, i32)> = [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
            .into_iter()
            .map(|(j, a)| (j.to_owned(), a))
            .collect();
        assert_eq!(order, expected);
        assert_eq!(holds.next_expiry_at(), None);
        // Started holds still count: four of 1/7 GE, all quota.
        assert_eq!(holds.uses_of("t"), (Ge::zero(), Ge::of(4, 7), Ge::zero()));
        assert_eq!(holds.use_of("t", HoldKind::Quota), Ge::of(4, 7));
        assert_eq!(holds.uses_of("u"), (Ge::zero(), Ge::zero(), Ge::zero()));
        // Removing one that is not due leaves the others due.
        holds.insert_new(("d", 1), hold(20));
        holds.insert_new(("e", 1), hold(20));
        holds.remove(("e", 1));
        assert_eq!(next(&holds), Some((20, "d".into(), 1)));
        // An instant before the last goes in its place, and leaves it.
        holds.insert_new(("g", 1), hold(30));
        holds.insert_new(("f", 1), hold(15));
        assert_eq!(next(&holds), Some((15, "f".into(), 1)));
        holds.start(("f", 1));
        holds.remove(("d", 1));
        assert_eq!(next(&holds), Some((30, "g".into(), 1)));
        holds.remove(("g", 1));
        assert_eq!(holds.next_expiry_at(), None);
    }
}
