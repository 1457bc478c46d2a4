//! The ledger state machine (DESIGN §4): a deterministic fold over one
//! ledger partition. It takes an event and its position and returns the
//! decisions it causes, or why the event was rejected.
//!
//! The rules, in the order DESIGN §4 gives them: [`admission`],
//! [`reservations`], [`timers`], [`jobs`], [`segments`] (billing segments),
//! [`policies`], [`capacity`] and [`budgets`]; [`fold`] runs one event
//! through them. What they change is the [`State`]; what grows with the
//! ledger is in [`store`].
//!
//! Pure: no I/O, no clock, no logging. Time is the largest `event_time`
//! seen in the partition; timers due up to that time fire, in time order,
//! before the event that moved it. Hash tables use a fixed hash (FxHash,
//! no random seed), and wherever order shows in a decision or a snapshot
//! it is sorted first, so the same events always give byte-identical
//! decisions.

mod admission;
mod budgets;
mod capacity;
mod jobs;
mod policies;
mod reservations;
mod segments;
mod timers;

mod decide;
mod fold;
mod ge;
mod holds;
mod rejection;
mod state;
mod store;
mod views;
mod watches;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_billing;
#[cfg(test)]
mod tests_properties;
#[cfg(test)]
mod tests_support;

use std::sync::Arc;

use gpuledger_collections::text_ids::{Absent, TextIds};
use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::{Event, Timestamp, Topic};
use serde::{Deserialize, Serialize};

pub use ge::Ge;
pub use rejection::{AttemptName, Rejection};
pub use reservations::ReservationLimits;
pub use views::{TenantInPool, Window};

use decide::Cause;
use state::State;
pub(crate) use state::{Attempt, AttemptPhase, Hold, OpenSegment, Pool, Reservation};
use store::Records;

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
    Rejected { reason: Rejection },
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
    /// ask for.
    pub reservations: ReservationLimits,
    /// Whether budgets keep a watch per tenant (see `budgets`): a cache
    /// that spares pricing a tenant's month again while its spend cannot
    /// reach its next line. Off, every budgeted tenant is priced after
    /// every event; the decisions are the same.
    pub budget_watch: bool,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            hold_ttl_micros: DEFAULT_HOLD_TTL_MICROS,
            reservations: ReservationLimits::default(),
            budget_watch: true,
        }
    }
}

/// The state of one ledger partition: what the rules change, what grows
/// with the ledger, and every `event_id` applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    state: State,
    records: Records,
    applied: AppliedIds,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(config: LedgerConfig) -> Self {
        Self {
            state: State::new(config),
            records: Records::default(),
            applied: AppliedIds::default(),
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
        self.state.now
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
        for pool in ledger.state.pools.values_mut() {
            let name = &pool.name;
            pool.live.note_ended(|key| ended.get(name, key).is_some());
        }
        Ok(ledger)
    }

    /// The pools this partition has seen, by name.
    pub fn pools(&self) -> impl Iterator<Item = &str> {
        self.state.pools.keys()
    }

    /// Applies one ledger event found at `position`.
    pub fn apply(&mut self, position: Position, event: &Event) -> Outcome {
        let id = &event.envelope.event_id;
        let Some(new_id) = self.applied.absent(id) else {
            return Outcome::Duplicate;
        };
        match self.try_apply(position, event) {
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

    /// Applies an event not seen before, or says why it is rejected and
    /// leaves the ledger as it was.
    fn try_apply(&mut self, position: Position, event: &Event) -> Result<AppliedParts, Rejection> {
        event.validate()?;
        let event_type = event.event_type();
        if event_type.topic() != Topic::Ledger {
            return Err(Rejection::NotLedgerEvent {
                event_type: event_type.name(),
            });
        }
        let cause = Cause::new(position, event);
        let at = event.envelope.event_time;
        let now = self.state.now.map_or(at, |n| n.max(at));
        if timers::any_due(&self.state, now) {
            // Timers due fire before the event is tried; should it be
            // rejected, they must not have fired either, so the event is
            // tried on a copy of the state. Timers are rare: a hold
            // expiring, a window opening or closing.
            let mut next = self.state.clone();
            let parts = next.apply(&cause, event, &mut self.records, true)?;
            self.state = next;
            Ok(parts)
        } else {
            // Every rule checks before it changes, so the event is tried on
            // the state itself; a rejection only moved time.
            let before = self.state.now;
            let result = self.state.apply(&cause, event, &mut self.records, false);
            if result.is_err() {
                self.state.now = before;
            }
            result
        }
    }
}

/// Every `event_id` applied. Asked once per event, so hashed; a snapshot
/// stores the ids sorted, so the same state always writes the same text.
#[derive(Debug, Clone, Default)]
struct AppliedIds(TextIds);

impl AppliedIds {
    fn contains(&self, id: &str) -> bool {
        self.0.find(id).is_some()
    }

    /// Where `id` goes, if it was not applied yet (hashed once for both).
    fn absent(&self, id: &str) -> Option<Absent> {
        self.0.find_or_absent(id).err()
    }

    /// Adds `id`, found absent and not added since.
    fn insert(&mut self, absent: Absent, id: &str) {
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
        let mut ids = TextIds::default();
        for id in Vec::<String>::deserialize(d)? {
            ids.intern(&id);
        }
        Ok(Self(ids))
    }
}
