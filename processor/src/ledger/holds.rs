//! A pool's live attempts, one record each: the hold admission gave it,
//! while it has one, and the attempt once it was submitted or started. A
//! job event reads and changes both in one lookup of its (job, attempt).
//! Kept up to date beside them, for admission and the timers: Σ GE of
//! holds per tenant and kind, of all holds and of burst holds, and the
//! unstarted holds in expiry order. An event then costs the logarithm of
//! the live state, not a scan of it.
//!
//! A snapshot stores the holds and the attempts as two lists, as it did
//! when they were kept apart; the sums and the expiry order are rebuilt
//! when it is read.

use std::collections::VecDeque;
use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::HoldKind;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Attempt, Ge, Hold};
use gpuledger_collections::by_attempt::{AttemptKey, ByAttempt};
use gpuledger_collections::by_name::ByName;
use gpuledger_collections::few::Few;

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

/// One live attempt: its hold, its attempt, or both; never neither.
#[derive(Debug, Clone, Default, PartialEq)]
struct Record {
    hold: Option<Hold>,
    attempt: Option<Attempt>,
}

impl Record {
    fn is_empty(&self) -> bool {
        self.hold.is_none() && self.attempt.is_none()
    }
}

/// A live attempt as a job event finds it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Found<'a> {
    pub(crate) hold: Option<&'a Hold>,
    pub(crate) attempt: Option<&'a Attempt>,
}

/// The live attempts of one pool: holds and attempts by (job, attempt).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Live {
    by_attempt: ByAttempt<Record>,
    sums: Sums,
    /// Holds not yet started, by expiry, then attempt.
    expiries: Expiries,
}

/// Σ GE of the live holds.
#[derive(Debug, Clone, Default, PartialEq)]
struct Sums {
    /// By tenant and kind; a tenant whose sums are all zero is removed.
    use_by: ByName<KindSums>,
    total: Ge,
    burst: Ge,
}

impl Live {
    /// The hold and the attempt of `key`, in one lookup.
    pub(crate) fn find(&self, key: AttemptKey<'_>) -> Found<'_> {
        self.by_attempt
            .get(key)
            .map_or_else(Found::default, |r| Found {
                hold: r.hold.as_ref(),
                attempt: r.attempt.as_ref(),
            })
    }

    pub(crate) fn get(&self, key: AttemptKey<'_>) -> Option<&Hold> {
        self.by_attempt.get(key)?.hold.as_ref()
    }

    /// Tells each hold whether its attempt had ended, as `ended` says
    /// ([`Hold::after_end`], which a snapshot does not store).
    pub(crate) fn note_ended(&mut self, ended: impl Fn(AttemptKey<'_>) -> bool) {
        for (key, record) in self.by_attempt.iter_mut() {
            if let Some(hold) = &mut record.hold {
                hold.after_end = ended(key);
            }
        }
    }

    pub(crate) fn contains(&self, key: AttemptKey<'_>) -> bool {
        self.get(key).is_some()
    }

    /// Every hold, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Hold> {
        self.by_attempt.values().filter_map(|r| r.hold.as_ref())
    }

    /// Adds a hold (replacing any for the same attempt).
    pub(crate) fn insert(&mut self, key: AttemptKey<'_>, hold: Hold) {
        self.remove(key);
        self.insert_new(key, hold);
    }

    /// Adds a hold for an attempt that holds none.
    pub(crate) fn insert_new(&mut self, key: AttemptKey<'_>, hold: Hold) {
        debug_assert!(!self.contains(key), "the attempt holds one already");
        self.sums.count(&hold, true);
        let expires_at = hold.expires_at;
        let (job, record) = self.by_attempt.get_or_insert_with_job(key, Record::default);
        record.hold = Some(hold);
        if let Some(at) = expires_at {
            let job = Arc::clone(job);
            self.expiries.add(at, job, key.1);
        }
    }

    /// Releases a hold; the attempt, if any, stays.
    pub(crate) fn remove(&mut self, key: AttemptKey<'_>) -> Option<Hold> {
        let hold = self
            .by_attempt
            .change(key, |r| r.hold.take(), Record::is_empty)??;
        released(&mut self.sums, &mut self.expiries, key, &hold);
        Some(hold)
    }

    /// The attempt started: its hold no longer expires. Returns the hold.
    pub(crate) fn start(&mut self, key: AttemptKey<'_>) -> Option<&Hold> {
        let hold = self.by_attempt.get_mut(key)?.hold.as_mut()?;
        if let Some(at) = hold.expires_at.take() {
            self.expiries.forget(at, key);
        }
        Some(hold)
    }

    /// Moves a hold to another kind.
    pub(crate) fn reclassify(&mut self, key: AttemptKey<'_>, kind: HoldKind) {
        let Some(mut hold) = self.get(key).cloned() else {
            return;
        };
        self.sums.count(&hold, false);
        hold.kind = kind;
        self.sums.count(&hold, true);
        if let Some(record) = self.by_attempt.get_mut(key) {
            record.hold = Some(hold);
        }
    }

    /// The attempt of `key`, if it is live.
    pub(crate) fn attempt(&self, key: AttemptKey<'_>) -> Option<&Attempt> {
        self.by_attempt.get(key)?.attempt.as_ref()
    }

    pub(crate) fn attempt_mut(&mut self, key: AttemptKey<'_>) -> Option<&mut Attempt> {
        self.by_attempt.get_mut(key)?.attempt.as_mut()
    }

    /// The attempt of `key` to change, with its job's id as stored.
    pub(crate) fn attempt_mut_with_job(
        &mut self,
        key: AttemptKey<'_>,
    ) -> Option<(&Arc<str>, &mut Attempt)> {
        let (job, record) = self.by_attempt.get_mut_with_job(key)?;
        Some((job, record.attempt.as_mut()?))
    }

    /// The attempt of `key`, made by `make` if it has none, with its job's
    /// id as stored.
    pub(crate) fn attempt_or_insert_with(
        &mut self,
        key: AttemptKey<'_>,
        make: impl FnOnce() -> Attempt,
    ) -> (&Arc<str>, &mut Attempt) {
        let (job, record) = self.by_attempt.get_or_insert_with_job(key, Record::default);
        (job, record.attempt.get_or_insert_with(make))
    }

    /// Takes `key` out of the live state, hold and attempt, in one lookup:
    /// the attempt is over. `with` is given its job's id as stored and the
    /// attempt, if it had one, on their way out.
    pub(crate) fn end<R>(
        &mut self,
        key: AttemptKey<'_>,
        with: impl FnOnce(&Arc<str>, Option<&mut Attempt>) -> R,
    ) -> Option<R> {
        let Live {
            by_attempt,
            sums,
            expiries,
        } = self;
        by_attempt.take_with(key, |job, mut record| {
            if let Some(hold) = &record.hold {
                released(sums, expiries, key, hold);
            }
            with(job, record.attempt.as_mut())
        })
    }

    /// Every live attempt, in no particular order.
    pub(crate) fn attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.by_attempt.values().filter_map(|r| r.attempt.as_ref())
    }

