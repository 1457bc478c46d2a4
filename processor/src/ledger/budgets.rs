//! Budgets (DESIGN §4, §11): a tenant's monthly money and GPU-hour budgets
//! per pool, against month-to-date spend priced by the shared billing
//! module. A spent budget denies admissions (whatever the enforcement
//! setting); alerts go out once per threshold per month.

use gpuledger_schemas::billing::{Facts, MONEY_DIGITS, Period, month_to_date};
use gpuledger_schemas::events::{BudgetKind, TenantPolicy};
use gpuledger_schemas::{Decimal, Rational, Timestamp};

use super::Ledger;
use super::decide::Decisions;

/// Alert thresholds, in percent of a budget.
pub(crate) const THRESHOLDS: [i32; 3] = [50, 80, 100];

/// What one budget stands at.
struct Standing {
    kind: BudgetKind,
    used: Rational,
    budget: Decimal,
}

/// Month-to-date figures of every budget `policy` sets. A pricing error
/// (no book in force yet) leaves money budgets unchecked.
fn standings(billing: &Facts, policy: &TenantPolicy, now: Timestamp) -> Vec<Standing> {
    if policy.monthly_budget.is_none() && policy.monthly_gpu_hours.is_none() {
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
pub(crate) fn exhausted(billing: &Facts, policy: &TenantPolicy, now: Timestamp) -> Option<String> {
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
    let policies: Vec<TenantPolicy> = ledger
        .pools
        .values()
        .flat_map(|p| p.policies.values().cloned())
        .collect();
    for policy in policies {
        for standing in standings(billing, &policy, now) {
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
    }
}
