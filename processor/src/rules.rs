//! The ledger's rules a site sets, as flags: every command that folds the
//! ledger takes the same, so a replay decides as the live run did.

use crate::ledger::{LedgerConfig, ReservationLimits};

/// The flags of the ledger's rules.
#[derive(Debug, Clone, clap::Args)]
pub struct LedgerRulesArgs {
    /// How long an admission holds its GE if the attempt never starts (minutes).
    #[arg(long, env = "GPULEDGER_HOLD_TTL_MINUTES", default_value_t = 15)]
    pub hold_ttl_minutes: i64,

    /// The longest reservation window (days).
    #[arg(long, env = "GPULEDGER_RESERVATION_MAX_DAYS", default_value_t = 90)]
    pub reservation_max_days: i64,

    /// How far ahead a reservation window may start (days).
    #[arg(
        long,
        env = "GPULEDGER_RESERVATION_MAX_AHEAD_DAYS",
        default_value_t = 365
    )]
    pub reservation_max_ahead_days: i64,

    /// Reservations a tenant may hold open in a pool.
    #[arg(long, env = "GPULEDGER_RESERVATION_MAX_OPEN", default_value_t = 100)]
    pub reservation_max_open: usize,

    /// Price every budgeted tenant's month after every event, without the
    /// watch that skips tenants whose spend cannot reach their next line
    /// (the decisions are the same; for checking the watch, or suspecting it).
    #[arg(long, env = "GPULEDGER_NO_BUDGET_WATCH")]
    pub no_budget_watch: bool,
}

impl LedgerRulesArgs {
    /// The state machine's settings these flags give.
    pub fn config(&self) -> LedgerConfig {
        const MICROS_PER_MINUTE: i64 = 60 * 1_000_000;
        const MICROS_PER_DAY: i64 = 24 * 60 * MICROS_PER_MINUTE;
        LedgerConfig {
            hold_ttl_micros: self.hold_ttl_minutes.saturating_mul(MICROS_PER_MINUTE),
            reservations: ReservationLimits {
                max_length_micros: self.reservation_max_days.saturating_mul(MICROS_PER_DAY),
                max_ahead_micros: self
                    .reservation_max_ahead_days
                    .saturating_mul(MICROS_PER_DAY),
                max_open_per_tenant: self.reservation_max_open,
            },
            budget_watch: !self.no_budget_watch,
        }
    }
}
