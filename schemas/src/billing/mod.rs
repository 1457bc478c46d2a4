//! Statements (DESIGN §5): what each tenant owes for a calendar month.
//!
//! The inputs are the facts the ledger settled — billing segments of
//! allocations (who held how much GE, at which kind, from when to when),
//! confirmed reservation windows — and the ledger events that price and
//! size the pools: price books, inventory, device health, usage records,
//! tenant policies. [`statement`] turns them into the statement lines with
//! exact rationals and rounds each line once. The processor's budgets
//! ([`month_to_date`]) and the query service's statements both call it, so
//! they cannot disagree.
//!
//! Pure: no I/O, no clock. `now` is always passed in.

mod by_class;
mod charges;
mod facts;
mod output;
mod period;
mod pool;
mod segments;
mod telemetry;

#[cfg(test)]
mod tests;

pub use charges::{Charge, Charged};
pub use facts::{
    AttemptEnd, DeviceHour, EnergyUse, Facts, IdleStretch, ReservedWindow, Segment, UseKind,
};
pub use output::{Breakdown, PlatformLines, Statement, TenantStatement};
pub use period::Period;
pub use telemetry::{Holders, IDLE_BELOW_PCT};

use std::collections::{BTreeMap, BTreeSet};

use crate::events::{JobState, UsageKind};
use crate::exact::{Decimal, Rational};
use crate::pricing::{PricingError, StatementLine, egress_amount, overhead_amount, storage_amount};
use crate::time::{MICROS_PER_HOUR, Timestamp};

use pool::{PoolFigures, Scope, TenantPoolFigures};

/// Why a statement could not be computed.
pub type BillingError = PricingError;

/// Digits of money lines.
pub const MONEY_DIGITS: u32 = 2;
/// Digits of `cost_per_work_unit`.
pub const UNIT_COST_DIGITS: u32 = 12;

/// The statement of `period`, up to `min(period end, now)`.
pub fn statement(facts: &Facts, period: Period, now: Timestamp) -> Result<Statement, BillingError> {
    let from = period.start();
    let period_end = period.end();
    let to = period_end.min(now).max(from);
    let last_instant = period_end.plus_micros(-1);

    let mut tenants: BTreeMap<String, TenantFigures> = BTreeMap::new();
    for tenant in facts.tenants_known(from, period_end) {
        tenants.entry(tenant).or_default();
    }
    // Idle compute per pool and tenant (`None`: the pool has no telemetry).
    let mut idle: BTreeMap<String, Option<BTreeMap<String, Rational>>> = BTreeMap::new();
    for pool in facts.pools() {
        let by_tenant = telemetry::idle_allocated(facts, &pool, from, to)?;
        idle.insert(pool, by_tenant);
    }
    let mut unallocated = Rational::zero();
    for pool in facts.pools() {
        let figures = pool::figures(facts, &pool, from, to, Scope::Pool)?;
        unallocated = unallocated + figures.unallocated.clone();
        let PoolFigures {
            tenants: by_tenant, ..
        } = figures;
        for (tenant, mut f) in by_tenant {
            add_usage(facts, &pool, &tenant, from, period_end, &mut f, true)?;
            let entry = tenants.entry(tenant).or_default();
            entry.add_pool(&pool, f);
        }
    }
    // Usage records of tenants and pools that held no GPUs.
    for record in facts.usage_records() {
        if record.start < from || record.start >= period_end {
            continue;
        }
        let entry = tenants.entry(record.tenant.clone()).or_default();
        if !entry.pools.contains_key(&record.pool) {
            let mut f = TenantPoolFigures::default();
            add_usage(
                facts,
                &record.pool,
                &record.tenant,
                from,
                period_end,
                &mut f,
                true,
            )?;
            entry.add_pool(&record.pool, f);
        }
    }

    let mut out = Vec::new();
    for (tenant, figures) in tenants {
        // Overhead per pool, on the exact lines, with the book in force at
        // the period's last instant; then every line summed exactly across
        // pools and rounded once.
        let mut exact: BTreeMap<StatementLine, Rational> = BTreeMap::new();
        let mut charges = Vec::new();
        for (pool, f) in &figures.pools {
            let subtotal: Rational = f.lines.values().cloned().sum();
            let overhead = if subtotal.is_zero() {
                Rational::zero()
            } else {
                overhead_amount(&subtotal, facts.books().require(pool, last_instant)?)
            };
            for (line, amount) in &f.lines {
                add(&mut exact, *line, amount.clone());
            }
            charges.extend(f.charges.iter().filter(|c| !c.amount.is_zero()).cloned());
            if !overhead.is_zero() {
                charges.push(Charge::new(
                    &tenant,
                    pool,
                    StatementLine::Overhead,
                    Charged::Pool,
                    (from, to),
                    None,
                    overhead.clone(),
                ));
            }
            add(&mut exact, StatementLine::Overhead, overhead);
        }
        charges::apportion(&mut charges, MONEY_DIGITS);
        let mut lines = Vec::new();
        let mut total = Rational::zero();
        for line in StatementLine::ALL.iter().copied() {
            if line == StatementLine::Total {
                continue;
            }
            let rounded = exact
                .get(&line)
                .cloned()
                .unwrap_or_default()
                .round_half_even(MONEY_DIGITS);
            total = total + rounded.to_rational();
            lines.push((line, rounded));
        }
        let total = total.round_half_even(MONEY_DIGITS);
        lines.push((StatementLine::Total, total.clone()));
        let breakdown = figures.breakdown(&tenant, facts, &idle, (from, period_end, to), &total)?;
        out.push(TenantStatement {
            tenant,
            lines,
            breakdown,
            charges,
        });
    }
    let platform_total: Rational = out
        .iter()
        .map(|t| t.line(StatementLine::Total).to_rational())
        .sum();
    Ok(Statement {
        period,
        currency: facts.currency_at(last_instant),
        tenants: out,
        platform: PlatformLines {
            unallocated: unallocated.round_half_even(MONEY_DIGITS),
            total: platform_total.round_half_even(MONEY_DIGITS),
        },
    })
}

