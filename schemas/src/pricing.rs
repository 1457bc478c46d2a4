//! Price books and the cost function (DESIGN §5): the one place that turns
//! GE × time into money. The processor's budgets and the query service's
//! statements both call it, so they cannot disagree.
//!
//! Everything here is exact: rates are [`Decimal`]s, amounts [`Rational`]s,
//! and nothing is rounded until a statement line is ([`Rational::round_half_even`]).

use crate::events::{HoldKind, PriceBook};
use crate::exact::{Decimal, Rational};
use crate::time::{MICROS_PER_HOUR, Timestamp};

symbols! {
    /// The lines of a statement, in statement order (DESIGN §5).
    pub enum StatementLine {
        ComputeReserved = "compute_reserved",
        ComputeQuota = "compute_quota",
        ComputeBurst = "compute_burst",
        ReservationUnused = "reservation_unused",
        Energy = "energy",
        Storage = "storage",
        DataMovement = "data_movement",
        HealthCredit = "health_credit",
        SharedIdle = "shared_idle",
        Overhead = "overhead",
        Total = "total",
    }
}

/// Which rate of a [`ModelRate`](crate::events::ModelRate) applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateKind {
    /// `reserved_per_gpu_hour`.
    Reserved,
    /// `quota_per_gpu_hour`.
    Quota,
    /// `on_demand_per_gpu_hour`: burst and unadmitted use.
    OnDemand,
}

impl From<HoldKind> for RateKind {
    fn from(kind: HoldKind) -> Self {
        match kind {
            HoldKind::Reserved => RateKind::Reserved,
            HoldKind::Quota => RateKind::Quota,
            HoldKind::Burst => RateKind::OnDemand,
        }
    }
}

/// Why something could not be priced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PricingError {
    /// No book is in force at that instant.
    #[error("no price book is in force for pool {pool:?} at {at}")]
    NoBook { pool: String, at: Timestamp },
    /// The book in force has no rate for the model.
    #[error("price book v{version} has no rate for model {model:?} (pool {pool:?}) at {at}")]
    NoRate {
        pool: String,
        model: String,
        version: i64,
        at: Timestamp,
    },
    /// Two books with the same `effective_from` and `version` disagree.
    #[error(
        "price book v{version} effective {effective_from} was already given with different content"
    )]
    Conflict {
        version: i64,
        effective_from: Timestamp,
    },
}

/// Every price book known, in force order: by `effective_from`, and at equal
/// `effective_from` the higher `version` wins, whatever order they arrived in.
/// A book without `pool` applies to every pool; pool-specific and global
/// books share one timeline per pool.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriceBooks {
    books: Vec<PriceBook>,
}

impl PriceBooks {
    /// No books.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a book. The same book again is a no-op; a different book with
    /// the same `effective_from` and `version` is a conflict.
    pub fn insert(&mut self, book: PriceBook) -> Result<(), PricingError> {
        if self.check(&book)? {
            return Ok(());
        }
        let order = |b: &PriceBook| (b.effective_from, b.version);
        let at = self.books.partition_point(|b| order(b) <= order(&book));
        self.books.insert(at, book);
        Ok(())
    }

    /// Whether `book` may be added: `Ok(true)` when the same book is
    /// already known (adding it changes nothing), `Ok(false)` when it is
    /// new, a conflict when a different book holds its `effective_from` and
    /// `version`.
    pub fn check(&self, book: &PriceBook) -> Result<bool, PricingError> {
        let order = |b: &PriceBook| (b.effective_from, b.version);
        let same_slot = self
            .books
            .iter()
            .find(|b| order(b) == order(book) && b.pool == book.pool);
        match same_slot {
            Some(existing) if existing == book => Ok(true),
            Some(_) => Err(PricingError::Conflict {
                version: book.version,
                effective_from: book.effective_from,
            }),
            None => Ok(false),
        }
    }

    /// Every book, in force order.
    pub fn books(&self) -> &[PriceBook] {
        &self.books
    }

    fn applies(book: &PriceBook, pool: &str) -> bool {
        book.pool.as_deref().is_none_or(|p| p == pool)
    }

    /// The book in force for `pool` at instant `at`.
    pub fn in_force(&self, pool: &str, at: Timestamp) -> Option<&PriceBook> {
        self.books
            .iter()
            .rev()
            .find(|b| b.effective_from <= at && Self::applies(b, pool))
    }

    /// The book in force, or an error naming the pool and instant.
    pub fn require(&self, pool: &str, at: Timestamp) -> Result<&PriceBook, PricingError> {
        self.in_force(pool, at).ok_or_else(|| PricingError::NoBook {
            pool: pool.to_owned(),
            at,
        })
    }

    /// The instants strictly inside (from, to) where the book in force for
    /// `pool` may change: where segments must split.
    pub fn change_points(&self, pool: &str, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
        let mut points: Vec<Timestamp> = self
            .books
            .iter()
            .filter(|b| Self::applies(b, pool) && b.effective_from > from && b.effective_from < to)
            .map(|b| b.effective_from)
            .collect();
        points.dedup();
        points
    }

