//! Exact numbers: [`Rational`] for arithmetic that must not lose a cent, and
//! [`Decimal`] for the plain decimal strings the contract carries (rates,
//! quantities, amounts).
//!
//! GE of 1/7 makes amounts no finite decimal holds, so money is carried as a
//! rational until a statement line is rounded, half-to-even, once.

use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::str::FromStr;

use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::BigRational;
use num_traits::{One, Signed, Zero};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string is not an exact number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not {expected}")]
pub struct ParseNumberError {
    input: String,
    expected: &'static str,
}

/// An exact rational number. Displays as `n` or `n/d` in lowest terms.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rational(BigRational);

impl Rational {
    /// Zero.
    pub fn zero() -> Self {
        Self(BigRational::zero())
    }

    /// `numer / denom`. Panics never: a zero denominator gives `None`.
    pub fn new(numer: i64, denom: i64) -> Option<Self> {
        (denom != 0).then(|| Self(BigRational::new(numer.into(), denom.into())))
    }

    /// A whole number.
    pub fn from_integer(n: i64) -> Self {
        Self(BigRational::from_integer(n.into()))
    }

    /// A whole number too large for an `i64`, such as a sum of them.
    pub fn from_i128(n: i128) -> Self {
        Self(BigRational::from_integer(n.into()))
    }

    /// True when exactly zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// True when below zero.
    pub fn is_negative(&self) -> bool {
        self.0.is_negative()
    }

    /// The larger of the two.
    pub fn max(self, other: Self) -> Self {
        if other.0 > self.0 { other } else { self }
    }

    /// The smaller of the two.
    pub fn min(self, other: Self) -> Self {
        if other.0 < self.0 { other } else { self }
    }

    /// The value as `(numerator, denominator)` in lowest terms, when both
    /// fit in an `i64`.
    pub fn to_i64_pair(&self) -> Option<(i64, i64)> {
        use num_traits::ToPrimitive;
        Some((self.0.numer().to_i64()?, self.0.denom().to_i64()?))
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
        use num_traits::ToPrimitive;
        self.0.floor().to_integer().to_i64()
    }

    /// `self / other`, or `None` when `other` is zero.
    pub fn checked_div(&self, other: &Self) -> Option<Self> {
        (!other.0.is_zero()).then(|| Self(&self.0 / &other.0))
    }

    /// Rounds to `digits` fractional digits, half to even, on the signed value
    /// (−2.5 → −2, −3.5 → −4).
    pub fn round_half_even(&self, digits: u32) -> Decimal {
        let scale = BigInt::from(10u32).pow(digits);
        let scaled = &self.0 * BigRational::from_integer(scale.clone());
        let (q, r) = scaled.numer().div_mod_floor(scaled.denom());
        // q = floor(scaled); r/denom is the fractional part in [0, 1).
        let twice = r * 2u32;
        let denom = scaled.denom();
        let rounded = match twice.cmp(denom) {
            std::cmp::Ordering::Less => q,
            std::cmp::Ordering::Greater => q + 1u32,
            std::cmp::Ordering::Equal if q.is_even() => q,
            std::cmp::Ordering::Equal => q + 1u32,
        };
        Decimal {
            value: Self(BigRational::new(rounded, scale)),
            scale: digits,
        }
    }

    /// Rounds each of `parts` to `digits` so that the rounded parts add up
    /// exactly to the half-even rounding of their sum: every part is
    /// rounded down, and the units still missing go one each to the parts
    /// with the largest remainders (the earlier part on a tie).
    pub fn apportion(parts: &[Rational], digits: u32) -> Vec<Decimal> {
        let scale = BigInt::from(10u32).pow(digits);
        let scaled: Vec<BigRational> = parts
            .iter()
            .map(|p| &p.0 * BigRational::from_integer(scale.clone()))
            .collect();
        let floors: Vec<BigInt> = scaled.iter().map(|s| s.floor().to_integer()).collect();
        let total: Rational = parts.iter().cloned().sum();
        let target =
            total.round_half_even(digits).value.0 * BigRational::from_integer(scale.clone());
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
            .map(|u| Decimal {
                value: Self(BigRational::new(u, scale.clone())),
                scale: digits,
            })
            .collect()
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
                Ok(Self(BigRational::new(n, d)))
            }
            None => Decimal::from_str(s).map(Rational::from).map_err(|_| err()),
        }
    }
}