/// A tenant's month-to-date spend in one pool, as budgets see it (DESIGN
/// §5): compute, `reservation_unused`, storage, data movement and health
/// credit, each rounded, plus overhead on that sum at the book in force at
/// `now`. Also the GE-hours it held (all kinds), for GPU-hour budgets.
pub fn month_to_date(
    facts: &Facts,
    pool: &str,
    tenant: &str,
    now: Timestamp,
) -> Result<(Rational, Rational), BillingError> {
    let period = Period::containing(now);
    let from = period.start();
    let mut figures = pool::figures(facts, pool, from, now.max(from), Scope::Tenant(tenant))?;
    let mut f = figures.tenants.remove(tenant).unwrap_or_default();
    add_usage(facts, pool, tenant, from, period.end(), &mut f, false)?;
    let rounded: Rational = f
        .lines
        .iter()
        .filter(|(line, _)| !matches!(line, StatementLine::SharedIdle | StatementLine::Energy))
        .map(|(_, amount)| amount.round_half_even(MONEY_DIGITS).to_rational())
        .sum();
    let spend = if rounded.is_zero() {
        rounded
    } else {
        let book = facts.books().require(pool, now)?;
        rounded.clone() + overhead_amount(&rounded, book)
    };
    let gpu_hours = f
        .ge_micros
        .checked_div(&Rational::from_integer(MICROS_PER_HOUR))
        .unwrap_or_default();
    Ok((spend, gpu_hours))
}

/// Storage and data movement of `tenant` in `pool`: records whose `start`
/// falls in [from, period_end), priced by the book in force at `start`;
/// with `with_charges`, one charge per record too.
fn add_usage(
    facts: &Facts,
    pool: &str,
    tenant: &str,
    from: Timestamp,
    period_end: Timestamp,
    f: &mut TenantPoolFigures,
    with_charges: bool,
) -> Result<(), BillingError> {
    for record in facts.usage_records() {
        if record.pool != pool
            || record.tenant != tenant
            || record.start < from
            || record.start >= period_end
        {
            continue;
        }
        let (line, amount) = match record.kind {
            UsageKind::StorageGbHours => (
                StatementLine::Storage,
                storage_amount(&record.quantity, facts.books().require(pool, record.start)?),
            ),
            UsageKind::EgressBytes => (
                StatementLine::DataMovement,
                egress_amount(&record.quantity, facts.books().require(pool, record.start)?),
            ),
            UsageKind::IngressBytes => continue,
        };
        if with_charges {
            let quantity = match record.kind {
                UsageKind::EgressBytes => record
                    .quantity
                    .to_rational()
                    .checked_div(&Rational::from_integer(1_000_000_000)),
                _ => Some(record.quantity.to_rational()),
            };
            f.charges.push(Charge::new(
                tenant,
                pool,
                line,
                Charged::Usage { kind: record.kind },
                (record.start.max(from), record.end.min(period_end)),
                quantity,
                amount.clone(),
            ));
        }
        add(&mut f.lines, line, amount);
    }
    Ok(())
}

