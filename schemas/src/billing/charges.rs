//! The charges behind each statement line: what a FOCUS export (or anyone
//! asking "what is this line made of?") lists row by row.
//!
//! A charge carries its exact amount as the statement computed it and its
//! `billed` amount: the line's rounded amount apportioned over its charges
//! (largest remainder), so that the charges of a tenant's line add up to
//! that line to the cent.

use crate::events::UsageKind;
use crate::exact::{Decimal, Rational};
use crate::pricing::StatementLine;
use crate::time::Timestamp;

use super::facts::UseKind;

/// What a charge is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charged {
    /// A stretch of one job attempt's allocation (a billing segment
    /// clipped to the period): its compute, or the credit for time on a
    /// failed device.
    Attempt {
        job_id: String,
        attempt: i32,
        kind: UseKind,
        model: String,
        slices: i64,
        max_slices: i64,
    },
    /// Reserved capacity the tenant did not use, over the period.
    UnusedReservations { model: String },
    /// A usage record: storage GB-hours or egress bytes.
    Usage { kind: UsageKind },
    /// The energy the tenant's devices used in the pool over the period.
    Energy,
    /// The tenant's share of the pool's idle capacity, or the pool's
    /// overhead on the tenant's lines.
    Pool,
}

/// One charge of a tenant's statement line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub tenant: String,
    pub pool: String,
    pub line: StatementLine,
    pub charged: Charged,
    /// The stretch of time charged (clipped to the period).
    pub start: Timestamp,
    pub end: Timestamp,
    /// What was used, in [`Charge::unit`]s: GPU-hours (GE × hours) for
    /// compute, credit and unused reservations, GB-hours of storage, GB of
    /// egress, kWh of energy; none for shares and overhead.
    pub quantity: Option<Rational>,
    /// Exact, signed (a credit is negative).
    pub amount: Rational,
    /// The line's rounded amount apportioned to this charge; set by
    /// [`super::statement`].
    pub billed: Decimal,
}

impl Charge {
    /// A charge of `amount`, not yet apportioned.
    pub(super) fn new(
        tenant: &str,
        pool: &str,
        line: StatementLine,
        charged: Charged,
        (start, end): (Timestamp, Timestamp),
        quantity: Option<Rational>,
        amount: Rational,
    ) -> Self {
        Self {
            tenant: tenant.to_owned(),
            pool: pool.to_owned(),
            line,
            charged,
            start,
            end,
            quantity,
            amount,
            billed: Decimal::zero(),
        }
    }

    /// The unit of [`Charge::quantity`].
    pub fn unit(&self) -> Option<&'static str> {
        match &self.charged {
            Charged::Attempt { .. } | Charged::UnusedReservations { .. } => Some("GPU-Hours"),
            Charged::Usage {
                kind: UsageKind::StorageGbHours,
            } => Some("GB-Hours"),
            Charged::Usage { .. } => Some("GB"),
            Charged::Energy => Some("kWh"),
            Charged::Pool => None,
        }
    }
}

/// Sets each charge's `billed` so that the charges of every line add up to
/// `rounded(line)`, which must be the half-even rounding of the sum of
/// their exact amounts to `digits`.
pub(super) fn apportion(charges: &mut [Charge], digits: u32) {
    let mut lines: Vec<StatementLine> = charges.iter().map(|c| c.line).collect();
    lines.sort();
    lines.dedup();
    for line in lines {
        let indexes: Vec<usize> = (0..charges.len())
            .filter(|i| charges[*i].line == line)
            .collect();
        let exact: Vec<Rational> = indexes.iter().map(|i| charges[*i].amount.clone()).collect();
        for (i, billed) in indexes.into_iter().zip(Rational::apportion(&exact, digits)) {
            charges[i].billed = billed;
        }
    }
}
