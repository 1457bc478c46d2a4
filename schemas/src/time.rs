//! Event time: microseconds since the Unix epoch, UTC.
//!
//! In Avro a [`Timestamp`] is a `long` with logical type `timestamp-micros`;
//! in JSON it is an RFC 3339 string (`"2026-11-03T08:00:00Z"`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant with microsecond precision.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// Microseconds in one second.
pub const MICROS_PER_SECOND: i64 = 1_000_000;

/// Microseconds in one hour.
pub const MICROS_PER_HOUR: i64 = 3600 * MICROS_PER_SECOND;

impl Timestamp {
    /// From microseconds since the epoch.
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// From whole seconds since the epoch.
    pub const fn from_secs(secs: i64) -> Self {
        Self(secs * MICROS_PER_SECOND)
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// The wall clock now. Only collectors and the processor's clock ticks
    /// call this; nothing in the ledger does.
    pub fn now() -> Self {
        Self(Utc::now().timestamp_micros())
    }

    /// As a chrono value, or `None` outside chrono's range.
    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_micros(self.0)
    }

    /// Days since 1970-01-01 (UTC) of this instant: equal for instants of
    /// the same UTC day, without formatting a date.
    pub const fn day(self) -> i64 {
        self.0.div_euclid(86_400_000_000)
    }

    /// The UTC day, `YYYY-MM-DD`.
    pub fn date_string(self) -> String {
        match self.to_datetime() {
            Some(dt) => dt.format("%Y-%m-%d").to_string(),
            None => "invalid-date".to_owned(),
        }
    }

    /// `self` plus some microseconds.
    pub const fn plus_micros(self, micros: i64) -> Self {
        Self(self.0.saturating_add(micros))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(dt) => f.write_str(&dt.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            None => write!(f, "@{}us", self.0),
        }
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not an RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 timestamp such as \"2026-11-03T08:00:00Z\"")]
pub struct ParseTimestampError(String);

impl FromStr for Timestamp {
    type Err = ParseTimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let dt = DateTime::parse_from_rfc3339(s).map_err(|_| ParseTimestampError(s.to_owned()))?;
        Ok(Self(dt.with_timezone(&Utc).timestamp_micros()))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::from_str(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t: Timestamp = "2026-11-03T08:00:00Z".parse().unwrap();
        assert_eq!(t.as_micros(), 1_793_692_800 * MICROS_PER_SECOND);
        assert_eq!(t.to_string(), "2026-11-03T08:00:00Z");
        assert_eq!(t.date_string(), "2026-11-03");
        assert_eq!(t.day(), 1_793_692_800 / 86_400);
        assert_eq!(Timestamp::from_micros(-1).day(), -1);
        let t: Timestamp = "2026-11-03T09:00:00.5+01:00".parse().unwrap();
        assert_eq!(t.to_string(), "2026-11-03T08:00:00.500Z");
        assert!("2026-11-03 08:00".parse::<Timestamp>().is_err());
    }
}
