//! Ledger events (topic `gpuledger.ledger`, keyed by pool): the state
//! machine's input, in total order per pool.

use crate::exact::Decimal;
use crate::time::Timestamp;
use gpuledger_collections::Text;

symbols! {
    /// A device's health.
    pub enum HealthState { Healthy = "healthy", Degraded = "degraded", Failed = "failed" }
}

symbols! {
    /// Whether a MIG device was given to a job or given back.
    pub enum MigAction { Assigned = "assigned", Released = "released" }
}

symbols! {
    /// Where an attempt of a job is in its life.
    pub enum JobState {
        Submitted = "submitted",
        Started = "started",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
        Preempted = "preempted",
    }
}

impl JobState {
    /// `completed`, `failed`, `cancelled` and `preempted` end an attempt.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Preempted
        )
    }
}

symbols! {
    /// What the processor does about use beyond entitlement.
    pub enum Enforcement { Alert = "alert", Deny = "deny", Preempt = "preempt" }
}

symbols! {
    /// How reserved capacity is charged.
    pub enum ReservationCharge {
        /// The whole window, used or not (`reservation_unused` charges the gap).
        Window = "window",
        /// Only what the tenant used.
        Usage = "usage",
    }
}

symbols! {
    /// Who pays for capacity nobody held.
    pub enum IdleDistribution {
        /// The platform.
        Central = "central",
        /// Tenants, in proportion to their allocated GE-hours.
        Proportional = "proportional",
    }
}

symbols! {
    /// Metered usage beyond GPUs.
    pub enum UsageKind {
        StorageGbHours = "storage_gb_hours",
        EgressBytes = "egress_bytes",
        IngressBytes = "ingress_bytes",
    }
}

record! {
    /// One leaf device of a node: a whole GPU, or a MIG instance of one.
    pub struct InventoryDevice {
        pub device_uuid: String,
        /// The whole GPU a MIG instance lives on.
        #[serde(default)]
        pub parent_gpu_uuid: Option<String>,
        pub model: String,
        pub slices: i32,
        pub max_slices: i32,
        pub memory_bytes: i64,
        #[serde(default)]
        pub mig_profile: Option<String>,
    }
}

record! {
    /// The full device set of a node; replaces the previous one for that node.
    pub struct NodeInventory {
        pub pool: String,
        pub node: String,
        pub devices: Vec<InventoryDevice>,
    }
}

record! {
    /// A device's health; failed devices leave capacity and earn tenants a credit.
    pub struct DeviceHealth {
        pub pool: String,
        pub node: String,
        pub device_uuid: String,
        pub state: HealthState,
        #[serde(default)]
        pub xid: Option<i32>,
        pub reason: String,
    }
}

record! {
    /// Which job holds which MIG slice.
    pub struct MigAssignment {
        pub pool: String,
        pub node: String,
        pub device_uuid: String,
        pub parent_gpu_uuid: String,
        pub mig_profile: String,
        pub slices: i32,
        pub max_slices: i32,
        pub action: MigAction,
        #[serde(default)]
        pub job_id: Option<String>,
        #[serde(default)]
        pub tenant: Option<String>,
    }
}

record! {
    /// Job lifecycle of one attempt.
    pub struct JobEvent {
        pub pool: Text,
        pub job_id: Text,
        /// 1, 2, … : a retry is a new attempt of the same job.
        pub attempt: i32,
        pub tenant: Text,
        #[serde(default)]
        pub user: Option<String>,
        #[serde(default)]
        pub node: Option<String>,
        pub state: JobState,
        #[serde(default)]
        pub devices: Option<Vec<String>>,
        #[serde(default)]
        pub requested_slices: Option<i32>,
        #[serde(default)]
        pub requested_max_slices: Option<i32>,
        #[serde(default)]
        pub work_units: Option<Decimal>,
        #[serde(default)]
        pub work_unit_name: Option<String>,
        #[serde(default)]
        pub exit_code: Option<i32>,
        #[serde(default)]
        pub reason: Option<String>,
    }
}

record! {
    /// "May this job start with this much?"
    pub struct AdmissionRequest {
        pub pool: Text,
        pub request_id: Text,
        pub job_id: Text,
        pub attempt: i32,
        pub tenant: Text,
        pub slices: i32,
        pub max_slices: i32,
    }
}

record! {
    /// Reserve `slices/max_slices` GE for [start, end).
    pub struct ReservationRequest {
        pub pool: String,
        pub reservation_id: String,
        pub tenant: String,
        pub slices: i32,
        pub max_slices: i32,
        pub start: Timestamp,
        pub end: Timestamp,
    }
}

record! {
    /// Cancels a reservation; it ends at this event's time.
    pub struct ReservationCancel {
        pub pool: String,
        pub reservation_id: String,
        pub tenant: String,
    }
}

record! {
    /// A tenant's quota in a pool; replaces its previous policy there.
    pub struct TenantPolicy {
        pub pool: String,
        pub tenant: String,
        /// Guaranteed GE.
        pub nominal_ge: Decimal,
        /// GE it may use beyond nominal at on-demand prices.
        pub burst_ge: Decimal,
        #[serde(default)]
        pub monthly_budget: Option<Decimal>,
        #[serde(default)]
        pub monthly_gpu_hours: Option<Decimal>,
        pub enforcement: Enforcement,
    }
}

record! {
    /// Prices per GPU-hour for one GPU model.
    pub struct ModelRate {
        pub model: String,
        pub reserved_per_gpu_hour: Decimal,
        pub quota_per_gpu_hour: Decimal,
        pub on_demand_per_gpu_hour: Decimal,
    }
}

record! {
    /// Effective-dated prices: apply from `effective_from` until the next
    /// version's. With no `pool` the book applies to every pool.
    pub struct PriceBook {
        #[serde(default)]
        pub pool: Option<String>,
        pub version: i64,
        pub effective_from: Timestamp,
        pub currency: String,
        pub rates: Vec<ModelRate>,
        #[serde(default)]
        pub energy_per_kwh: Option<Decimal>,
        pub storage_per_gb_month: Decimal,
        pub egress_per_gb: Decimal,
        pub overhead_pct: Decimal,
        pub reservation_charge: ReservationCharge,
        pub idle_distribution: IdleDistribution,
    }
}

record! {
    /// Metered usage beyond GPUs, from storage and network exporters.
    pub struct UsageRecord {
        pub pool: String,
        pub tenant: String,
        pub kind: UsageKind,
        pub quantity: Decimal,
        pub start: Timestamp,
        pub end: Timestamp,
    }
}

record! {
    /// GPU processes the collector could not tie to a job.
    pub struct UnattributedProcess {
        pub pool: String,
        pub node: String,
        pub device_uuid: String,
        pub pids: Vec<i64>,
        #[serde(default)]
        pub tenant: Option<String>,
    }
}

record! {
    /// Makes time pass in a pool when nothing else happens.
    pub struct Clock {
        pub pool: String,
        /// Equal to `event_time` when present.
        #[serde(default)]
        pub now: Option<Timestamp>,
    }
}
