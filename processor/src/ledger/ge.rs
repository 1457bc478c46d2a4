//! GPU-equivalents as exact rationals: a MIG 1g of 7 is exactly 1/7.

use std::fmt;
use std::ops::{Add, Sub};

use gpuledger_schemas::{Decimal, Rational};

/// An exact amount of GPU-equivalents.
#[derive(
    Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Ge(Rational);

impl Ge {
    /// Nothing.
    pub fn zero() -> Self {
        Self(Rational::zero())
    }

    /// `slices / max_slices` (a non-positive `max_slices` gives zero; the
    /// contract's validation rejects those first).
    pub fn of(slices: i32, max_slices: i32) -> Self {
        Self(Rational::new(slices.into(), max_slices.into()).unwrap_or_default())
    }

    /// From a decimal quantity (`nominal_ge`, `burst_ge`).
    pub fn from_decimal(d: &Decimal) -> Self {
        Self(d.to_rational())
    }

    /// From an exact rational quantity.
    pub fn from_rational(r: &Rational) -> Self {
        Self(r.clone())
    }

    /// The exact value.
    pub fn as_rational(&self) -> &Rational {
        &self.0
    }

    /// The larger of zero and `self`.
    pub fn clamp_zero(self) -> Self {
        Self(self.0.max(Rational::zero()))
    }

    /// True when above zero.
    pub fn is_positive(&self) -> bool {
        !self.0.is_zero() && !self.0.is_negative()
    }
}

impl fmt::Display for Ge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Ge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} GE", self.0)
    }
}

impl Add for Ge {
    type Output = Ge;
    fn add(self, rhs: Ge) -> Ge {
        Ge(self.0 + rhs.0)
    }
}

impl Sub for Ge {
    type Output = Ge;
    fn sub(self, rhs: Ge) -> Ge {
        Ge(self.0 - rhs.0)
    }
}

impl std::iter::Sum for Ge {
    fn sum<I: Iterator<Item = Ge>>(iter: I) -> Ge {
        iter.fold(Ge::zero(), |a, b| a + b)
    }
}

impl From<Ge> for Rational {
    fn from(ge: Ge) -> Rational {
        ge.0
    }
}
