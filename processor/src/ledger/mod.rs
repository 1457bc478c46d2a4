//! The ledger state machine (DESIGN §4): a deterministic fold over one
//! ledger partition. It takes an event and its position and returns the
//! decisions it causes, or why the event was rejected.
//!
//! Pure: no I/O, no clock, no Kafka. Time is the largest `event_time` seen
//! in the partition; timers due up to that time fire, in time order, before
//! the event that moved it. Hash maps use a fixed hash (FxHash, no random
//! seed) and where order shows in a decision the map is ordered, so the
//! same events always give byte-identical decisions.

mod admission;
mod budgets;
mod by_attempt;
mod by_text;
mod capacity;
mod decide;
mod decided;
mod few;
mod ge;
mod holds;
mod jobs;
mod policies;
mod pools;
mod records;
mod reservations;
mod segments;
mod text_ids;
mod timers;
mod views;
mod watches;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_billing;
#[cfg(test)]
mod tests_support;

use std::collections::BTreeSet;
use std::sync::Arc;

use gpuledger_schemas::billing::{Facts, Period, Segment, UseKind};
use gpuledger_schemas::events::HoldKind;
use gpuledger_schemas::{Event, EventBody, Text, Timestamp};
use serde::{Deserialize, Serialize};

use gpuledger_schemas::by_name::same_text;

pub use ge::Ge;
pub use reservations::ReservationLimits;
pub use views::{TenantInPool, Window};

use capacity::PoolInventory;
use decide::Cause;
use holds::Live;
use policies::Policies;
use records::Records;

/// Where an event sits in the ledger: its partition and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
}

/// What applying one event did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Applied; these decisions follow from it (timers first, in time order).
    Applied {
        /// Shared: the ledger keeps admission decisions to answer retries.
        decisions: Produced<Arc<Event>>,
        warnings: Vec<String>,
        /// Billing segment rows for `allocations`: opened (no `end`) or
        /// closed.
        segments: Produced<Arc<Segment>>,
    },
    /// Its `event_id` was applied before; nothing changes.
    Duplicate,
    /// It contradicts the state; nothing changes, not even time. It goes to
    /// the DLQ with this reason.
    Rejected { reason: String },
}

/// What one applied event produced of one sort, in order: nearly always
/// nothing, one or two, kept in place rather than allocated per event.
pub type Produced<T> = smallvec::SmallVec<[T; 2]>;

/// What an applied event produced: decisions, warnings, billing segments.
type AppliedParts = (Produced<Arc<Event>>, Vec<String>, Produced<Arc<Segment>>);

/// How long an admission holds its GE if the attempt never starts.
pub const DEFAULT_HOLD_TTL_MICROS: i64 = 15 * 60 * 1_000_000;

/// Settings of the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerConfig {
    /// Admission hold lifetime before the attempt starts, microseconds.
    pub hold_ttl_micros: i64,
    /// How long, how far ahead and how many reservations a tenant may
    /// ask for (a snapshot from before they were set has the defaults).
    #[serde(default)]
    pub reservations: ReservationLimits,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            hold_ttl_micros: DEFAULT_HOLD_TTL_MICROS,
            reservations: ReservationLimits::default(),
        }
    }
}

/// An admission's hold on GE, from the decision until the attempt ends
/// (or expires unstarted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub(crate) request_id: Text,
    /// Shared with the attempt, once it starts.
    pub(crate) tenant: Arc<str>,
    pub(crate) ge: Ge,
    pub(crate) kind: HoldKind,
    /// Admission order, for "oldest admission first".
    pub(crate) admitted_seq: u64,
    pub(crate) expires_at: Option<Timestamp>,
    /// Whether its attempt had ended when it was admitted (DESIGN §4 lets
    /// an admission come after the end; the attempt then cannot start).
    /// While the hold lasts, the attempt cannot end: so its `started`
    /// needs no lookup among the ended attempts to know. Not stored: a
    /// snapshot read back works it out again from those attempts.
    #[serde(skip)]
    pub(crate) after_end: bool,
}

