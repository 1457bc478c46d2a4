//! A statement period: one calendar month, UTC.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, NaiveDate, TimeZone, Utc};

use crate::time::Timestamp;

/// A calendar month, UTC (`2026-11`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    year: i32,
    month: u32,
}

impl Period {
    /// The month `year`-`month`, or `None` for a month that does not exist.
    pub fn new(year: i32, month: u32) -> Option<Self> {
        NaiveDate::from_ymd_opt(year, month, 1).map(|_| Self { year, month })
    }

    /// The month holding instant `at`.
    pub fn containing(at: Timestamp) -> Self {
        let date = at.to_datetime().map(|d| d.date_naive()).unwrap_or_default();
        Self {
            year: date.year(),
            month: date.month(),
        }
    }

    /// Its first instant.
    pub fn start(self) -> Timestamp {
        month_start(self.year, self.month)
    }

    /// The first instant after it.
    pub fn end(self) -> Timestamp {
        self.next().start()
    }

    /// The month after.
    pub fn next(self) -> Self {
        if self.month == 12 {
            Self {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Self {
                year: self.year,
                month: self.month + 1,
            }
        }
    }
}

fn month_start(year: i32, month: u32) -> Timestamp {
    let start = Utc
        .with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .map_or(0, |d| d.timestamp_micros());
    Timestamp::from_micros(start)
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

impl FromStr for Period {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let err = || format!("period {s:?} is not a month written YYYY-MM");
        let (year, month) = s.split_once('-').ok_or_else(err)?;
        if year.len() != 4 || month.len() != 2 {
            return Err(err());
        }
        let year: i32 = year.parse().map_err(|_| err())?;
        let month: u32 = month.parse().map_err(|_| err())?;
        Period::new(year, month).ok_or_else(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_a_calendar_month() {
        let p: Period = "2026-12".parse().unwrap();
        assert_eq!(p.to_string(), "2026-12");
        assert_eq!(p.start().to_string(), "2026-12-01T00:00:00Z");
        assert_eq!(p.end().to_string(), "2027-01-01T00:00:00Z");
        assert_eq!(Period::containing(p.end().plus_micros(-1)), p);
        for bad in ["2026-13", "2026-1", "26-11", "2026/11", ""] {
            let e = bad.parse::<Period>().unwrap_err();
            assert!(e.contains("YYYY-MM"), "{e}");
        }
    }
}
