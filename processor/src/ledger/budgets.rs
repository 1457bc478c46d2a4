//! Budgets (DESIGN §4, §11): a tenant's monthly money and GPU-hour budgets
//! per pool, against month-to-date spend priced by the shared billing
//! module. A spent budget denies admissions (whatever the enforcement
//! setting); alerts go out once per threshold per month.
//!
//! Pricing a tenant's month costs the month's segments, and alerts are
//! checked after every event, so each priced standing leaves a [`Watch`]:
//! how far the figure is from its next line, and a bound on how fast it
//! can grow — its running GE, each at the dearest rate any book gives its
//! kind of use, and its reservation windows at the dearest reserved rate,
//! with overhead (GPU hours: its running GE). A segment that opens later
//! adds its GE at its kind's rate to the bound and takes what it accrued
//! since its start off the room; a segment that closes takes the same
//! rate off again, and only slows the growth. Until
//! the room runs out, or an event changes the facts otherwise (books,
//! inventory, health, usage, policies, reservations, a new month), the
//! month is not priced again: the alerts and denials are the same, only
//! cheaper. The watch is a cache: with `LedgerConfig::budget_watch` off,
//! every budgeted tenant is priced after every event, and the unit tests
//! apply every scenario both ways and compare the outcomes.

use gpuledger_schemas::billing::{Facts, MONEY_DIGITS, Period, month_to_date};
use gpuledger_schemas::events::{BudgetKind, TenantPolicy};
use gpuledger_schemas::pricing::{RateKind, overhead_amount};
use gpuledger_schemas::{Decimal, Rational, Text, Timestamp};

use super::decide::Decisions;
use super::state::AlertKey;
use super::watches::{Headroom, KindRates, Watch, kind_index};
use super::{Ge, Pool, State};

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

/// Every policy that sets a budget, in every pool.
fn budgeted(state: &State) -> impl Iterator<Item = &TenantPolicy> {
    state
        .pools
        .values()
        .flat_map(|p| p.policies.values())
        .filter(|p| has_budget(p))
}