/// Where an attempt is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum AttemptPhase {
    Submitted,
    Running,
    Ended,
}

/// One attempt of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Attempt {
    /// Shared with the attempt's billing segments.
    pub(crate) tenant: Arc<str>,
    pub(crate) phase: AttemptPhase,
    pub(crate) started_at: Option<Timestamp>,
    /// Sorted, each once ([`segments::device_list`]); shared with the
    /// attempt's billing segments.
    pub(crate) devices: Arc<[Arc<str>]>,
    /// GE of unadmitted use (an admitted attempt's GE is its hold's).
    pub(crate) unadmitted_ge: Option<Ge>,
    /// The billing segment running now, while the attempt runs.
    #[serde(default)]
    pub(crate) segment: Option<OpenSegment>,
}

/// A running attempt's current billing segment: since when, at which kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OpenSegment {
    pub(crate) start: Timestamp,
    pub(crate) kind: UseKind,
    pub(crate) ge: Ge,
}

impl Attempt {
    /// A new attempt, not yet started.
    pub(crate) fn new(tenant: Arc<str>) -> Self {
        Self {
            tenant,
            phase: AttemptPhase::Submitted,
            started_at: None,
            devices: Arc::new([]),
            unadmitted_ge: None,
            segment: None,
        }
    }
}

/// A reservation as the ledger knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reservation {
    pub(crate) tenant: String,
    pub(crate) slices: i32,
    pub(crate) max_slices: i32,
    pub(crate) ge: Ge,
    pub(crate) start: Timestamp,
    pub(crate) end: Timestamp,
    pub(crate) confirmed: bool,
    /// Set when cancelled: the window ends here.
    pub(crate) cancelled_at: Option<Timestamp>,
    /// Whether the window's start has been processed.
    pub(crate) opened: bool,
    /// Whether the window's end (or cancel) has been processed.
    pub(crate) closed: bool,
}

impl Reservation {
    /// When the window really ends: its end, or its cancel if earlier.
    pub(crate) fn effective_end(&self) -> Timestamp {
        self.cancelled_at.map_or(self.end, |c| c.min(self.end))
    }

    /// Confirmed and its window contains `at` (start ≤ at < end).
    pub(crate) fn active_at(&self, at: Timestamp) -> bool {
        self.confirmed && self.start <= at && at < self.effective_end()
    }
}

/// The state of one pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pool {
    /// The pool's name (its key among the ledger's pools), shared with its
    /// billing segments; not stored in a snapshot.
    #[serde(skip)]
    pub(crate) name: Arc<str>,
    pub(crate) inventory: PoolInventory,
    pub(crate) policies: Policies,
    pub(crate) reservations: reservations::Reservations,
    /// Live holds and attempts not yet ended, by (job_id, attempt); in a
    /// snapshot, the fields `holds` and `attempts`.
    #[serde(flatten)]
    pub(crate) live: Live,
}