impl fmt::Display for Rational {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.denom().is_one() {
            write!(f, "{}", self.0.numer())
        } else {
            write!(f, "{}/{}", self.0.numer(), self.0.denom())
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
    ($($trait:ident $method:ident),*) => {$(
        impl $trait for Rational {
            type Output = Rational;
            fn $method(self, rhs: Rational) -> Rational { Rational(self.0.$method(rhs.0)) }
        }
        impl $trait<&Rational> for &Rational {
            type Output = Rational;
            fn $method(self, rhs: &Rational) -> Rational { Rational((&self.0).$method(&rhs.0)) }
        }
    )*};
}
rational_ops!(Add add, Sub sub, Mul mul);

impl Div for Rational {
    type Output = Option<Rational>;
    fn div(self, rhs: Rational) -> Option<Rational> {
        self.checked_div(&rhs)
    }
}

impl Neg for Rational {
    type Output = Rational;
    fn neg(self) -> Rational {
        Rational(-self.0)
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

/// An exact decimal number written as a plain decimal (`"2.50"`, `"-0.125"`,
/// `"3"`). Keeps the scale it was written with, so `"2.50"` prints back as
/// `"2.50"`; equality and order are by value.
#[derive(Clone)]
pub struct Decimal {
    value: Rational,
    scale: u32,
}

impl Decimal {
    /// Zero with no fractional digits.
    pub fn zero() -> Self {
        Self {
            value: Rational::zero(),
            scale: 0,
        }
    }

    /// The exact value.
    pub fn to_rational(&self) -> Rational {
        self.value.clone()
    }

    /// The exact value, borrowed.
    pub fn as_rational(&self) -> &Rational {
        &self.value
    }

    /// True when below zero.
    pub fn is_negative(&self) -> bool {
        self.value.is_negative()
    }

    /// Number of fractional digits it prints with.
    pub fn scale(&self) -> u32 {
        self.scale
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}
impl Eq for Decimal {}
impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}

impl From<Decimal> for Rational {
    fn from(d: Decimal) -> Self {
        d.value
    }
}

impl From<i64> for Decimal {
    fn from(n: i64) -> Self {
        Self {
            value: Rational::from_integer(n),
            scale: 0,
        }
    }
}

impl FromStr for Decimal {
    type Err = ParseNumberError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseNumberError {
            input: s.to_owned(),
            expected: "a plain decimal number",
        };
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if (int_part.is_empty() && frac_part.is_empty())
            || !all_digits(int_part)
            || !all_digits(frac_part)
            || digits.ends_with('.')
        {
            return Err(err());
        }
        let scale = u32::try_from(frac_part.len()).map_err(|_| err())?;
        let unscaled = BigInt::from_str(&format!("{int_part}{frac_part}")).map_err(|_| err())?;
        let unscaled = if negative { -unscaled } else { unscaled };
        Ok(Self {
            value: Rational(BigRational::new(unscaled, BigInt::from(10u32).pow(scale))),
            scale,
        })
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.value.0;
        let scaled = r * BigRational::from_integer(BigInt::from(10u32).pow(self.scale));
        // A Decimal is only ever built from a finite decimal of `scale` digits,
        // so `scaled` is an integer.
        let unscaled = scaled.to_integer();
        let sign = if unscaled.is_negative() { "-" } else { "" };
        let digits = unscaled.abs().to_string();
        if self.scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let scale = self.scale as usize;
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int_part, frac_part) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int_part}.{frac_part}")
    }
}

impl fmt::Debug for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(NumberText("a decimal number or decimal string"))?;
        Decimal::from_str(&text).map_err(serde::de::Error::custom)
    }
}

