//! What the samples add to a statement (DESIGN §5): the `energy` line and
//! the `idle_allocated` breakdown.
//!
//! A sample covers [time − interval, time). Energy is the delta of the
//! GPU's counter over that interval, of which a MIG instance's share is
//! `slices/max_slices`; it goes to whoever held the device at the end of
//! the interval, priced by the book in force then (unheld shares are the
//! platform's). A stretch counts as idle when its SM activity was known
//! and below [`IDLE_BELOW_PCT`] %; `idle_allocated` is the compute of that
//! time, at the holding segment's rate. Missing or unknown samples are
//! never idle.
//!
//! Samples arrive one by one ([`EnergyUse`], [`IdleStretch`]) or summed
//! per device and hour ([`DeviceHour`](super::DeviceHour)) where [`Holders::settles_whole`]
//! showed that one holder and one book cover the hour's whole span. Either
//! way, millijoules and microseconds are summed as integers per tenant,
//! book and share first, and turned into money once per group.

use std::collections::{BTreeMap, HashMap};

use crate::events::PriceBook;
use crate::exact::Rational;
use crate::pricing::{StatementLine, energy_amount, ge_amount};
use crate::time::Timestamp;

use super::charges::{Charge, Charged};
use super::facts::{Facts, PoolFacts, Segment};
use super::pool::{PoolFigures, Scope};
use super::{BillingError, Period, add};

/// SM activity below this percentage is idle (DESIGN §5).
pub const IDLE_BELOW_PCT: f32 = 5.0;

/// Millijoules in one kWh.
const MJ_PER_KWH: i64 = 3_600_000_000;

/// One device's segments in start order, with the latest end so far at
/// each position (an open segment never ends), so the segments touching
/// an instant or a span are found by binary search.
#[derive(Debug, Default)]
struct DeviceSegments<'a> {
    segments: Vec<&'a Segment>,
    latest_end: Vec<Option<Timestamp>>,
}

/// A pool's segments by the devices they name: who held a device when.
#[derive(Debug)]
pub struct Holders<'a> {
    facts: &'a Facts,
    pool: &'a str,
    by_device: HashMap<&'a str, DeviceSegments<'a>>,
}

impl Facts {
    /// Who held which of `pool`'s devices when.
    pub fn holders<'a>(&'a self, pool: &'a str) -> Holders<'a> {
        let mut by_device: HashMap<&str, DeviceSegments<'_>> = HashMap::new();
        if let Some(p) = self.pool(pool) {
            for s in p.segments.values() {
                for d in s.devices.iter() {
                    by_device.entry(&**d).or_default().segments.push(s);
                }
            }
        }
        for device in by_device.values_mut() {
            device.segments.sort_by_key(|s| s.start);
            let mut latest: Option<Option<Timestamp>> = None;
            for s in &device.segments {
                let end = match latest {
                    // `None` inside is "still open": later than any instant.
                    Some(None) => None,
                    Some(Some(e)) => s.end.map(|x| x.max(e)),
                    None => s.end,
                };
                latest = Some(end);
                device.latest_end.push(end);
            }
        }
        Holders {
            facts: self,
            pool,
            by_device,
        }
    }
}

impl<'a> Holders<'a> {
    /// The segments on `device` overlapping [from, to), an open one
    /// running to `open_to`; latest start first.
    fn overlapping(
        &self,
        device: &str,
        from: Timestamp,
        to: Timestamp,
        open_to: Timestamp,
    ) -> impl Iterator<Item = &'a Segment> + '_ {
        let found = self.by_device.get(device);
        let upto = found.map_or(0, |d| d.segments.partition_point(|s| s.start < to));
        (0..upto)
            .rev()
            .map_while(move |i| {
                let d = found?;
                // Nothing at or before `i` ends after `from`: stop.
                d.latest_end[i]
                    .is_none_or(|e| e > from)
                    .then(|| d.segments[i])
            })
            .filter(move |s| s.end.unwrap_or(open_to) > from)
    }