/// Month-to-date figures of every budget `policy` sets. A pricing error
/// (no book in force yet) leaves money budgets unchecked.
fn standings(billing: &Facts, policy: &TenantPolicy, now: Timestamp) -> Vec<Standing> {
    if !has_budget(policy) {
        return Vec::new();
    }
    let Ok((spend, hours)) = month_to_date(billing, &policy.pool, &policy.tenant, now) else {
        return Vec::new();
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
/// A watch still in force answers without pricing the month.
pub(crate) fn exhausted(
    billing: &Facts,
    policy: &TenantPolicy,
    now: Timestamp,
    watch: Option<&Watch>,
) -> Option<Text> {
    if let Some(w) = watch.filter(|w| now < w.until()) {
        return w.spent.clone();
    }
    spent(&standings(billing, policy, now), now)
}

/// The first budget spent among `figures`, priced at `at`, as a reason
/// (shared by every admission it denies while a watch holds it).
fn spent(figures: &[Standing], at: Timestamp) -> Option<Text> {
    figures
        .iter()
        .find(|s| s.used >= s.budget.to_rational())
        .map(|s| {
            format!(
                "budget_exhausted: {} month-to-date {} of {} in {} (as of {at})",
                s.kind,
                s.used.round_half_even(MONEY_DIGITS),
                s.budget,
                Period::containing(at)
            )
            .into()
        })
}

/// Emits every threshold crossed and not yet alerted this month. Only the
/// tenants whose watch ran out (or who have none) are priced again.
pub(crate) fn alerts(state: &mut State, billing: &Facts, now: Timestamp, out: &mut Decisions<'_>) {
    if state.budget_watch.quiet_at(now) {
        // Every budgeted tenant is watched past `now`.
        return;
    }
    price_due(state, billing, now, out);
    // Until when none will be due, as far as their watches say.
    let quiet = budgeted(state).try_fold(Timestamp::from_micros(i64::MAX), |quiet, p| {
        let watch = state.budget_watch.get(&p.pool, &p.tenant)?;
        Some(quiet.min(watch.until()))
    });
    state.budget_watch.set_quiet_until(quiet);
}

/// Prices again the budgeted tenants whose watch ran out (or who have
/// none): alerts for the thresholds crossed, and a new watch where the
/// ledger keeps them.
fn price_due(state: &mut State, billing: &Facts, now: Timestamp, out: &mut Decisions<'_>) {
    let due: Vec<TenantPolicy> = budgeted(state)
        .filter(|p| {
            state
                .budget_watch
                .get(&p.pool, &p.tenant)
                .is_none_or(|w| now >= w.until())
        })
        .cloned()
        .collect();
    if due.is_empty() {
        return;
    }
    let month = Period::containing(now).to_string();
    for policy in due {
        let figures = standings(billing, &policy, now);
        for standing in &figures {
            for pct in THRESHOLDS {
                if standing.used < threshold(standing, pct) {
                    break;
                }
                if state
                    .alerted
                    .insert(alert_key(&policy, standing, &month, pct))
                {
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
        if state.config.budget_watch {
            let watch = state
                .pools
                .get(&policy.pool)
                .and_then(|pool| watch_of(state, pool, billing, &policy, &figures, &month, now));
            state.budget_watch.set(&policy.pool, &policy.tenant, watch);
        }
    }
}

/// The alert of `standing`'s budget at `pct` percent in `month`.
fn alert_key(policy: &TenantPolicy, standing: &Standing, month: &str, pct: i32) -> AlertKey {
    AlertKey {
        pool: policy.pool.clone(),
        tenant: policy.tenant.clone(),
        month: month.to_owned(),
        kind: standing.kind,
        threshold: pct,
    }
}

/// The lowest threshold of `standing`'s budget not yet alerted this month.
fn next_line(
    state: &State,
    policy: &TenantPolicy,
    standing: &Standing,
    month: &str,
) -> Option<Rational> {
    THRESHOLDS
        .into_iter()
        .find(|pct| {
            !state
                .alerted
                .contains(&alert_key(policy, standing, month, *pct))
        })
        .map(|pct| threshold(standing, pct))
}

/// `pct` percent of `standing`'s budget.
fn threshold(standing: &Standing, pct: i32) -> Rational {
    standing.budget.to_rational() * Rational::new(pct.into(), 100).unwrap_or_default()
}

/// The watch of `policy`'s tenant just priced; `None` where its growth
/// cannot be bounded (a budget unpriced, or every line already reached).
fn watch_of(
    state: &State,
    pool: &Pool,
    billing: &Facts,
    policy: &TenantPolicy,
    figures: &[Standing],
    month: &str,
    now: Timestamp,
) -> Option<Watch> {
    let wanted = usize::from(policy.monthly_budget.is_some())
        + usize::from(policy.monthly_gpu_hours.is_some());
    if figures.len() != wanted {
        return None;
    }
    let tenant = policy.tenant.as_str();
    // GE that accrues with time alone: running attempts, by the rate their
    // kind is priced at, and reservation windows not yet over (unused
    // reserved GE is charged as time passes).
    let mut running_by_kind: KindRates<Ge> = Default::default();
    for segment in pool
        .live
        .attempts()
        .filter(|a| *a.tenant == *tenant)
        .filter_map(|a| a.segment.as_ref())
    {
        let running = &mut running_by_kind[kind_index(segment.kind.rate_kind())];
        *running = running.clone() + segment.ge.clone();
    }
    let running: Ge = running_by_kind.iter().cloned().sum();
    let on_failed: Ge = pool
        .live
        .attempts()
        .filter(|a| *a.tenant == *tenant)
        .filter(|a| a.devices.iter().any(|d| pool.inventory.may_be_failed(d)))
        .filter_map(|a| a.segment.as_ref().map(|s| s.ge.clone()))
        .sum();
    let windows: Ge = pool
        .reservations
        .values()
        .filter(|r| r.tenant == tenant && r.confirmed && r.effective_end() > now)
        .map(|r| r.ge.clone())
        .sum();
    let (rates, overhead) = dearest(billing, &policy.pool, &pool.inventory.shared_model());
    let markup = Rational::from_integer(1) + overhead;
    let money_rates = rates.map(|rate| rate * markup.clone());
    let dearest_money = money_rates.iter().max().cloned().unwrap_or_default();
    let hour_rates: KindRates<Rational> = std::array::from_fn(|_| Rational::from_integer(1));
    // Running use at its own kind's rate. Windows add the reserved rate:
    // unused reserved GE is charged at it, and used reserved GE, counted
    // among the running too, is not charged twice; so the bound is loose
    // by the reserved use, never short.
    let running_at = |rates: &KindRates<Rational>| -> Rational {
        running_by_kind
            .iter()
            .zip(rates)
            .map(|(ge, rate)| ge.to_rational() * rate.clone())
            .fold(Rational::zero(), |sum, amount| sum + amount)
    };
    // Each rounded line and the overhead may sit up to half a cent either
    // way of its exact amount.
    let margin = Rational::new(10, 10_i64.pow(MONEY_DIGITS)).unwrap_or_default() * markup.clone();
    let mut headrooms = Vec::new();
    for standing in figures {
        let budget = standing.budget.to_rational();
        let falling = standing.used >= budget;
        let (per_ge_hour, slack) = match standing.kind {
            BudgetKind::Money => (&money_rates, margin.clone()),
            BudgetKind::GpuHours => (&hour_rates, Rational::zero()),
        };
        let (room, per_hour) = if falling {
            // Only health credits on running use bring money down, and only
            // on failed devices (a health report forgets the watch), at the
            // dearest rate; hours never fall with time.
            let per_hour = match standing.kind {
                BudgetKind::Money => on_failed.to_rational() * dearest_money.clone(),
                BudgetKind::GpuHours => Rational::zero(),
            };
            (standing.used.clone() - budget - slack, per_hour)
        } else {
            // Up to the next line not yet alerted (the budget itself once
            // the alerts are all given and spend came back below it).
            let next = next_line(state, policy, standing, month).unwrap_or(budget);
            let per_hour = match standing.kind {
                BudgetKind::Money => {
                    let reserved = &per_ge_hour[kind_index(RateKind::Reserved)];
                    running_at(per_ge_hour) + windows.to_rational() * reserved.clone()
                }
                BudgetKind::GpuHours => running.to_rational(),
            };
            (next - standing.used.clone() - slack, per_hour)
        };
        headrooms.push(Headroom::new(&room, per_ge_hour, &per_hour, falling));
    }
    // A month change forgets every watch anyway; a book taking over
    // changes the rates and the overhead on everything so far.
    let month_end = Period::containing(now).end();
    let limit = billing
        .books()
        .change_points(&policy.pool, now, month_end)
        .first()
        .copied()
        .unwrap_or(month_end);
    Watch::new(now, limit, headrooms, spent(figures, now))
}

/// For each kind of rate, the dearest per-GPU-hour rate any book for
/// `pool` gives `model`, the pool's one GPU model (any model while the pool
/// has none), as a segment may have started under an earlier book; and the
/// largest overhead fraction (never below zero). A book with no rate for
/// the model cannot price its use at all: the month then fails to price,
/// and its budgets go unchecked, with a watch or without.
fn dearest(billing: &Facts, pool: &str, model: &str) -> (KindRates<Rational>, Rational) {
    let mut rates: KindRates<Rational> = Default::default();
    let mut overhead = Rational::zero();
    for book in billing.books().books() {
        if book.pool.as_deref().is_some_and(|p| p != pool) {
            continue;
        }
        let of_model = book
            .rates
            .iter()
            .filter(|r| model.is_empty() || r.model == model);
        for r in of_model {
            for (kind, each) in [
                (RateKind::Reserved, &r.reserved_per_gpu_hour),
                (RateKind::Quota, &r.quota_per_gpu_hour),
                (RateKind::OnDemand, &r.on_demand_per_gpu_hour),
            ] {
                let rate = &mut rates[kind_index(kind)];
                *rate = rate.clone().max(each.to_rational());
            }
        }
        // The overhead on one unit of money: the book's fraction.
        overhead = overhead.max(overhead_amount(&Rational::from_integer(1), book));
    }
    (rates, overhead)
}
