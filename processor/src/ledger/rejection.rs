//! Why the ledger rejects an event (DESIGN §4): the event contradicts the
//! state, so nothing changes and it goes to the DLQ with this reason. A
//! denial (an admission over budget, a reservation that does not fit) is
//! a decision, not a rejection.

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::JobState;
use gpuledger_schemas::pricing::PricingError;

/// One attempt of one job, as a rejection names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptName {
    pub job_id: String,
    pub attempt: i32,
}

impl AttemptName {
    pub(crate) fn of((job_id, attempt): (&str, i32)) -> Self {
        Self {
            job_id: job_id.to_owned(),
            attempt,
        }
    }
}

impl std::fmt::Display for AttemptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {:?} attempt {}", self.job_id, self.attempt)
    }
}

/// Why an event was rejected. Its text is the DLQ reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The event breaks a rule of the contract that needs no state.
    #[error(transparent)]
    Invalid(#[from] gpuledger_schemas::Error),

    /// A telemetry event, or a decision, on the ledger topic.
    #[error("{event_type} is not a ledger event")]
    NotLedgerEvent { event_type: &'static str },

    /// An `event_time` further ahead of the record's append time than the
    /// processor allows.
    #[error(
        "event_time {at} is more than {max_ahead_s} s after the record's append time {appended} (--ledger-max-ahead-s)"
    )]
    TooFarAhead {
        at: Timestamp,
        max_ahead_s: u64,
        appended: Timestamp,
    },

    #[error("unknown pool {pool:?}: a pool exists once a NodeInventory names it")]
    UnknownPool { pool: String },

    /// A node of another GPU model than the pool's.
    #[error(
        "pool {pool:?} holds {model:?}; device {device} of node {node} is {found:?} (a pool holds one GPU model)"
    )]
    MixedModels {
        pool: String,
        model: String,
        device: String,
        node: String,
        found: String,
    },

    /// A price book that contradicts one in force.
    #[error(transparent)]
    PriceBook(#[from] PricingError),

    /// A retry of an admission request that asks something else.
    #[error("admission request {request_id:?} was already decided with other content ({seen})")]
    AdmissionChanged { request_id: String, seen: String },

    #[error("{attempt} already holds an admission; a new one needs a new attempt")]
    AlreadyAdmitted { attempt: AttemptName },

    /// The event's tenant is not the attempt's.
    #[error("tenant {tenant:?} differs from {attempt}'s tenant {known:?}")]
    TenantMismatch {
        tenant: String,
        attempt: AttemptName,
        known: String,
    },

    /// The event's tenant is not the one the attempt was admitted for.
    #[error("tenant {tenant:?} differs from {attempt}'s admission for {admitted:?}")]
    AdmissionTenantMismatch {
        tenant: String,
        attempt: AttemptName,
        admitted: String,
    },

    #[error("{attempt} already ended; {state} comes after its terminal event")]
    AfterEnd {
        attempt: AttemptName,
        state: JobState,
    },

    #[error("device {device:?} of {attempt} is not in pool {pool:?}'s inventory")]
    UnknownDevice {
        device: String,
        attempt: AttemptName,
        pool: String,
    },

    /// Unadmitted use the ledger cannot size.
    #[error(
        "{attempt} started without an admission and names neither known devices nor requested_slices"
    )]
    StartUnsized { attempt: AttemptName },

    #[error("{attempt} never started, so it cannot be {state}")]
    NeverStarted {
        attempt: AttemptName,
        state: JobState,
    },

    #[error("{attempt} is {state} at {at}, before its start at {started}")]
    EndBeforeStart {
        attempt: AttemptName,
        state: JobState,
        at: Timestamp,
        started: Timestamp,
    },

    /// A repeated reservation request that asks something else.
    #[error("reservation {reservation_id:?} was already requested with other content")]
    ReservationChanged { reservation_id: String },

    #[error("unknown reservation {reservation_id:?} in pool {pool:?}")]
    UnknownReservation {
        reservation_id: String,
        pool: String,
    },

    #[error("reservation {reservation_id:?} belongs to {owner:?}, not {tenant:?}")]
    NotYourReservation {
        reservation_id: String,
        owner: String,
        tenant: String,
    },

    #[error("reservation {reservation_id:?} was not confirmed, so there is nothing to cancel")]
    ReservationNotConfirmed { reservation_id: String },

    #[error("reservation {reservation_id:?} is already over")]
    ReservationOver { reservation_id: String },
}
