//! GPU-equivalents, exact: a MIG 1g of 7 is exactly 1/7.
//!
//! Admission and holds add and compare GE on every event, so an amount is
//! kept as a whole number of [`UNIT`]ths of a GE wherever it is one: every
//! fraction of a GPU cut in up to eight slices, and every decimal quota of
//! up to six places, is. Anything else (a quota of 1/9 GE) is kept as an
//! exact rational. Each value has one form, so equal values look equal.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use gpuledger_schemas::{Decimal, Rational};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Parts of a GE counted as one: divisible by 1 to 8 and by 10⁶.
const UNIT: i64 = 840_000_000;

/// An exact amount of GPU-equivalents.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Ge(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// A whole number of [`UNIT`]ths.
    Units(i64),
    /// Not a whole number of units, or too large to count in them. Rare,
    /// so boxed: an amount is then two words wherever it is moved.
    Exact(Box<Rational>),
}

impl Default for Ge {
    fn default() -> Self {
        Self::zero()
    }
}

impl Ge {
    /// Nothing.
    pub fn zero() -> Self {
        Self(Repr::Units(0))
    }

    /// `slices / max_slices` (a non-positive `max_slices` gives zero; the
    /// contract's validation rejects those first).
    pub fn of(slices: i32, max_slices: i32) -> Self {
        if max_slices > 0 && UNIT % i64::from(max_slices) == 0 {
            return Self(Repr::Units(
                i64::from(slices) * (UNIT / i64::from(max_slices)),
            ));
        }
        Self::from_rational(&Rational::new(slices.into(), max_slices.into()).unwrap_or_default())
    }

    /// From a decimal quantity (`nominal_ge`, `burst_ge`).
    pub fn from_decimal(d: &Decimal) -> Self {
        Self::from_rational(&d.to_rational())
    }

    /// From an exact rational quantity.
    pub fn from_rational(r: &Rational) -> Self {
        // In lowest terms: a whole number of units exactly when the
        // denominator divides the unit.
        match r.to_i64_pair() {
            Some((n, d)) if UNIT % d == 0 => match n.checked_mul(UNIT / d) {
                Some(units) => Self(Repr::Units(units)),
                None => Self(Repr::Exact(Box::new(r.clone()))),
            },
            _ => Self(Repr::Exact(Box::new(r.clone()))),
        }
    }

    /// The exact value.
    pub fn to_rational(&self) -> Rational {
        match &self.0 {
            Repr::Units(n) => {
                let (n, d) = units_in_lowest_terms(*n);
                Rational::from_lowest_terms(n, d)
            }
            Repr::Exact(r) => (**r).clone(),
        }
    }

    /// The value as numerator and denominator in lowest terms, where both
    /// fit an `i64`.
    pub fn to_i64_pair(&self) -> Option<(i64, i64)> {
        match &self.0 {
            Repr::Units(n) => Some(units_in_lowest_terms(*n)),
            Repr::Exact(r) => r.to_i64_pair(),
        }
    }

    /// The larger of zero and `self`.
    pub fn clamp_zero(self) -> Self {
        if self.is_negative() {
            Self::zero()
        } else {
            self
        }
    }

    /// True when above zero.
    pub fn is_positive(&self) -> bool {
        match &self.0 {
            Repr::Units(n) => *n > 0,
            Repr::Exact(r) => !r.is_zero() && !r.is_negative(),
        }
    }

    fn is_negative(&self) -> bool {
        match &self.0 {
            Repr::Units(n) => *n < 0,
            Repr::Exact(r) => r.is_negative(),
        }
    }

    /// Changes `self` by `rhs`: by `units` where both are counted in units
    /// and the result fits, else by `exact`. The first is an integer
    /// operation, inlined where sums change; the second is kept out of
    /// line.
    #[inline]
    fn change(
        &mut self,
        rhs: &Ge,
        units: fn(i64, i64) -> Option<i64>,
        exact: fn(Rational, Rational) -> Rational,
    ) {
        if let (Repr::Units(a), Repr::Units(b)) = (&mut self.0, &rhs.0)
            && let Some(n) = units(*a, *b)
        {
            *a = n;
            return;
        }
        self.change_exactly(rhs, exact);
    }

    #[cold]
    #[inline(never)]
    fn change_exactly(&mut self, rhs: &Ge, exact: fn(Rational, Rational) -> Rational) {
        *self = Ge::from_rational(&exact(self.to_rational(), rhs.to_rational()));
    }
}

/// `n / UNIT` in lowest terms. The unit's prime factors are known
/// (2⁹·3·5⁷·7), so the common divisor is found by trying those alone,
/// which is several times cheaper than a general search for it.
fn units_in_lowest_terms(n: i64) -> (i64, i64) {
    // Whole GE (zero among them) are most of what is written out.
    if n % UNIT == 0 {
        return (n / UNIT, 1);
    }
    let mut rest = n.unsigned_abs();
    let twos = rest.trailing_zeros().min(9);
    rest >>= twos;
    let mut common: u64 = 1 << twos;
    if rest.is_multiple_of(3) {
        common *= 3;
    }
    if rest.is_multiple_of(7) {
        common *= 7;
    }
    for _ in 0..7 {
        if !rest.is_multiple_of(5) {
            break;
        }
        rest /= 5;
        common *= 5;
    }
    // `common` divides UNIT, so it fits an i64.
    let common = common as i64;
    (n / common, UNIT / common)
}

