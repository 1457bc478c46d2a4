//! [`Rational`]: exact arithmetic that allocates nothing for the values
//! money and GE actually take.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::str::FromStr;

use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Decimal, NumberText, ParseNumberError, pow10};

/// An exact rational number. Displays as `n` or `n/d` in lowest terms.
///
/// Amounts of money over a month, rates, GE and hours all fit a numerator
/// and a denominator of 128 bits, so that is how a value is held; a value
/// that does not fit (a long chain of sevenths and odd rates) moves to
/// arbitrary precision, and back as soon as a result fits again. Every
/// value has exactly one form — lowest terms, positive denominator, small
/// whenever it fits — so equal values have equal forms.
#[derive(Clone)]
pub struct Rational(Repr);

#[derive(Clone)]
enum Repr {
    /// `numer / denom` in lowest terms with `denom > 0`; neither is
    /// `i128::MIN`, so both can change sign.
    Small(i128, i128),
    /// A value whose numerator or denominator does not fit an `i128`.
    Big(Box<BigRational>),
}

impl Rational {
    /// Zero.
    pub fn zero() -> Self {
        Self(Repr::Small(0, 1))
    }

    /// `numer / denom`. Panics never: a zero denominator gives `None`.
    pub fn new(numer: i64, denom: i64) -> Option<Self> {
        (denom != 0).then(|| Self::reduced(numer.into(), denom.into()))
    }

    /// `numer / denom` that the caller knows is in lowest terms with
    /// `denom > 0` (it found the common factors some cheaper way), so no
    /// divisor is searched for. Debug builds check it.
    pub fn from_lowest_terms(numer: i64, denom: i64) -> Self {
        debug_assert!(
            denom > 0 && gcd(numer.unsigned_abs().into(), denom.unsigned_abs().into()) == 1,
            "{numer}/{denom} is not in lowest terms"
        );
        Self(Repr::Small(numer.into(), denom.into()))
    }

    /// A whole number.
    pub fn from_integer(n: i64) -> Self {
        Self(Repr::Small(n.into(), 1))
    }

    /// A whole number too large for an `i64`, such as a sum of them.
    pub fn from_i128(n: i128) -> Self {
        Self::reduced(n, 1)
    }

    /// True when exactly zero.
    pub fn is_zero(&self) -> bool {
        matches!(self.0, Repr::Small(0, _))
    }

    /// True when below zero.
    pub fn is_negative(&self) -> bool {
        match &self.0 {
            Repr::Small(n, _) => *n < 0,
            Repr::Big(b) => b.is_negative(),
        }
    }

    /// The larger of the two.
    pub fn max(self, other: Self) -> Self {
        if other > self { other } else { self }
    }

    /// The smaller of the two.
    pub fn min(self, other: Self) -> Self {
        if other < self { other } else { self }
    }

    /// The value as `(numerator, denominator)` in lowest terms, when both
    /// fit in an `i64`.
    pub fn to_i64_pair(&self) -> Option<(i64, i64)> {
        match &self.0 {
            Repr::Small(n, d) => Some((i64::try_from(*n).ok()?, i64::try_from(*d).ok()?)),
            // A big value has a part that does not even fit an i128.
            Repr::Big(_) => None,
        }
    }

    /// The value as a plain decimal with as few fractional digits as it
    /// needs (`"310.5"`, `"3"`), or `None` when no decimal of at most
    /// `max_digits` digits holds it exactly (1/3).
    pub fn to_plain_decimal(&self, max_digits: u32) -> Option<Decimal> {
        (0..=max_digits)
            .map(|digits| self.round_half_even(digits))
            .find(|d| d.as_rational() == self)
    }

    /// The largest integer not above this number, if it fits an `i64`.
    pub fn floor_i64(&self) -> Option<i64> {
        match &self.0 {
            Repr::Small(n, d) => i64::try_from(n.div_euclid(*d)).ok(),
            Repr::Big(b) => b.floor().to_integer().to_i64(),
        }
    }

    /// `numer / denom` in lowest terms, or `None` when `denom` is zero.
    pub fn from_i128_ratio(numer: i128, denom: i128) -> Option<Self> {
        (denom != 0).then(|| Self::reduced(numer, denom))
    }

    /// The value as `(numerator, denominator)` in lowest terms, when both
    /// fit in an `i128`.
    pub fn to_i128_pair(&self) -> Option<(i128, i128)> {
        match &self.0 {
            Repr::Small(n, d) => Some((*n, *d)),
            Repr::Big(_) => None,
        }
    }