/// The state of one ledger partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    config: LedgerConfig,
    now: Option<Timestamp>,
    pools: pools::Pools,
    next_admission_seq: u64,
    /// Every `event_id` applied (kept out of the copy an event is tried on).
    applied: AppliedIds,
    #[serde(default)]
    pub(crate) records: Box<Records>,
    /// Empty records left in `records`' place while an event is applied.
    #[serde(skip)]
    spare: records::Spare,
    /// Budget alerts given: (pool, tenant, month, budget kind, threshold).
    #[serde(default)]
    alerted: BTreeSet<(String, String, String, String, i32)>,
    /// Until when each budgeted tenant's spend stays below its next line
    /// (see `budgets`).
    #[serde(default)]
    budget_watch: watches::Watches,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(config: LedgerConfig) -> Self {
        Self {
            config,
            now: None,
            pools: pools::Pools::default(),
            next_admission_seq: 0,
            applied: AppliedIds::default(),
            records: Box::default(),
            spare: records::Spare::default(),
            alerted: BTreeSet::new(),
            budget_watch: watches::Watches::default(),
        }
    }

    /// Makes room for `events` more events, for a caller that knows how
    /// many it will apply (a file, a topic's end offsets): the table of
    /// event ids applied, the largest the ledger keeps, is then sized once
    /// instead of growing, which moves every id kept each time. Changes
    /// nothing a snapshot or a decision shows.
    pub fn reserve(&mut self, events: usize) {
        self.applied.0.reserve(events);
    }

    /// The state machine's time: the largest `event_time` applied.
    pub fn now(&self) -> Option<Timestamp> {
        self.now
    }

    /// The whole state as JSON, to be restored by [`Ledger::from_snapshot`].
    pub fn to_snapshot(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|e| unreachable!("the ledger state always serializes: {e}"))
    }

    /// Restores a state written by [`Ledger::to_snapshot`].
    pub fn from_snapshot(text: &str) -> Result<Ledger, String> {
        let mut ledger: Ledger = serde_json::from_str(text)
            .map_err(|e| format!("ledger snapshot does not read back: {e}"))?;
        let ended = &ledger.records.ended;
        for pool in ledger.pools.values_mut() {
            let name = &pool.name;
            pool.live.note_ended(|key| ended.get(name, key).is_some());
        }
        Ok(ledger)
    }

    /// The pools this partition has seen, by name.
    pub fn pools(&self) -> impl Iterator<Item = &str> {
        self.pools.keys()
    }

    /// Applies one ledger event found at `position`.
    pub fn apply(&mut self, position: Position, event: &Event) -> Outcome {
        let id = &event.envelope.event_id;
        let Some(new_id) = self.applied.absent(id) else {
            return Outcome::Duplicate;
        };
        if let Err(e) = event.validate() {
            return Outcome::Rejected {
                reason: e.to_string(),
            };
        }
        if event.event_type().topic() != gpuledger_schemas::Topic::Ledger {
            return Outcome::Rejected {
                reason: format!("{} is not a ledger event", event.event_type().name()),
            };
        }
        let cause = Cause::new(position, event);
        let at = event.envelope.event_time;
        let now = self.now.map_or(at, |n| n.max(at));
        // The handlers change `records` beside the rest of the state; an
        // empty box stands in for it meanwhile (moving boxes, not records).
        let stand_in = self.spare.take();
        let mut records = std::mem::replace(&mut self.records, stand_in);
        let result = if timers::any_due(self, now) {
            self.apply_on_copy(&cause, event, &mut records)
        } else {
            self.apply_in_place(&cause, event, &mut records)
        };
        let stand_in = std::mem::replace(&mut self.records, records);
        self.spare.put_back(stand_in);
        match result {
            Ok((decisions, warnings, segments)) => {
                self.applied.insert(new_id, id);
                Outcome::Applied {
                    decisions,
                    warnings,
                    segments,
                }
            }
            Err(reason) => Outcome::Rejected { reason },
        }
    }

    /// With no timer due, an event is tried on the state itself: every
    /// handler checks everything before it changes anything, so a rejected
    /// event leaves the state as it found it once time is put back. Unit
    /// tests check that promise on every rejection.
    fn apply_in_place(
        &mut self,
        cause: &Cause<'_>,
        event: &Event,
        records: &mut Records,
    ) -> Result<AppliedParts, String> {
        #[cfg(test)]
        let before = (self.clone(), records.clone());
        let time_before = self.now;
        let result = self.apply_inner(cause, event, records, false);
        if result.is_err() {
            self.now = time_before;
            #[cfg(test)]
            assert!(
                before.0 == *self && before.1 == *records,
                "a rejected event changed the state: {:?}",
                event.event_type()
            );
        }
        result
    }

    /// Timers due fire before the event is tried; should it be rejected,
    /// they must not have fired either, so the event is tried on a copy of
    /// the live state. The large parts (applied ids, records) stay out of
    /// the copy. Timers are rare: a hold expiring, a window opening or
    /// closing.
    fn apply_on_copy(
        &mut self,
        cause: &Cause<'_>,
        event: &Event,
        records: &mut Records,
    ) -> Result<AppliedParts, String> {
        let applied = std::mem::take(&mut self.applied);
        let mut next = self.clone();
        self.applied = applied;
        let parts = next.apply_inner(cause, event, records, true)?;
        next.applied = std::mem::take(&mut self.applied);
        *self = next;
        Ok(parts)
    }

    /// `timers_due`: whether [`timers::any_due`] said yes for this event's
    /// time (asked once, in [`Ledger::apply`]).
    fn apply_inner(
        &mut self,
        cause: &Cause<'_>,
        event: &Event,
        records: &mut Records,
        timers_due: bool,
    ) -> Result<AppliedParts, String> {
        let at = event.envelope.event_time;
        let before = self.now;
        let now = self.now.map_or(at, |n| n.max(at));
        let mut out = decide::Decisions::new(cause);
        // Timers due up to the new `now` fire first, in time order.
        if timers_due {
            timers::fire_due(self, now, &mut out);
        } else {
            out.at(now);
        }
        self.now = Some(now);
        let mut warnings = Vec::new();
        match &event.body {
            EventBody::NodeInventory(e) => match self.pools.get_mut(&e.pool) {
                Some(pool) => pool.inventory.replace_node(e, at)?,
                None => {
                    let mut pool = Pool {
                        name: e.pool.as_str().into(),
                        ..Pool::default()
                    };
                    pool.inventory.replace_node(e, at)?;
                    self.pools.insert(pool);
                }
            },
            EventBody::DeviceHealth(e) => {
                self.pool_mut(&e.pool)?.inventory.set_health(e, at);
            }
            EventBody::MigAssignment(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::TenantPolicy(e) => {
                let pool = pool_in(&mut self.pools, &e.pool)?;
                pool.policies.insert(&e.tenant, e.clone());
                // A budget may have come or gone: look at every tenant.
                self.budget_watch.forget_quiet();
                let nominal = pool.policies.nominal_total().clone();
                let capacity = pool.inventory.capacity();
                if nominal > capacity {
                    warnings.push(format!(
                        "pool {}: nominal quotas add up to {nominal} GE, more than its capacity of {capacity} GE",
                        e.pool
                    ));
                }
            }
            EventBody::PriceBook(e) => {
                // Kept with the billing facts, once the event applies.
                records
                    .billing
                    .books()
                    .check(e)
                    .map_err(|e| e.to_string())?;
            }
            EventBody::UsageRecord(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::UnattributedProcess(e) => {
                self.pool_mut(&e.pool)?;
                out.unmetered(e);
            }
            EventBody::Clock(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::AdmissionRequest(e) => admission::request(self, e, records, &mut out)?,
            EventBody::ReservationRequest(e) => reservations::request(self, e, &mut out)?,
            EventBody::ReservationCancel(e) => reservations::cancel(self, e, &mut out)?,
            EventBody::JobEvent(e) => jobs::apply(self, e, at, records, &mut out)?,
            other => {
                return Err(format!(
                    "{} is not a ledger event",
                    other.event_type().name()
                ));
            }
        }
        // The event applies: only now may the billing facts change.
        self.bill(
            &mut records.billing,
            event,
            before,
            now,
            &mut out,
            &mut warnings,
        );
        let (decisions, segments) = out.finish();
        Ok((decisions, warnings, segments))
    }

    /// Takes the event's billing facts in, forgets last month's at a month
    /// change, and gives the budget alerts now due.
    fn bill(
        &mut self,
        billing: &mut Facts,
        event: &Event,
        before: Option<Timestamp>,
        now: Timestamp,
        out: &mut decide::Decisions<'_>,
        warnings: &mut Vec<String>,
    ) {
        let facts = std::iter::once(event).chain(out.decisions().iter().map(|d| &**d));
        for e in facts {
            if let Err(e) = billing.observe(e) {
                warnings.push(format!("billing facts: event not taken in: {e}"));
            }
        }
        for s in out.segments() {
            billing.segment(Arc::clone(s));
        }
        watches::revise(
            &mut self.budget_watch,
            std::iter::once(event).chain(out.decisions().iter().map(|d| &**d)),
            out.segments(),
            now,
        );
        // A month only changes where a day does.
        let new_month = before
            .filter(|b| b.day() != now.day())
            .map(|b| (Period::containing(b), Period::containing(now)))
            .and_then(|(was, is)| (was != is).then_some(is));
        if let Some(month) = new_month {
            billing.forget_before(month.start());
            let current = month.to_string();
            self.alerted.retain(|(_, _, m, _, _)| *m == current);
            self.budget_watch.clear();
        }
        budgets::alerts(self, billing, now, out);
    }

    pub(crate) fn pool_mut(&mut self, name: &str) -> Result<&mut Pool, String> {
        pool_in(&mut self.pools, name)
    }

    pub(crate) fn current(&self) -> Timestamp {
        self.now.unwrap_or(Timestamp::from_micros(0))
    }

    pub(crate) fn take_admission_seq(&mut self) -> u64 {
        self.next_admission_seq += 1;
        self.next_admission_seq
    }
}

/// The pool named `name` among `pools`, or why there is none.
pub(crate) fn pool_in<'p>(pools: &'p mut pools::Pools, name: &str) -> Result<&'p mut Pool, String> {
    pools.get_mut(name).ok_or_else(|| {
        format!("unknown pool {name:?}: a pool exists once a NodeInventory names it")
    })
}