/// Accepts a JSON string or number and hands back its text. A JSON number
/// with a fraction arrives as `f64`; its shortest round-trip form is the
/// decimal the writer meant (`0.1` prints as `"0.1"`).
struct NumberText(&'static str);

impl serde::de::Visitor<'_> for NumberText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        if !v.is_finite() {
            return Err(E::custom(format!("{v} is not a finite number")));
        }
        // Rust prints f64 without an exponent, as the shortest decimal that
        // reads back to the same f64: `1e2` → "100", `0.1` → "0.1".
        Ok(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Rational {
        s.parse().unwrap()
    }

    #[test]
    fn apportioned_parts_add_up_to_the_rounded_sum() {
        let texts = |parts: &[&str]| -> Vec<String> {
            let parts: Vec<Rational> = parts.iter().map(|p| r(p)).collect();
            Rational::apportion(&parts, 2)
                .iter()
                .map(|d| d.to_string())
                .collect()
        };
        // Rounded down, three sevenths are 0.42 each, three cents short of
        // round(9/7) = 1.29: each remainder takes one.
        assert_eq!(texts(&["3/7", "3/7", "3/7"]), ["0.43", "0.43", "0.43"]);
        assert_eq!(texts(&["1/3", "1/3", "1/3"]), ["0.34", "0.33", "0.33"]);
        assert_eq!(texts(&["0.005", "0.005"]), ["0.01", "0.00"]);
        assert_eq!(
            texts(&["-1/3", "-1/3", "-1/3"]),
            ["-0.33", "-0.33", "-0.34"]
        );
        assert_eq!(texts(&["2.5", "-0.004"]), ["2.50", "0.00"]);
        assert!(texts(&[]).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn apportioning_never_loses_a_cent(
            parts in proptest::collection::vec((-100_000i64..100_000, 1i64..1_000), 0..20),
        ) {
            let parts: Vec<Rational> = parts
                .iter()
                .map(|(n, d)| Rational::new(*n, *d).unwrap())
                .collect();
            let total: Rational = parts.iter().cloned().sum();
            let rounded = Rational::apportion(&parts, 2);
            let sum: Rational = rounded.iter().map(Decimal::to_rational).sum();
            proptest::prop_assert_eq!(sum, total.round_half_even(2).to_rational());
            for (part, got) in parts.iter().zip(&rounded) {
                // Each is within one cent of its exact amount.
                let off = (got.to_rational() - part.clone()).max(part.clone() - got.to_rational());
                proptest::prop_assert!(off < r("0.01"));
            }
        }
    }

    #[test]
    fn decimal_parse_and_print_keeps_scale() {
        for s in [
            "2.50",
            "0",
            "-0.125",
            "3",
            "0.05",
            "1234567890123456789012.000001",
        ] {
            assert_eq!(Decimal::from_str(s).unwrap().to_string(), s);
        }
        assert_eq!(Decimal::from_str("+1.5").unwrap().to_string(), "1.5");
        assert_eq!(Decimal::from_str(".5").unwrap().to_string(), "0.5");
        assert_eq!(
            Decimal::from_str("2.50").unwrap(),
            Decimal::from_str("2.5").unwrap()
        );
    }

    #[test]
    fn decimal_rejects_what_is_not_a_plain_decimal() {
        for s in [
            "", "-", ".", "1.", "1e3", "1.2.3", "abc", "NaN", " 1", "1,5", "--1",
        ] {
            assert!(Decimal::from_str(s).is_err(), "{s:?} parsed");
        }
    }

    #[test]
    fn rational_prints_in_lowest_terms() {
        assert_eq!(r("2/14").to_string(), "1/7");
        assert_eq!(r("14/7").to_string(), "2");
        assert_eq!(r("1.5").to_string(), "3/2");
        assert!("1/0".parse::<Rational>().is_err());
    }

    #[test]
    fn rounding_is_half_to_even_on_the_signed_value() {
        let cases = [
            ("0.125", "0.12"),
            ("0.135", "0.14"),
            ("0.1251", "0.13"),
            ("-0.125", "-0.12"),
            ("-0.135", "-0.14"),
            ("2.5", "2.50"),
            ("0", "0.00"),
            ("-0.001", "0.00"),
        ];
        for (input, want) in cases {
            assert_eq!(r(input).round_half_even(2).to_string(), want, "{input}");
        }
        // 1/7 of 4.90 = 0.7 exactly; 1/3 = 0.333… → 0.33; 2/3 → 0.67.
        assert_eq!(
            (r("4.90") * r("1/7")).round_half_even(2).to_string(),
            "0.70"
        );
        assert_eq!(r("1/3").round_half_even(2).to_string(), "0.33");
        assert_eq!(r("2/3").round_half_even(2).to_string(), "0.67");
        assert_eq!(r("-2/3").round_half_even(2).to_string(), "-0.67");
        assert_eq!(r("5/2").round_half_even(0).to_string(), "2");
        assert_eq!(r("7/2").round_half_even(0).to_string(), "4");
    }

    #[test]
    fn json_numbers_become_exact_decimals() {
        let d: Decimal = serde_json::from_str("0.1").unwrap();
        assert_eq!(d.to_string(), "0.1");
        let d: Decimal = serde_json::from_str("\"2.50\"").unwrap();
        assert_eq!(d.to_string(), "2.50");
        let d: Decimal = serde_json::from_str("7").unwrap();
        assert_eq!(d.to_string(), "7");
        assert_eq!(
            serde_json::from_str::<Decimal>("1e2").unwrap().to_string(),
            "100"
        );
        assert!(serde_json::from_str::<Decimal>("true").is_err());
    }
}
