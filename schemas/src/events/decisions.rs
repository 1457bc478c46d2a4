//! Decisions (topic `gpuledger.decisions`, keyed by tenant), produced by the
//! processor. Each names the ledger partition and offset, and the event,
//! that caused it.

use crate::events::ledger::Enforcement;
use crate::exact::{Decimal, Rational};
use crate::time::Timestamp;
use gpuledger_collections::Text;

symbols! {
    /// Admit or deny.
    pub enum AdmissionOutcome { Admit = "admit", Deny = "deny" }
}

symbols! {
    /// The kind of a hold, which sets its rate.
    pub enum HoldKind { Reserved = "reserved", Quota = "quota", Burst = "burst" }
}

symbols! {
    /// What happened to a reservation.
    pub enum ReservationOutcome { Confirmed = "confirmed", Rejected = "rejected", Cancelled = "cancelled" }
}

symbols! {
    /// Which budget an alert is about.
    pub enum BudgetKind { Money = "money", GpuHours = "gpu_hours" }
}

record! {
    /// The answer to an `AdmissionRequest`.
    pub struct AdmissionDecision {
        pub pool: Text,
        pub request_id: Text,
        pub job_id: Text,
        pub attempt: i32,
        pub tenant: Text,
        pub slices: i32,
        pub max_slices: i32,
        pub decision: AdmissionOutcome,
        #[serde(default)]
        pub kind: Option<HoldKind>,
        pub reason: Text,
        pub entitled_ge: Rational,
        pub used_ge: Rational,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// The answer to a `ReservationRequest`, or a cancellation.
    pub struct ReservationDecision {
        pub pool: Text,
        pub reservation_id: String,
        pub tenant: Text,
        pub slices: i32,
        pub max_slices: i32,
        pub start: Timestamp,
        pub end: Timestamp,
        pub decision: ReservationOutcome,
        pub reason: Text,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// On-demand capacity asked for a shortfall.
    pub struct BurstTriggered {
        pub pool: Text,
        pub tenant: Text,
        #[serde(default)]
        pub job_id: Option<Text>,
        #[serde(default)]
        pub attempt: Option<i32>,
        pub slices: i32,
        pub max_slices: i32,
        /// `burst`, or the entitlement kind when our hardware fell short.
        pub billed_as: HoldKind,
        #[serde(default)]
        pub on_demand_rate: Option<Decimal>,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// A running hold changed kind at `at`.
    pub struct Reclassified {
        pub pool: Text,
        pub tenant: Text,
        pub job_id: Text,
        pub attempt: i32,
        pub from_kind: HoldKind,
        pub to_kind: HoldKind,
        pub at: Timestamp,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// Use beyond what the tenant is entitled to.
    pub struct QuotaViolation {
        pub pool: Text,
        pub tenant: Text,
        #[serde(default)]
        pub job_id: Option<Text>,
        #[serde(default)]
        pub attempt: Option<i32>,
        pub observed_ge: Rational,
        pub entitled_ge: Rational,
        pub action: Enforcement,
        pub reason: Text,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// Month-to-date spend crossed 50, 80 or 100 % of a budget.
    pub struct BudgetAlert {
        pub pool: Text,
        pub tenant: Text,
        pub budget_kind: BudgetKind,
        pub threshold_pct: i32,
        pub spend: Decimal,
        pub budget: Decimal,
        /// `YYYY-MM`.
        pub month: String,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}

record! {
    /// GPU use that no job accounts for.
    pub struct UnmeteredUsage {
        pub pool: Text,
        pub node: String,
        pub device_uuid: String,
        pub pids: Vec<i64>,
        #[serde(default)]
        pub tenant: Option<Text>,
        pub ledger_partition: i32,
        pub ledger_offset: i64,
        pub cause_event_id: Text,
    }
}