impl PartialOrd for Ge {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ge {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (Repr::Units(a), Repr::Units(b)) => a.cmp(b),
            _ => self.to_rational().cmp(&other.to_rational()),
        }
    }
}

impl fmt::Display for Ge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_rational(), f)
    }
}

impl fmt::Debug for Ge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} GE", self.to_rational())
    }
}

/// Written as the exact rational, as it always was.
impl Serialize for Ge {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_rational().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Ge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Ge::from_rational(&Rational::deserialize(d)?))
    }
}

impl Add for Ge {
    type Output = Ge;
    #[inline]
    fn add(mut self, rhs: Ge) -> Ge {
        self += &rhs;
        self
    }
}

impl Sub for Ge {
    type Output = Ge;
    #[inline]
    fn sub(mut self, rhs: Ge) -> Ge {
        self -= &rhs;
        self
    }
}

/// In place: running sums change on every event, and counted amounts
/// then change without a copy.
impl AddAssign<&Ge> for Ge {
    #[inline]
    fn add_assign(&mut self, rhs: &Ge) {
        self.change(rhs, i64::checked_add, |a, b| a + b);
    }
}

impl SubAssign<&Ge> for Ge {
    #[inline]
    fn sub_assign(&mut self, rhs: &Ge) {
        self.change(rhs, i64::checked_sub, |a, b| a - b);
    }
}

impl std::iter::Sum for Ge {
    fn sum<I: Iterator<Item = Ge>>(iter: I) -> Ge {
        iter.fold(Ge::zero(), |a, b| a + b)
    }
}

impl From<Ge> for Rational {
    fn from(ge: Ge) -> Rational {
        ge.to_rational()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(n: i64, d: i64) -> Rational {
        Rational::new(n, d).unwrap_or_default()
    }

    fn decimal(text: &str) -> Ge {
        Ge::from_decimal(&text.parse::<Decimal>().expect("a decimal"))
    }

    #[test]
    fn units_reduce_as_a_general_divisor_search_would() {
        let mut samples: Vec<i64> = (-2_000..2_000).collect();
        samples.extend((1..=8).flat_map(|d| (0..=64).map(move |k| k * (UNIT / d))));
        samples.extend([
            UNIT,
            -UNIT,
            3 * 5_i64.pow(9),
            2_i64.pow(40),
            i64::MAX,
            i64::MIN + 1,
            i64::MIN,
        ]);
        for n in samples {
            let expected = Rational::new(n, UNIT).unwrap_or_default();
            assert_eq!(Ge(Repr::Units(n)).to_rational(), expected, "{n}");
            assert_eq!(
                Ge(Repr::Units(n)).to_i64_pair(),
                expected.to_i64_pair(),
                "{n}"
            );
        }
    }

    #[test]
    fn counted_and_exact_amounts_add_compare_and_print_as_rationals() {
        let seventh = Ge::of(1, 7);
        let ninth = Ge::of(1, 9);
        assert_eq!(seventh.to_string(), "1/7");
        assert_eq!(ninth.to_string(), "1/9");
        assert_eq!(
            (seventh.clone() + ninth.clone()).to_rational(),
            r(1, 7) + r(1, 9)
        );
        // 1/9 + 8/9 is one whole GE again, in units.
        let whole = ninth.clone() + Ge::of(8, 9);
        assert_eq!(whole, Ge::of(7, 7));
        assert_eq!(whole, decimal("1"));
        assert!(ninth < seventh);
        assert_eq!(seventh.cmp(&ninth), std::cmp::Ordering::Greater);
        assert!(Ge::of(1, 7) - Ge::of(2, 7) < Ge::zero());
        assert_eq!((Ge::of(1, 7) - Ge::of(2, 7)).clamp_zero(), Ge::zero());
        assert!(!Ge::zero().is_positive() && Ge::of(1, 9).is_positive());
        assert_eq!(decimal("2.5"), Ge::of(5, 2));
        assert_eq!(decimal("0.1234567").to_string(), "1234567/10000000");
    }

    #[test]
    fn amounts_change_in_place_as_they_add_up() {
        let mut sum = Ge::of(1, 7);
        sum += &Ge::of(1, 9);
        assert_eq!(sum, Ge::of(1, 7) + Ge::of(1, 9));
        sum -= &Ge::of(1, 9);
        assert_eq!(sum, Ge::of(1, 7));
        // Past what units hold, and back.
        let mut big = Ge::of(i32::MAX, 1);
        for _ in 0..7 {
            big += &Ge::of(i32::MAX, 1);
        }
        assert_eq!(
            big.to_rational(),
            Rational::from_integer(i64::from(i32::MAX) * 8)
        );
        for _ in 0..8 {
            big -= &Ge::of(i32::MAX, 1);
        }
        assert_eq!(big, Ge::zero());
    }

    #[test]
    fn amounts_too_large_to_count_stay_exact() {
        let big = Ge::of(i32::MAX, 1);
        let sum: Ge = std::iter::repeat_n(big, 8).sum();
        assert_eq!(
            sum.to_rational(),
            Rational::from_integer(i64::from(i32::MAX) * 8)
        );
        let text = serde_json::to_string(&sum).expect("serializes");
        let back: Ge = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, sum);
    }
}
