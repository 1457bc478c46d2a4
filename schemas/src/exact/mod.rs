//! Exact numbers: [`Rational`] for arithmetic that must not lose a cent, and
//! [`Decimal`] for the plain decimal strings the contract carries (rates,
//! quantities, amounts).
//!
//! GE of 1/7 makes amounts no finite decimal holds, so money is carried as a
//! rational until a statement line is rounded, half-to-even, once.

mod rational;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use rational::Rational;

/// Why a string is not an exact number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not {expected}")]
pub struct ParseNumberError {
    input: String,
    expected: &'static str,
}

/// `10^digits`, when it fits an `i128` (up to 38 digits).
fn pow10(digits: u32) -> Option<i128> {
    10i128.checked_pow(digits)
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

    /// `value`, which some decimal of `scale` digits holds exactly.
    fn from_unscaled(value: Rational, scale: u32) -> Self {
        Self { value, scale }
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

/// The most digits a decimal's text may have: more than any amount or
/// quantity needs, and few enough that no input can make arithmetic slow.
pub const MAX_DIGITS: usize = 40;

impl FromStr for Decimal {
    type Err = ParseNumberError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_DIGITS && s.bytes().filter(u8::is_ascii_digit).count() > MAX_DIGITS {
            return Err(ParseNumberError {
                input: format!(
                    "{}… ({} characters)",
                    &s[..s.floor_char_boundary(12)],
                    s.len()
                ),
                expected: "a decimal of at most 40 digits",
            });
        }
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
        let value =
            Rational::from_unscaled_digits(&format!("{int_part}{frac_part}"), negative, scale)
                .ok_or_else(err)?;
        Ok(Self { value, scale })
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A Decimal is only ever built from a finite decimal of `scale`
        // digits, so its value times 10^scale is an integer.
        let (negative, digits) = self.value.scaled_digits(self.scale);
        let sign = if negative { "-" } else { "" };
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

/// Money and quantities are decimal strings (DESIGN §3): a JSON number is
/// refused, since a reader may already have rounded it to a float.
impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = d.deserialize_any(DecimalText)?;
        Decimal::from_str(&text).map_err(serde::de::Error::custom)
    }
}

/// Accepts a string only, naming the mistake when given a number.
struct DecimalText;

impl serde::de::Visitor<'_> for DecimalText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a decimal string such as \"2.50\"")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Err(E::custom(format!(
            "{v} is a JSON number; write decimals as strings, \"{v}\""
        )))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Err(E::custom(format!(
            "{v} is a JSON number; write decimals as strings, \"{v}\""
        )))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        Err(E::custom(format!(
            "{v} is a JSON number; write decimals as strings, \"{v}\""
        )))
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
    fn decimals_are_strings_of_at_most_forty_digits() {
        let d: Decimal = serde_json::from_str("\"2.50\"").unwrap();
        assert_eq!(d.to_string(), "2.50");
        for number in ["0.1", "7", "1e2", "true"] {
            let e = serde_json::from_str::<Decimal>(number).unwrap_err();
            assert!(
                number == "true" || e.to_string().contains("JSON number"),
                "{e}"
            );
        }
        let forty = "1".repeat(40);
        assert!(forty.parse::<Decimal>().is_ok());
        assert!(
            format!("-{}.{}", "1".repeat(20), "2".repeat(20))
                .parse::<Decimal>()
                .is_ok()
        );
        let e = "1".repeat(1_500_000).parse::<Decimal>().unwrap_err();
        assert!(e.to_string().contains("at most 40 digits"), "{e}");
        assert!(e.to_string().len() < 100, "{e}");
        assert!(format!("0.{}", "1".repeat(40)).parse::<Decimal>().is_err());
    }
}