impl Pool {
    pub(crate) fn policy_ge(&self, tenant: &str) -> (Ge, Ge) {
        self.policies.ge(tenant)
    }

    /// Σ GE of `tenant`'s holds of `kind`.
    pub(crate) fn use_of(&self, tenant: &str, kind: HoldKind) -> Ge {
        self.live.use_of(tenant, kind)
    }

    /// Σ GE of `tenant`'s confirmed reservations active at `at`.
    pub(crate) fn active_reserved(&self, tenant: &str, at: Timestamp) -> Ge {
        self.reservations
            .values()
            .filter(|r| same_text(&r.tenant, tenant) && r.active_at(at))
            .map(|r| r.ge.clone())
            .sum()
    }

    /// Capacity − Σ nominal.
    pub(crate) fn spare(&self) -> Ge {
        self.inventory.capacity() - self.policies.nominal_total().clone()
    }
}

/// Every `event_id` applied. Asked once per event, so hashed; a snapshot
/// stores the ids sorted, so the same state always writes the same text.
#[derive(Debug, Clone, Default)]
struct AppliedIds(text_ids::TextIds);

impl AppliedIds {
    fn contains(&self, id: &str) -> bool {
        self.0.find(id).is_some()
    }

    /// Where `id` goes, if it was not applied yet (hashed once for both).
    fn absent(&self, id: &str) -> Option<text_ids::Absent> {
        self.0.find_or_absent(id).err()
    }

    /// Adds `id`, found absent and not added since.
    fn insert(&mut self, absent: text_ids::Absent, id: &str) {
        self.0.insert_absent(absent, id);
    }
}

impl PartialEq for AppliedIds {
    /// The same ids, in whatever order they were applied.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|(_, id)| other.contains(id))
    }
}

impl Serialize for AppliedIds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut ids: Vec<&str> = self.0.iter().map(|(_, id)| id).collect();
        ids.sort_unstable();
        s.collect_seq(ids)
    }
}

impl<'de> Deserialize<'de> for AppliedIds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut ids = text_ids::TextIds::default();
        for id in Vec::<String>::deserialize(d)? {
            ids.intern(&id);
        }
        Ok(Self(ids))
    }
}