    /// The segment holding `device` at `at` (an open one up to `open_to`).
    fn at(&self, device: &str, at: Timestamp, open_to: Timestamp) -> Option<&'a Segment> {
        let mut found: Option<&Segment> = None;
        for s in self.overlapping(device, at, at.plus_micros(1), open_to) {
            // The earliest-starting holder wins, as in ledger order.
            found = Some(s);
        }
        found
    }

    /// Whether a device's samples over [from, to) can be priced summed
    /// ([`DeviceHour`](super::DeviceHour)): the span lies inside one month
    /// and before `now`, the book in force does not change inside it, and
    /// either no segment on the device overlaps it, or the segments that do
    /// cover it without a gap and are priced alike (one tenant, kind,
    /// model and GE: a job's attempts one after the other). Otherwise each
    /// sample must be priced on its own.
    pub fn settles_whole(
        &self,
        device: &str,
        from: Timestamp,
        to: Timestamp,
        now: Timestamp,
    ) -> bool {
        if to <= from || to > now {
            return false;
        }
        if Period::containing(from) != Period::containing(to.plus_micros(-1)) {
            return false;
        }
        if !self
            .facts
            .books()
            .change_points(self.pool, from, to)
            .is_empty()
        {
            return false;
        }
        let mut overlapping: Vec<&Segment> = self.overlapping(device, from, to, now).collect();
        let Some(first) = overlapping.first().copied() else {
            return true;
        };
        let alike = |s: &&Segment| {
            s.tenant == first.tenant
                && s.kind == first.kind
                && s.model == first.model
                && (s.slices, s.max_slices) == (first.slices, first.max_slices)
        };
        if !overlapping.iter().all(alike) {
            return false;
        }
        // Covered from `from` to `to` without a gap.
        overlapping.sort_by_key(|s| s.start);
        let mut covered = from;
        for s in overlapping {
            if s.start > covered {
                return false;
            }
            covered = covered.max(s.end.unwrap_or(now));
        }
        covered >= to
    }
}

/// Sums per group, kept as integers until the group is priced.
#[derive(Debug, Default)]
struct Groups<'a, K: Ord> {
    books: Vec<&'a PriceBook>,
    sums: BTreeMap<K, i128>,
}

impl<'a, K: Ord> Groups<'a, K> {
    /// The index of `book` among those seen.
    fn book(&mut self, book: &'a PriceBook) -> usize {
        match self.books.iter().position(|b| std::ptr::eq(*b, book)) {
            Some(i) => i,
            None => {
                self.books.push(book);
                self.books.len() - 1
            }
        }
    }

    fn add(&mut self, key: K, amount: i64) {
        *self.sums.entry(key).or_default() += i128::from(amount);
    }
}

/// `(numerator, denominator)` of a share, as a rational.
fn share(slices: i64, max_slices: i64) -> Rational {
    Rational::new(slices, max_slices).unwrap_or_default()
}

fn from_i128(value: i128) -> Rational {
    Rational::from_i128(value)
}

/// The `energy` line of every tenant in pool `name` over [from, to), and
/// its charges (one per tenant and pool) for a statement.
pub(super) fn energy(
    facts: &Facts,
    name: &str,
    from: Timestamp,
    to: Timestamp,
    scope: Scope<'_>,
    out: &mut PoolFigures,
) {
    let Some(pool) = facts.pool(name) else {
        return;
    };
    if pool.telemetry.energy.is_empty() && pool.telemetry.hours.is_empty() {
        return;
    }
    let holders = facts.holders(name);
    // Millijoules per (tenant, book, share); first and last instant per tenant.
    let mut groups: Groups<'_, (&str, usize, i64, i64)> = Groups::default();
    let mut spans: BTreeMap<&str, (Timestamp, Timestamp)> = BTreeMap::new();
    let uses = pool
        .telemetry
        .energy
        .iter()
        .map(|e| {
            let at = e.at.plus_micros(-1);
            (
                &e.device_uuid,
                at,
                (at, e.at),
                e.delta_mj,
                (e.slices, e.max_slices),
            )
        })
        .chain(pool.telemetry.hours.iter().map(|h| {
            let first = h.first_sample.plus_micros(-1);
            let span = (first, h.last_sample);
            (
                &h.device_uuid,
                h.from,
                span,
                h.energy_mj,
                (h.slices, h.max_slices),
            )
        }));
    for (device, at, (first, last), delta_mj, (slices, max_slices)) in uses {
        if at < from || at >= to || delta_mj <= 0 {
            continue;
        }
        let Some(segment) = holders.at(device, at, to) else {
            continue;
        };
        if !scope.covers(&segment.tenant) {
            continue;
        }
        let Some(book) = facts.books().in_force(name, at) else {
            continue;
        };
        let book = groups.book(book);
        groups.add((&*segment.tenant, book, slices, max_slices), delta_mj);
        let span = spans.entry(&*segment.tenant).or_insert((first, last));
        *span = (span.0.min(first), span.1.max(last));
    }
    // Per tenant: amount and kWh.
    let mut used: BTreeMap<&str, (Rational, Rational)> = BTreeMap::new();
    for ((tenant, book, slices, max_slices), mj) in &groups.sums {
        let share = share(*slices, *max_slices);
        let amount = energy_amount(*mj, groups.books[*book]) * share.clone();
        let kwh = from_i128(*mj)
            .checked_div(&Rational::from_integer(MJ_PER_KWH))
            .unwrap_or_default()
            * share;
        let entry = used.entry(tenant).or_default();
        entry.0 = entry.0.clone() + amount;
        entry.1 = entry.1.clone() + kwh;
    }
    for (tenant, (amount, kwh)) in used {
        if amount.is_zero() {
            continue;
        }
        let f = out.tenants.entry(tenant.to_owned()).or_default();
        add(&mut f.lines, StatementLine::Energy, amount.clone());
        if scope == Scope::Pool {
            let span = spans.get(tenant).copied().unwrap_or((from, to));
            f.charges.push(Charge::new(
                tenant,
                name,
                StatementLine::Energy,
                Charged::Energy,
                span,
                Some(kwh),
                amount,
            ));
        }
    }
}