    /// The largest integer not above this number, if it fits an `i128`.
    pub fn floor_i128(&self) -> Option<i128> {
        match &self.0 {
            Repr::Small(n, d) => Some(n.div_euclid(*d)),
            Repr::Big(b) => b.floor().to_integer().to_i128(),
        }
    }

    /// `self / other`, or `None` when `other` is zero.
    pub fn checked_div(&self, other: &Self) -> Option<Self> {
        if other.is_zero() {
            return None;
        }
        let recip = match &other.0 {
            // Neither part is i128::MIN, so both negate.
            Repr::Small(n, d) if *n < 0 => Self(Repr::Small(-d, -n)),
            Repr::Small(n, d) => Self(Repr::Small(*d, *n)),
            Repr::Big(b) => Self::from_big(b.recip()),
        };
        Some(self * &recip)
    }

    /// Rounds to `digits` fractional digits, half to even, on the signed value
    /// (−2.5 → −2, −3.5 → −4).
    pub fn round_half_even(&self, digits: u32) -> Decimal {
        if let (Repr::Small(n, d), Some(scale)) = (&self.0, pow10(digits))
            && let Some(scaled) = n.checked_mul(scale)
        {
            // q = floor(n·scale / d); r / d is the fractional part in [0, 1).
            let (q, r) = (scaled.div_euclid(*d), scaled.rem_euclid(*d));
            // Compare r with d − r rather than 2r with d: 2r may overflow.
            let rounded = match r.cmp(&(d - r)) {
                Ordering::Less => q,
                Ordering::Greater => q + 1,
                Ordering::Equal if q % 2 == 0 => q,
                Ordering::Equal => q + 1,
            };
            return Decimal::from_unscaled(Self::reduced(rounded, scale), digits);
        }
        Decimal::from_unscaled(Self::from_big(round_big(&self.to_big(), digits)), digits)
    }

    /// Rounds each of `parts` to `digits` so that the rounded parts add up
    /// exactly to the half-even rounding of their sum: every part is
    /// rounded down, and the units still missing go one each to the parts
    /// with the largest remainders (the earlier part on a tie).
    pub fn apportion(parts: &[Rational], digits: u32) -> Vec<Decimal> {
        let scale = BigInt::from(10u32).pow(digits);
        let scaled: Vec<BigRational> = parts
            .iter()
            .map(|p| p.to_big() * BigRational::from_integer(scale.clone()))
            .collect();
        let floors: Vec<BigInt> = scaled.iter().map(|s| s.floor().to_integer()).collect();
        let total: Rational = parts.iter().cloned().sum();
        let target = total.round_half_even(digits).as_rational().to_big()
            * BigRational::from_integer(scale.clone());
        let floored: BigInt = floors.iter().sum();
        // 0 <= missing < parts.len(): the sum of the floors is at most half
        // a unit below the rounded total, and each floor loses under one.
        let missing = target.to_integer() - floored;
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by(|a, b| {
            let ra = &scaled[*a] - BigRational::from_integer(floors[*a].clone());
            let rb = &scaled[*b] - BigRational::from_integer(floors[*b].clone());
            rb.cmp(&ra).then(a.cmp(b))
        });
        let mut units = floors;
        let mut left = missing;
        for i in order {
            if left <= BigInt::zero() {
                break;
            }
            units[i] += 1u32;
            left -= 1u32;
        }
        units
            .into_iter()
            .map(|u| {
                Decimal::from_unscaled(Self::from_big(BigRational::new(u, scale.clone())), digits)
            })
            .collect()
    }

    /// `n / d` in its one form; `d` is not zero.
    fn reduced(n: i128, d: i128) -> Self {
        if n == i128::MIN || d == i128::MIN {
            return Self::from_big(BigRational::new(n.into(), d.into()));
        }
        let (n, d) = if d < 0 { (-n, -d) } else { (n, d) };
        if d == 1 {
            // Whole numbers are most of what is added up: no divisor to find.
            return Self(Repr::Small(n, 1));
        }
        // d > 0, so the divisor is at least one and fits an i128.
        let g = gcd(n.unsigned_abs(), d.unsigned_abs()) as i128;
        Self(Repr::Small(div_exact(n, g), div_exact(d, g)))
    }

    /// A reduced big value in its one form: small when it fits.
    fn from_big(r: BigRational) -> Self {
        match (r.numer().to_i128(), r.denom().to_i128()) {
            (Some(n), Some(d)) if n != i128::MIN => Self(Repr::Small(n, d)),
            _ => Self(Repr::Big(Box::new(r))),
        }
    }

