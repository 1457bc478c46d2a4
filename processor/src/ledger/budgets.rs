//! Budgets (DESIGN §4, §11): a tenant's monthly money and GPU-hour budgets
//! per pool, against month-to-date spend priced by the shared billing
//! module. A spent budget denies admissions (whatever the enforcement
//! setting); alerts go out once per threshold per month.
//!
//! Pricing a tenant's month costs the month's segments, and alerts are
//! checked after every event, so each priced standing also says until when
//! the spend cannot reach the next line: while the tenant's billing facts
//! stay as they are, spend grows no faster than its running GE and
//! reservation windows at the dearest rate of any book, with overhead.
//! Until then, or until an event changes those facts, the month is not
//! priced again: the alerts and denials are the same, only cheaper.

use std::collections::BTreeMap;

use gpuledger_schemas::billing::{Facts, MONEY_DIGITS, Period, Segment, month_to_date};
use gpuledger_schemas::events::{BudgetKind, TenantPolicy};
use gpuledger_schemas::{Decimal, Event, EventBody, Rational, Timestamp};

use super::decide::Decisions;
use super::{Ge, Ledger, Pool};

/// (pool, tenant) → the instant before which its month-to-date figures
/// provably stay below its next budget line.
pub(crate) type Watches = BTreeMap<(String, String), Timestamp>;

/// Alert thresholds, in percent of a budget.
pub(crate) const THRESHOLDS: [i32; 3] = [50, 80, 100];

/// What one budget stands at.
struct Standing {
    kind: BudgetKind,
    used: Rational,
    budget: Decimal,
}

fn has_budget(policy: &TenantPolicy) -> bool {
    policy.monthly_budget.is_some() || policy.monthly_gpu_hours.is_some()
}

