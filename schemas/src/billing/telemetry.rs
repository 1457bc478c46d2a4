//! What the samples add to a statement (DESIGN §5): the `energy` line and
//! the `idle_allocated` breakdown.
//!
//! A sample covers [time − interval, time). Energy is the delta of the
//! GPU's counter over that interval, of which a MIG instance's share is
//! `slices/max_slices`; it goes to whoever held the device at the end of
//! the interval, priced by the book in force then (unheld shares are the
//! platform's). A stretch counts as idle when its SM activity was known
//! and below 5 %; `idle_allocated` is the compute of that time, at the
//! holding segment's rate. Missing or unknown samples are never idle.

use std::collections::{BTreeMap, HashMap};

use crate::exact::Rational;
use crate::pricing::{StatementLine, energy_amount, ge_amount};
use crate::time::Timestamp;

use super::charges::{Charge, Charged};
use super::facts::{Facts, PoolFacts, Segment};
use super::pool::{PoolFigures, Scope};
use super::{BillingError, add};

/// Millijoules in one kWh.
const MJ_PER_KWH: i64 = 3_600_000_000;

/// A pool's segments by the devices they name.
fn by_device(pool: &PoolFacts) -> HashMap<&str, Vec<&Segment>> {
    let mut out: HashMap<&str, Vec<&Segment>> = HashMap::new();
    for s in pool.segments.values() {
        for d in &s.devices {
            out.entry(d.as_str()).or_default().push(s);
        }
    }
    out
}

/// The segment holding `device` at `at` (an open one up to `to`).
fn holder<'a>(
    holders: &HashMap<&str, Vec<&'a Segment>>,
    device: &str,
    at: Timestamp,
    to: Timestamp,
) -> Option<&'a Segment> {
    holders
        .get(device)?
        .iter()
        .copied()
        .find(|s| s.start <= at && at < s.end.unwrap_or(to))
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
    if pool.telemetry.energy.is_empty() {
        return;
    }
    let holders = by_device(pool);
    // Per tenant: amount, kWh, first and last instant charged.
    let mut used: BTreeMap<&str, (Rational, Rational, Timestamp, Timestamp)> = BTreeMap::new();
    for e in &pool.telemetry.energy {
        let at = e.at.plus_micros(-1);
        if at < from || at >= to || e.delta_mj <= 0 {
            continue;
        }
        let Some(segment) = holder(&holders, &e.device_uuid, at, to) else {
            continue;
        };
        if !scope.covers(&segment.tenant) {
            continue;
        }
        let Some(book) = facts.books().in_force(name, at) else {
            continue;
        };
        let share = Rational::new(e.slices, e.max_slices).unwrap_or_default();
        let amount = energy_amount(e.delta_mj, book) * share.clone();
        let kwh = Rational::new(e.delta_mj, MJ_PER_KWH).unwrap_or_default() * share;
        let entry = used
            .entry(segment.tenant.as_str())
            .or_insert_with(|| (Rational::zero(), Rational::zero(), at, at));
        entry.0 = entry.0.clone() + amount;
        entry.1 = entry.1.clone() + kwh;
        entry.2 = entry.2.min(at);
        entry.3 = entry.3.max(e.at);
    }
    for (tenant, (amount, kwh, first, last)) in used {
        if amount.is_zero() {
            continue;
        }
        let f = out.tenants.entry(tenant.to_owned()).or_default();
        add(&mut f.lines, StatementLine::Energy, amount.clone());
        if scope == Scope::Pool {
            f.charges.push(Charge::new(
                tenant,
                name,
                StatementLine::Energy,
                Charged::Energy,
                (first, last),
                Some(kwh),
                amount,
            ));
        }
    }
}

/// `tenant`'s compute in pool `name` over [from, to) while its devices
/// were idle; `None` when the pool has no telemetry in that span.
pub(super) fn idle_allocated(
    facts: &Facts,
    name: &str,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Option<Rational>, BillingError> {
    let Some(pool) = facts.pool(name) else {
        return Ok(None);
    };
    match pool.telemetry.span {
        Some((first, last)) if first < to && last >= from => {}
        _ => return Ok(None),
    }
    let holders = by_device(pool);
    let mut total = Rational::zero();
    for stretch in &pool.telemetry.idle {
        let Some(segments) = holders.get(stretch.device_uuid.as_str()) else {
            continue;
        };
        let share = Rational::new(stretch.slices, stretch.max_slices).unwrap_or_default();
        for s in segments.iter().filter(|s| s.tenant == tenant) {
            let a = stretch.from.max(s.start).max(from);
            let b = stretch.to.min(s.end.unwrap_or(to)).min(to);
            if b <= a {
                continue;
            }
            let ge = share.clone().min(s.ge());
            let rate = facts.books().rate(name, &s.model, s.kind.rate_kind(), a)?;
            total = total + ge_amount(&ge, b.as_micros() - a.as_micros(), &rate);
        }
    }
    Ok(Some(total))
}