    fn to_big(&self) -> BigRational {
        match &self.0 {
            Repr::Small(n, d) => BigRational::new_raw((*n).into(), (*d).into()),
            Repr::Big(b) => (**b).clone(),
        }
    }

    fn add_ref(&self, other: &Self) -> Self {
        if let (Repr::Small(a, b), Repr::Small(c, d)) = (&self.0, &other.0)
            && let Some(sum) = add_small(*a, *b, *c, *d)
        {
            return sum;
        }
        Self::from_big(self.to_big() + other.to_big())
    }

    fn sub_ref(&self, other: &Self) -> Self {
        if let (Repr::Small(a, b), Repr::Small(c, d)) = (&self.0, &other.0)
            && let Some(sum) = add_small(*a, *b, -c, *d)
        {
            return sum;
        }
        Self::from_big(self.to_big() - other.to_big())
    }

    fn mul_ref(&self, other: &Self) -> Self {
        if let (Repr::Small(a, b), Repr::Small(c, d)) = (&self.0, &other.0)
            && let Some(product) = mul_small(*a, *b, *c, *d)
        {
            return product;
        }
        Self::from_big(self.to_big() * other.to_big())
    }

    fn parse_fraction(s: &str) -> Result<Self, ParseNumberError> {
        let err = || ParseNumberError {
            input: s.to_owned(),
            expected: "a rational number (\"n\", \"n/d\" or a plain decimal)",
        };
        match s.split_once('/') {
            Some((n, d)) => {
                let n = BigInt::from_str(n.trim()).map_err(|_| err())?;
                let d = BigInt::from_str(d.trim()).map_err(|_| err())?;
                if d.is_zero() {
                    return Err(err());
                }
                Ok(Self::from_big(BigRational::new(n, d)))
            }
            None => Decimal::from_str(s).map(Rational::from).map_err(|_| err()),
        }
    }

    /// The numerator, for a value whose denominator divides `scale`:
    /// `self × scale` as an integer's decimal digits (sign apart).
    pub(super) fn scaled_digits(&self, scale: u32) -> (bool, String) {
        if let (Repr::Small(n, d), Some(p)) = (&self.0, pow10(scale))
            && p % d == 0
            && let Some(unscaled) = n.checked_mul(p / d)
        {
            return (unscaled < 0, unscaled.unsigned_abs().to_string());
        }
        let scaled = self.to_big() * BigRational::from_integer(BigInt::from(10u32).pow(scale));
        let unscaled = scaled.to_integer();
        (unscaled.is_negative(), unscaled.abs().to_string())
    }

    /// `unscaled / 10^scale`, for a decimal's digits.
    pub(super) fn from_unscaled_digits(unscaled: &str, negative: bool, scale: u32) -> Option<Self> {
        if let (Ok(n), Some(p)) = (unscaled.parse::<i128>(), pow10(scale)) {
            return Some(Self::reduced(if negative { -n } else { n }, p));
        }
        let n = BigInt::from_str(unscaled).ok()?;
        let n = if negative { -n } else { n };
        Some(Self::from_big(BigRational::new(
            n,
            BigInt::from(10u32).pow(scale),
        )))
    }
}

/// `a/b + c/d` when every step fits; `b` and `d` are positive.
fn add_small(a: i128, b: i128, c: i128, d: i128) -> Option<Rational> {
    // Sums start from zero: the other side is already in lowest terms.
    if a == 0 {
        return Some(Rational(Repr::Small(c, d)));
    }
    if c == 0 {
        return Some(Rational(Repr::Small(a, b)));
    }
    if b == d {
        return Some(Rational::reduced(a.checked_add(c)?, b));
    }
    // Over the least common denominator, so products stay small.
    let g = gcd(b.unsigned_abs(), d.unsigned_abs()) as i128;
    let (b1, d1) = (div_exact(b, g), div_exact(d, g));
    let numer = a.checked_mul(d1)?.checked_add(c.checked_mul(b1)?)?;
    Some(Rational::reduced(numer, b.checked_mul(d1)?))
}

/// `a/b × c/d` when the product fits; both in lowest terms, `b`, `d` > 0.
fn mul_small(a: i128, b: i128, c: i128, d: i128) -> Option<Rational> {
    if a == 0 || c == 0 {
        return Some(Rational::zero());
    }
    // Cross-cancel first: the product is then in lowest terms already.
    let g1 = gcd(a.unsigned_abs(), d.unsigned_abs()) as i128;
    let g2 = gcd(c.unsigned_abs(), b.unsigned_abs()) as i128;
    let numer = div_exact(a, g1).checked_mul(div_exact(c, g2))?;
    let denom = div_exact(b, g2).checked_mul(div_exact(d, g1))?;
    (numer != i128::MIN).then_some(Rational(Repr::Small(numer, denom)))
}