    /// The per-GPU-hour rate for `model` in `pool` at `at`.
    pub fn rate(
        &self,
        pool: &str,
        model: &str,
        kind: RateKind,
        at: Timestamp,
    ) -> Result<Rational, PricingError> {
        let book = self.require(pool, at)?;
        rate_in(book, pool, model, kind, at)
    }

    /// The compute cost of holding `slices/max_slices` GE of `model` in
    /// `pool` over [start, end) at `kind`'s rate, split wherever the book in
    /// force changes. Exact.
    pub fn compute_cost(&self, usage: &GpuUsage<'_>) -> Result<Rational, PricingError> {
        let mut total = Rational::zero();
        if usage.end <= usage.start {
            return Ok(total);
        }
        let mut from = usage.start;
        let changes = self.change_points(usage.pool, usage.start, usage.end);
        for to in changes.into_iter().chain(std::iter::once(usage.end)) {
            let rate = self.rate(usage.pool, usage.model, usage.kind, from)?;
            let micros = to.as_micros() - from.as_micros();
            total = total + segment_amount(usage.slices, usage.max_slices, micros, &rate);
            from = to;
        }
        Ok(total)
    }
}

/// One stretch of GPU use to price.
#[derive(Debug, Clone, Copy)]
pub struct GpuUsage<'a> {
    pub pool: &'a str,
    pub model: &'a str,
    pub kind: RateKind,
    pub slices: i64,
    pub max_slices: i64,
    pub start: Timestamp,
    pub end: Timestamp,
}

pub(crate) fn rate_in(
    book: &PriceBook,
    pool: &str,
    model: &str,
    kind: RateKind,
    at: Timestamp,
) -> Result<Rational, PricingError> {
    let rate = book
        .rates
        .iter()
        .find(|r| r.model == model)
        .ok_or_else(|| PricingError::NoRate {
            pool: pool.to_owned(),
            model: model.to_owned(),
            version: book.version,
            at,
        })?;
    let value: &Decimal = match kind {
        RateKind::Reserved => &rate.reserved_per_gpu_hour,
        RateKind::Quota => &rate.quota_per_gpu_hour,
        RateKind::OnDemand => &rate.on_demand_per_gpu_hour,
    };
    Ok(value.to_rational())
}

/// The cost function of DESIGN §5 for one segment of `slices/max_slices` GE
/// held for `micros` microseconds at `rate` per GPU-hour:
/// `slices × secs × rate / (max_slices × 3600)`.
pub fn segment_amount(slices: i64, max_slices: i64, micros: i64, rate: &Rational) -> Rational {
    let ge = Rational::new(slices, max_slices).unwrap_or_else(Rational::zero);
    ge_amount(&ge, micros, rate)
}

/// The same cost function for an exact GE amount: `ge × secs × rate / 3600`.
pub fn ge_amount(ge: &Rational, micros: i64, rate: &Rational) -> Rational {
    // One fraction, reduced once, where its parts fit: the same value as
    // the three products below, for a sixth of the work.
    if let (Some((gn, gd)), Some((rn, rd))) = (ge.to_i128_pair(), rate.to_i128_pair())
        && let Some(numer) = gn
            .checked_mul(i128::from(micros))
            .and_then(|n| n.checked_mul(rn))
        && let Some(denom) = gd
            .checked_mul(rd)
            .and_then(|d| d.checked_mul(i128::from(MICROS_PER_HOUR)))
        && let Some(amount) = Rational::from_i128_ratio(numer, denom)
    {
        return amount;
    }
    let per_hour = Rational::from_integer(MICROS_PER_HOUR);
    (ge * &Rational::from_integer(micros) * rate.clone())
        .checked_div(&per_hour)
        .unwrap_or_else(Rational::zero)
}

/// Storage: GB-hours / 730 × `storage_per_gb_month`.
pub fn storage_amount(gb_hours: &Decimal, book: &PriceBook) -> Rational {
    let months = gb_hours
        .to_rational()
        .checked_div(&Rational::from_integer(730))
        .unwrap_or_default();
    months * book.storage_per_gb_month.to_rational()
}

/// Data movement: egress bytes / 10⁹ × `egress_per_gb`.
pub fn egress_amount(bytes: &Decimal, book: &PriceBook) -> Rational {
    let gb = bytes
        .to_rational()
        .checked_div(&Rational::from_integer(1_000_000_000))
        .unwrap_or_default();
    gb * book.egress_per_gb.to_rational()
}

/// Energy: millijoules → kWh (1 kWh = 3.6 × 10⁹ mJ) × `energy_per_kwh`;
/// zero when the book sets no energy price.
pub fn energy_amount(millijoules: i128, book: &PriceBook) -> Rational {
    let Some(price) = &book.energy_per_kwh else {
        return Rational::zero();
    };
    let kwh = Rational::from_i128(millijoules)
        .checked_div(&Rational::from_integer(3_600_000_000))
        .unwrap_or_default();
    kwh * price.to_rational()
}

/// Overhead: `overhead_pct` / 100 × the exact sum of the other lines.
pub fn overhead_amount(lines_sum: &Rational, book: &PriceBook) -> Rational {
    let pct = book
        .overhead_pct
        .to_rational()
        .checked_div(&Rational::from_integer(100))
        .unwrap_or_default();
    pct * lines_sum.clone()
}

#[cfg(test)]
mod tests;