/// Month-to-date figures of every budget `policy` sets. A pricing error
/// (no book in force yet) leaves money budgets unchecked.
fn standings(billing: &Facts, policy: &TenantPolicy, now: Timestamp) -> Vec<Standing> {
    if !has_budget(policy) {
        return Vec::new();
    }
    let (spend, hours) = match month_to_date(billing, &policy.pool, &policy.tenant, now) {
        Ok(figures) => figures,
        Err(e) => {
            tracing::debug!(pool = %policy.pool, tenant = %policy.tenant, error = %e, "budget not priced");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    if let Some(budget) = &policy.monthly_budget {
        out.push(Standing {
            kind: BudgetKind::Money,
            used: spend,
            budget: budget.clone(),
        });
    }
    if let Some(budget) = &policy.monthly_gpu_hours {
        out.push(Standing {
            kind: BudgetKind::GpuHours,
            used: hours,
            budget: budget.clone(),
        });
    }
    out
}

/// Why `policy`'s tenant may not be admitted now, if a budget is spent.
/// `watched_until` is the tenant's watch, if any.
pub(crate) fn exhausted(
    billing: &Facts,
    policy: &TenantPolicy,
    now: Timestamp,
    watched_until: Option<Timestamp>,
) -> Option<String> {
    if watched_until.is_some_and(|until| now < until) {
        #[cfg(test)]
        assert!(
            standings(billing, policy, now)
                .iter()
                .all(|s| s.used < s.budget.to_rational()),
            "a watched budget was spent"
        );
        return None;
    }
    standings(billing, policy, now)
        .into_iter()
        .find(|s| s.used >= s.budget.to_rational())
        .map(|s| {
            format!(
                "budget_exhausted: {} month-to-date {} of {} in {}",
                s.kind,
                s.used.round_half_even(MONEY_DIGITS),
                s.budget,
                Period::containing(now)
            )
        })
}

/// Emits every threshold crossed and not yet alerted this month.
pub(crate) fn alerts(
    ledger: &mut Ledger,
    billing: &Facts,
    now: Timestamp,
    out: &mut Decisions<'_>,
) {
    let month = Period::containing(now).to_string();
    let budgeted: Vec<TenantPolicy> = ledger
        .pools
        .values()
        .flat_map(|p| p.policies.values())
        .filter(|p| has_budget(p))
        .cloned()
        .collect();
    for policy in budgeted {
        let key = (policy.pool.clone(), policy.tenant.clone());
        if ledger
            .budget_watch
            .get(&key)
            .is_some_and(|until| now < *until)
        {
            #[cfg(test)]
            for s in standings(billing, &policy, now) {
                let line = next_line(ledger, &policy, &s, &month);
                assert!(
                    line.is_none_or(|l| s.used < l),
                    "a watched budget crossed a line"
                );
            }
            continue;
        }
        let figures = standings(billing, &policy, now);
        for standing in &figures {
            for pct in THRESHOLDS {
                let line = standing.budget.to_rational()
                    * Rational::new(pct.into(), 100).unwrap_or_default();
                if standing.used < line {
                    break;
                }
                let key = (
                    policy.pool.clone(),
                    policy.tenant.clone(),
                    month.clone(),
                    standing.kind.to_string(),
                    pct,
                );
                if ledger.alerted.insert(key) {
                    out.budget_alert(
                        &policy.pool,
                        &policy.tenant,
                        standing.kind,
                        pct,
                        standing.used.round_half_even(MONEY_DIGITS),
                        standing.budget.clone(),
                        &month,
                    );
                }
            }
        }
        let until = ledger
            .pools
            .get(&policy.pool)
            .and_then(|pool| safe_until(ledger, pool, billing, &policy, &figures, &month, now));
        match until {
            Some(until) => ledger.budget_watch.insert(key, until),
            None => ledger.budget_watch.remove(&key),
        };
    }
}

/// The lowest threshold of `standing`'s budget not yet alerted this month.
fn next_line(
    ledger: &Ledger,
    policy: &TenantPolicy,
    standing: &Standing,
    month: &str,
) -> Option<Rational> {
    THRESHOLDS
        .into_iter()
        .find(|pct| {
            !ledger.alerted.contains(&(
                policy.pool.clone(),
                policy.tenant.clone(),
                month.to_owned(),
                standing.kind.to_string(),
                *pct,
            ))
        })
        .map(|pct| {
            standing.budget.to_rational() * Rational::new(pct.into(), 100).unwrap_or_default()
        })
}

/// Until when `policy`'s tenant stays below every next line, as long as
/// its billing facts do not change; `None` where that cannot be bounded
/// (a budget unpriced, or every line already reached).
fn safe_until(
    ledger: &Ledger,
    pool: &Pool,
    billing: &Facts,
    policy: &TenantPolicy,
    figures: &[Standing],
    month: &str,
    now: Timestamp,
) -> Option<Timestamp> {
    let wanted = usize::from(policy.monthly_budget.is_some())
        + usize::from(policy.monthly_gpu_hours.is_some());
    if figures.len() != wanted {
        return None;
    }
    let tenant = policy.tenant.as_str();
    // GE that accrues with time alone: running attempts, and reservation
    // windows not yet over (unused reserved GE is charged as time passes).
    let running: Ge = pool
        .attempts
        .values()
        .filter(|a| a.tenant == tenant)
        .filter_map(|a| a.segment.as_ref().map(|s| s.ge.clone()))
        .sum();
    let windows: Ge = pool
        .reservations
        .values()
        .filter(|r| r.tenant == tenant && r.confirmed && r.effective_end() > now)
        .map(|r| r.ge.clone())
        .sum();
    let hour = Rational::from_integer(3_600_000_000);
    // A month change forgets every watch anyway.
    let mut until = Period::containing(now).end();
    for standing in figures {
        let line = next_line(ledger, policy, standing, month)?;
        let (room, per_hour) = match standing.kind {
            BudgetKind::GpuHours => (line - standing.used.clone(), running.as_rational().clone()),
            BudgetKind::Money => {
                let (rate, overhead) = dearest(billing, &policy.pool);
                let markup = Rational::from_integer(1) + overhead;
                // Each rounded line and the overhead may sit up to half a
                // cent either way of its exact amount.
                let margin = Rational::new(10, 10_i64.pow(MONEY_DIGITS)).unwrap_or_default()
                    * markup.clone();
                (
                    line - standing.used.clone() - margin,
                    (running.clone() + windows.clone()).as_rational().clone() * rate * markup,
                )
            }
        };
        if room.is_zero() || room.is_negative() {
            return None;
        }
        if per_hour.is_zero() {
            continue;
        }
        let micros = (room * hour.clone()).checked_div(&per_hour)?.floor_i64()?;
        until = until.min(now.plus_micros(micros.min(i64::MAX - now.as_micros())));
    }
    Some(until)
}

/// The dearest per-GPU-hour rate of any book for `pool`, any model and any
/// kind, and the largest overhead fraction (never below zero).
fn dearest(billing: &Facts, pool: &str) -> (Rational, Rational) {
    let mut rate = Rational::zero();
    let mut overhead = Rational::zero();
    for book in billing.books().books() {
        if book.pool.as_deref().is_some_and(|p| p != pool) {
            continue;
        }
        for r in &book.rates {
            for each in [
                &r.reserved_per_gpu_hour,
                &r.quota_per_gpu_hour,
                &r.on_demand_per_gpu_hour,
            ] {
                rate = rate.max(each.to_rational());
            }
        }
        let pct = book
            .overhead_pct
            .to_rational()
            .checked_div(&Rational::from_integer(100))
            .unwrap_or_default();
        overhead = overhead.max(pct);
    }
    (rate, overhead)
}

/// Forgets the watch of every (pool, tenant) whose billing facts `events`
/// or `segments` change: the facts the billing module takes in.
pub(crate) fn unwatch<'e>(
    watches: &mut Watches,
    events: impl Iterator<Item = &'e Event>,
    segments: &[Segment],
) {
    if watches.is_empty() {
        return;
    }
    for e in events {
        match &e.body {
            EventBody::PriceBook(b) => match &b.pool {
                Some(pool) => watches.retain(|(p, _), _| p != pool),
                None => watches.clear(),
            },
            EventBody::NodeInventory(i) => watches.retain(|(p, _), _| *p != i.pool),
            EventBody::DeviceHealth(h) => watches.retain(|(p, _), _| *p != h.pool),
            EventBody::UsageRecord(u) => {
                watches.remove(&(u.pool.clone(), u.tenant.clone()));
            }
            EventBody::TenantPolicy(t) => {
                watches.remove(&(t.pool.clone(), t.tenant.clone()));
            }
            EventBody::ReservationDecision(d) => {
                watches.remove(&(d.pool.clone(), d.tenant.clone()));
            }
            _ => {}
        }
    }
    for s in segments {
        watches.remove(&(s.pool.clone(), s.tenant.clone()));
    }
}