/// `x / g` for a divisor `g` ≥ 1 of `x`. Most values here fit 64 bits,
/// and most divisors are 1: a 128-bit division is a slow library call.
#[inline]
fn div_exact(x: i128, g: i128) -> i128 {
    if g == 1 {
        x
    } else if let (Ok(x), Ok(g)) = (i64::try_from(x), i64::try_from(g)) {
        // `g` ≥ 2, so the quotient cannot overflow.
        i128::from(x / g)
    } else {
        x / g
    }
}

/// Greatest common divisor; `gcd(0, b) = b`. In 64 bits when both fit,
/// which is twice as fast and almost always the case.
fn gcd(a: u128, b: u128) -> u128 {
    if a == 1 || b == 1 {
        1
    } else if (a | b) >> 64 == 0 {
        u128::from((a as u64).gcd(&(b as u64)))
    } else {
        a.gcd(&b)
    }
}

/// Half-to-even rounding to `digits` in arbitrary precision.
fn round_big(value: &BigRational, digits: u32) -> BigRational {
    let scale = BigInt::from(10u32).pow(digits);
    let scaled = value * BigRational::from_integer(scale.clone());
    let (q, r) = scaled.numer().div_mod_floor(scaled.denom());
    let rounded = match (r * 2u32).cmp(scaled.denom()) {
        Ordering::Less => q,
        Ordering::Greater => q + 1u32,
        Ordering::Equal if q.is_even() => q,
        Ordering::Equal => q + 1u32,
    };
    BigRational::new(rounded, scale)
}

impl Default for Rational {
    fn default() -> Self {
        Self::zero()
    }
}

impl PartialEq for Rational {
    fn eq(&self, other: &Self) -> bool {
        // One form per value: equal values have equal forms.
        match (&self.0, &other.0) {
            (Repr::Small(a, b), Repr::Small(c, d)) => a == c && b == d,
            (Repr::Big(x), Repr::Big(y)) => x == y,
            _ => false,
        }
    }
}
impl Eq for Rational {}

impl Hash for Rational {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match &self.0 {
            Repr::Small(n, d) => (n, d).hash(state),
            Repr::Big(b) => b.hash(state),
        }
    }
}

impl PartialOrd for Rational {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rational {
    fn cmp(&self, other: &Self) -> Ordering {
        if let (Repr::Small(a, b), Repr::Small(c, d)) = (&self.0, &other.0) {
            if b == d {
                return a.cmp(c);
            }
            let by_sign = a.signum().cmp(&c.signum());
            if by_sign != Ordering::Equal || *a == 0 {
                return by_sign;
            }
            if let (Some(left), Some(right)) = (a.checked_mul(*d), c.checked_mul(*b)) {
                return left.cmp(&right);
            }
        }
        self.to_big().cmp(&other.to_big())
    }
}

impl fmt::Display for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Small(n, 1) => write!(f, "{n}"),
            Repr::Small(n, d) => write!(f, "{n}/{d}"),
            Repr::Big(b) if b.denom().is_one() => write!(f, "{}", b.numer()),
            Repr::Big(b) => write!(f, "{}/{}", b.numer(), b.denom()),
        }
    }
}

impl fmt::Debug for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Rational {
    type Err = ParseNumberError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_fraction(s)
    }
}

macro_rules! rational_ops {
    ($($trait:ident $method:ident $by_ref:ident),*) => {$(
        impl $trait for Rational {
            type Output = Rational;
            fn $method(self, rhs: Rational) -> Rational { self.$by_ref(&rhs) }
        }
        impl $trait<&Rational> for &Rational {
            type Output = Rational;
            fn $method(self, rhs: &Rational) -> Rational { self.$by_ref(rhs) }
        }
    )*};
}
rational_ops!(Add add add_ref, Sub sub sub_ref, Mul mul mul_ref);

impl Div for Rational {
    type Output = Option<Rational>;
    fn div(self, rhs: Rational) -> Option<Rational> {
        self.checked_div(&rhs)
    }
}

impl Neg for Rational {
    type Output = Rational;
    fn neg(self) -> Rational {
        match self.0 {
            Repr::Small(n, d) => Self(Repr::Small(-n, d)),
            Repr::Big(b) => Self::from_big(-*b),
        }
    }
}

