//! The state of one ledger partition that the rules change (DESIGN §4):
//! its time, its pools with their inventory, policies, reservations, holds
//! and attempts, and the budget alerts given. Small enough to copy when a
//! timer is due; what grows with the ledger is in [`super::store`].

use std::collections::BTreeSet;
use std::sync::Arc;

use gpuledger_schemas::billing::UseKind;
use gpuledger_schemas::events::{BudgetKind, HoldKind};
use gpuledger_schemas::{Text, Timestamp};
use serde::{Deserialize, Serialize};

use gpuledger_collections::by_name::same_text;

use super::capacity::PoolInventory;
use super::holds::Live;
use super::policies::Policies;
use super::store::Pools;
use super::{Ge, LedgerConfig, Rejection, reservations, watches};

/// What the rules change as events apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) config: LedgerConfig,
    /// The largest `event_time` applied.
    pub(crate) now: Option<Timestamp>,
    pub(crate) pools: Pools,
    pub(crate) next_admission_seq: u64,
    /// Budget alerts given this month.
    pub(crate) alerted: BTreeSet<AlertKey>,
    /// Until when each budgeted tenant's spend stays below its next line
    /// (see `budgets`); empty where `config.budget_watch` is off.
    pub(crate) budget_watch: watches::Watches,
}

/// One budget alert: a tenant's budget of one kind in one pool crossed one
/// threshold in one month.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct AlertKey {
    pub(crate) pool: String,
    pub(crate) tenant: String,
    /// The month, as `2026-11`.
    pub(crate) month: String,
    pub(crate) kind: BudgetKind,
    /// Percent of the budget.
    pub(crate) threshold: i32,
}

impl State {
    pub(crate) fn new(config: LedgerConfig) -> Self {
        Self {
            config,
            now: None,
            pools: Pools::default(),
            next_admission_seq: 0,
            alerted: BTreeSet::new(),
            budget_watch: watches::Watches::default(),
        }
    }

    pub(crate) fn pool_mut(&mut self, name: &str) -> Result<&mut Pool, Rejection> {
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
pub(crate) fn pool_in<'p>(pools: &'p mut Pools, name: &str) -> Result<&'p mut Pool, Rejection> {
    pools.get_mut(name).ok_or_else(|| Rejection::UnknownPool {
        pool: name.to_owned(),
    })
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