fn add(lines: &mut BTreeMap<StatementLine, Rational>, line: StatementLine, amount: Rational) {
    let entry = lines.entry(line).or_default();
    *entry = entry.clone() + amount;
}

/// One tenant's figures, per pool.
#[derive(Debug, Default)]
struct TenantFigures {
    pools: BTreeMap<String, TenantPoolFigures>,
}

impl TenantFigures {
    fn add_pool(&mut self, pool: &str, figures: TenantPoolFigures) {
        self.pools.insert(pool.to_owned(), figures);
    }

    /// The breakdowns beside the lines (DESIGN §5).
    fn breakdown(
        &self,
        tenant: &str,
        facts: &Facts,
        idle_by_pool: &BTreeMap<String, Option<BTreeMap<String, Rational>>>,
        (from, period_end, to): (Timestamp, Timestamp, Timestamp),
        total: &Decimal,
    ) -> Result<Breakdown, BillingError> {
        let mut failed = Rational::zero();
        let mut retried = Rational::zero();
        let mut idle: Option<Rational> = None;
        for (pool, f) in &self.pools {
            failed = failed + f.failed_work.clone();
            retried = retried + f.retried_work.clone();
            if let Some(Some(by_tenant)) = idle_by_pool.get(pool) {
                let amount = by_tenant.get(tenant).cloned().unwrap_or_default();
                idle = Some(idle.unwrap_or_default() + amount);
            }
        }
        // Jobs completed in the period, and the units they completed.
        let mut completed: BTreeSet<(String, String)> = BTreeSet::new();
        let mut units: BTreeMap<String, Rational> = BTreeMap::new();
        let mut unit_jobs: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
        for pool in self.pools.keys() {
            for end in facts.attempt_ends(pool) {
                if end.tenant != tenant
                    || end.state != JobState::Completed
                    || end.at < from
                    || end.at >= period_end
                {
                    continue;
                }
                completed.insert((pool.clone(), end.job_id.clone()));
                let Some(n) = &end.work_units else {
                    continue;
                };
                let name = end
                    .work_unit_name
                    .clone()
                    .unwrap_or_else(|| "unit".to_owned());
                let entry = units.entry(name.clone()).or_default();
                *entry = entry.clone() + n.to_rational();
                unit_jobs
                    .entry(name)
                    .or_default()
                    .insert((pool.clone(), end.job_id.clone()));
            }
        }
        let completed_jobs = completed.len() as u64;
        let cost_per_completed_job = (completed_jobs > 0).then(|| {
            total
                .to_rational()
                .checked_div(&Rational::from_integer(completed_jobs as i64))
                .unwrap_or_default()
                .round_half_even(MONEY_DIGITS)
        });
        let mut cost_per_work_unit = BTreeMap::new();
        for (name, jobs) in &unit_jobs {
            let mut by_pool: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            for (pool, job) in jobs {
                by_pool.entry(pool).or_default().insert(job);
            }
            let mut compute = Rational::zero();
            for (pool, jobs) in by_pool {
                compute = compute + facts.jobs_compute(pool, &jobs, to)?;
            }
            let per_unit = units
                .get(name)
                .and_then(|n| compute.checked_div(n))
                .map(|r| r.round_half_even(UNIT_COST_DIGITS));
            cost_per_work_unit.insert(name.clone(), per_unit);
        }
        Ok(Breakdown {
            failed_work: failed.round_half_even(MONEY_DIGITS),
            retried_work: retried.round_half_even(MONEY_DIGITS),
            idle_allocated: idle.map(|r| r.round_half_even(MONEY_DIGITS)),
            completed_jobs,
            cost_per_completed_job,
            completed_work_units: unit_jobs
                .keys()
                .map(|name| {
                    let n = units.get(name).cloned().unwrap_or_default();
                    let text = n
                        .to_plain_decimal(18)
                        .unwrap_or_else(|| n.round_half_even(UNIT_COST_DIGITS));
                    (name.clone(), text)
                })
                .collect(),
            cost_per_work_unit,
        })
    }
}