impl std::iter::Sum for Rational {
    fn sum<I: Iterator<Item = Rational>>(iter: I) -> Self {
        iter.fold(Rational::zero(), |a, b| a + b)
    }
}

impl From<i64> for Rational {
    fn from(n: i64) -> Self {
        Self::from_integer(n)
    }
}

impl Serialize for Rational {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rational {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(NumberText("a rational number"))?;
        Rational::from_str(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values near the edges of the small form, and ordinary ones.
    fn edge_values() -> Vec<Rational> {
        let big = i128::MAX;
        let mut out = Vec::new();
        for (n, d) in [
            (0, 1),
            (1, 7),
            (-3, 7),
            (5, 2),
            (big, 1),
            (-big, 1),
            (1, big),
            (big, big - 1),
            (-(big / 3), 7),
            (i128::from(i64::MAX), 3),
            (i128::from(i64::MIN), 6),
            (12, 18),
            (-(3 << 40), 9 << 20),
            (1 << 100, (1 << 64) + 1),
        ] {
            out.push(Rational::reduced(n, d));
        }
        out
    }

    #[test]
    fn the_small_form_agrees_with_arbitrary_precision_at_its_edges() {
        let values = edge_values();
        for x in &values {
            for y in &values {
                let (bx, by) = (x.to_big(), y.to_big());
                assert_eq!((x + y).to_big(), &bx + &by, "{x} + {y}");
                // Every small result is in lowest terms.
                for result in [x + y, x - y, x * y] {
                    if let Repr::Small(n, d) = result.0 {
                        assert!(
                            d > 0 && gcd(n.unsigned_abs(), d.unsigned_abs()) == 1,
                            "{x}, {y}: {n}/{d}"
                        );
                    }
                }
                assert_eq!((x - y).to_big(), &bx - &by, "{x} - {y}");
                assert_eq!((x * y).to_big(), &bx * &by, "{x} × {y}");
                assert_eq!(x.cmp(y), bx.cmp(&by), "{x} <=> {y}");
                if !y.is_zero() {
                    assert_eq!(x.checked_div(y).unwrap().to_big(), &bx / &by, "{x} / {y}");
                }
            }
        }
    }

    #[test]
    fn a_value_that_fits_again_is_small_again() {
        let huge = Rational::from_i128(i128::MAX) * Rational::from_i128(i128::MAX);
        assert!(matches!(huge.0, Repr::Big(_)));
        let back = huge.checked_div(&Rational::from_i128(i128::MAX)).unwrap();
        assert!(matches!(back.0, Repr::Small(..)));
        assert_eq!(back, Rational::from_i128(i128::MAX));
        let below = -Rational::from_i128(i128::MAX) - Rational::from_integer(1);
        assert!(
            matches!(below.0, Repr::Big(_)),
            "i128::MIN has no small form"
        );
        assert_eq!(below.to_big(), BigRational::from_integer(i128::MIN.into()));
    }

    proptest::proptest! {
        #[test]
        fn arithmetic_agrees_with_arbitrary_precision(
            a in proptest::num::i128::ANY, b in 1i128..=i128::MAX,
            c in proptest::num::i64::ANY, d in 1i64..=i64::MAX,
            e in -1_000_000i64..1_000_000, f in 1i64..100_000,
        ) {
            let x = Rational::from_big(BigRational::new(a.into(), b.into()));
            let y = Rational::reduced(c.into(), d.into());
            let z = Rational::reduced(e.into(), f.into());
            for (p, q) in [(&x, &y), (&y, &z), (&x, &z), (&z, &z)] {
                let (bp, bq) = (p.to_big(), q.to_big());
                proptest::prop_assert_eq!((p + q).to_big(), &bp + &bq);
                if let Repr::Small(n, d) = (p + q).0 {
                    proptest::prop_assert!(d > 0 && gcd(n.unsigned_abs(), d.unsigned_abs()) == 1);
                }
                proptest::prop_assert_eq!((p - q).to_big(), &bp - &bq);
                proptest::prop_assert_eq!((p * q).to_big(), &bp * &bq);
                proptest::prop_assert_eq!(p.cmp(q), bp.cmp(&bq));
                proptest::prop_assert_eq!(p == q, bp == bq);
                proptest::prop_assert_eq!(p.floor_i64(), bp.floor().to_integer().to_i64());
                for digits in [0, 2, 12] {
                    let rounded = p.round_half_even(digits);
                    proptest::prop_assert_eq!(rounded.as_rational().to_big(), round_big(&bp, digits));
                }
            }
        }
    }
}