    /// Σ GE of `tenant`'s holds of each kind: reserved, quota, burst (one
    /// lookup where admission asks for all three).
    pub(crate) fn uses_of(&self, tenant: &str) -> (Ge, Ge, Ge) {
        self.sums.use_by.get(tenant).map_or_else(
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
        &self.sums.total
    }

    /// Σ GE of every tenant's burst holds.
    pub(crate) fn burst_total(&self) -> &Ge {
        &self.sums.burst
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
            .filter_map(|(key, r)| Some((key, r.hold.as_ref()?)))
            .filter(|(_, h)| *h.tenant == *tenant && h.kind == kind)
            .collect();
        holds.sort_by_key(|(_, h)| h.admitted_seq);
        holds
            .into_iter()
            .map(|((job, attempt), h)| ((job.to_owned(), attempt), h.ge.clone()))
            .collect()
    }
}

/// Takes `key`'s released `hold` out of the sums and the expiry order.
fn released(sums: &mut Sums, expiries: &mut Expiries, key: AttemptKey<'_>, hold: &Hold) {
    sums.count(hold, false);
    if let Some(at) = hold.expires_at {
        expiries.forget(at, key);
    }
}

impl Sums {
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
        let sums = self
            .use_by
            .get_or_insert_with(&hold.tenant, KindSums::default);
        change(sums.of(hold.kind));
        if sums.is_zero() {
            self.use_by.remove(&hold.tenant);
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

/// Stored as the two lists of ((job, attempt), value) pairs in key order
/// that the holds and the attempts were when kept apart: `holds` and
/// `attempts`, fields of the pool's snapshot.
impl Serialize for Live {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let sorted = self.by_attempt.sorted();
        let holds: Vec<_> = sorted
            .iter()
            .filter_map(|(key, r)| Some((key, r.hold.as_ref()?)))
            .collect();
        let attempts: Vec<_> = sorted
            .iter()
            .filter_map(|(key, r)| Some((key, r.attempt.as_ref()?)))
            .collect();
        let mut form = s.serialize_struct("Live", 2)?;
        form.serialize_field("holds", &holds)?;
        form.serialize_field("attempts", &attempts)?;
        form.end()
    }
}

impl<'de> Deserialize<'de> for Live {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Form {
            holds: ByAttempt<Hold>,
            attempts: ByAttempt<Attempt>,
        }
        let form = Form::deserialize(d)?;
        let mut live = Live::default();
        for (key, hold) in form.holds.iter() {
            live.insert(key, hold.clone());
        }
        // Each attempt once: it joins its hold's record, or makes one.
        for (key, attempt) in form.attempts.iter() {
            live.attempt_or_insert_with(key, || attempt.clone());
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests;