/// Every tenant's compute in pool `name` over [from, to) while its
/// devices were idle; `None` when the pool has no telemetry in that span
/// (then there is no figure at all, not a zero).
pub(super) fn idle_allocated(
    facts: &Facts,
    name: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Option<BTreeMap<String, Rational>>, BillingError> {
    let Some(pool) = facts.pool(name) else {
        return Ok(None);
    };
    if !has_telemetry(pool, from, to) {
        return Ok(None);
    }
    let holders = facts.holders(name);
    // Microseconds per (segment, book, share of the stretch).
    let mut groups: Groups<'_, (*const Segment, usize, i64, i64)> = Groups::default();
    let mut segments: HashMap<*const Segment, &Segment> = HashMap::new();
    let stretches = pool
        .telemetry
        .idle
        .iter()
        .map(|s| {
            let whole = s.to.as_micros() - s.from.as_micros();
            (
                &s.device_uuid,
                s.from,
                s.to,
                whole,
                (s.slices, s.max_slices),
            )
        })
        .chain(pool.telemetry.hours.iter().map(|h| {
            (
                &h.device_uuid,
                h.from,
                h.to,
                h.idle_micros,
                (h.slices, h.max_slices),
            )
        }));
    for (device, stretch_from, stretch_to, idle_micros, (slices, max_slices)) in stretches {
        if idle_micros <= 0 {
            continue;
        }
        let whole = stretch_to.as_micros() - stretch_from.as_micros();
        for s in holders.overlapping(device, stretch_from.max(from), stretch_to.min(to), to) {
            let a = stretch_from.max(s.start).max(from);
            let b = stretch_to.min(s.end.unwrap_or(to)).min(to);
            if b <= a {
                continue;
            }
            // A single sample is idle throughout; a device-hour is only
            // given where one segment covers it whole, so `b - a == whole`.
            let micros = if idle_micros == whole {
                b.as_micros() - a.as_micros()
            } else {
                idle_micros
            };
            let book = facts.books().require(name, a)?;
            let book = groups.book(book);
            groups.add((std::ptr::from_ref(s), book, slices, max_slices), micros);
            segments.insert(std::ptr::from_ref(s), s);
        }
    }
    let mut out: BTreeMap<String, Rational> = BTreeMap::new();
    for ((segment, book, slices, max_slices), micros) in &groups.sums {
        let s = segments[segment];
        let ge = share(*slices, *max_slices).min(s.ge());
        let rate = crate::pricing::rate_in(
            groups.books[*book],
            name,
            &s.model,
            s.kind.rate_kind(),
            s.start,
        )?;
        let amount = ge_amount_i128(&ge, *micros, &rate);
        let entry = out.entry(s.tenant.to_string()).or_default();
        *entry = entry.clone() + amount;
    }
    Ok(Some(out))
}

/// Whether the pool has samples over some of [from, to).
fn has_telemetry(pool: &PoolFacts, from: Timestamp, to: Timestamp) -> bool {
    matches!(pool.telemetry.span, Some((first, last)) if first < to && last >= from)
}

/// [`ge_amount`] over a sum of microseconds that may not fit an `i64`.
fn ge_amount_i128(ge: &Rational, micros: i128, rate: &Rational) -> Rational {
    match i64::try_from(micros) {
        Ok(m) => ge_amount(ge, m, rate),
        Err(_) => ge_amount(ge, 1, rate) * from_i128(micros),
    }
}
