//! One pool's figures over [from, to): compute by kind, health credit,
//! `reservation_unused`, unallocated capacity and its proportional share.
//!
//! Compute and credit are summed segment by segment. The rest needs the
//! pool's state at every instant, so it is a sweep over the instants where
//! anything changes (a segment or reservation window opens or closes,
//! inventory or health changes, the book in force changes); between two
//! such instants every quantity is constant and its cost is the cost
//! function over that stretch.

use std::collections::{BTreeMap, BTreeSet};

use crate::events::{HealthState, IdleDistribution, JobState, ReservationCharge};
use crate::exact::Rational;
use crate::pricing::{RateKind, StatementLine, ge_amount};
use crate::time::{MICROS_PER_HOUR, Timestamp};

use super::by_class::ByClass;
use super::charges::{Charge, Charged};
use super::facts::{Facts, PoolFacts, Segment, UseKind};
use super::segments::{Pricer, Row, Sums};
use super::{BillingError, add};

/// A tenant's exact figures in one pool.
#[derive(Debug, Default)]
pub(super) struct TenantPoolFigures {
    pub(super) lines: BTreeMap<StatementLine, Rational>,
    pub(super) failed_work: Rational,
    pub(super) retried_work: Rational,
    /// GE × microseconds held, all kinds.
    pub(super) ge_micros: Rational,
    /// What the lines are made of (statements only, not budgets).
    pub(super) charges: Vec<Charge>,
}

/// One pool's exact figures.
#[derive(Debug, Default)]
pub(super) struct PoolFigures {
    pub(super) tenants: BTreeMap<String, TenantPoolFigures>,
    /// Capacity nobody held, at the quota rate.
    pub(super) unallocated: Rational,
}

/// Whose figures to work out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope<'a> {
    /// Every tenant, unallocated capacity and its shares: a statement.
    Pool,
    /// One tenant's own lines only (no unallocated capacity, no shared
    /// idle): what budgets need, at a fraction of the work.
    Tenant(&'a str),
}

impl Scope<'_> {
    pub(super) fn covers(self, tenant: &str) -> bool {
        match self {
            Scope::Pool => true,
            Scope::Tenant(t) => t == tenant,
        }
    }
}

pub(super) fn figures(
    facts: &Facts,
    name: &str,
    from: Timestamp,
    to: Timestamp,
    scope: Scope<'_>,
) -> Result<PoolFigures, BillingError> {
    let mut out = PoolFigures::default();
    let Some(pool) = facts.pool(name) else {
        return Ok(out);
    };
    if to <= from {
        return Ok(out);
    }
    segments(facts, name, pool, from, to, scope, &mut out)?;
    sweep(facts, name, pool, from, to, scope, &mut out)?;
    if scope == Scope::Pool {
        // Energy is only known at the period's end (budgets leave it out).
        super::telemetry::energy(facts, name, from, to, scope, &mut out);
    }
    Ok(out)
}

/// Compute by kind, failed and retried work, and health credit.
fn segments(
    facts: &Facts,
    name: &str,
    pool: &PoolFacts,
    from: Timestamp,
    to: Timestamp,
    scope: Scope<'_>,
    out: &mut PoolFigures,
) -> Result<(), BillingError> {
    if let Scope::Tenant(tenant) = scope {
        return tenant_segments(facts, name, pool, from, to, tenant, out);
    }
    // A statement: every tenant, with failed and retried work and the
    // charges behind each line (a tenant's own figures do without them).
    let mut last_attempt: BTreeMap<&str, i32> = BTreeMap::new();
    let mut final_state: BTreeMap<(&str, i32), JobState> = BTreeMap::new();
    for s in pool.segments.values() {
        let last = last_attempt.entry(&s.job_id).or_insert(s.attempt);
        *last = (*last).max(s.attempt);
        if let Some(state) = s.final_state {
            final_state.insert((&s.job_id, s.attempt), state);
        }
    }
    let generation = facts.generation();
    for row in pool.segments.rows() {
        let s = &row.segment;
        let Some(RowShare {
            span: (a, b),
            held,
            amount,
            credit,
        }) = row_share(facts, name, pool, row, generation, from, to)?
        else {
            continue;
        };
        let f = match out.tenants.get_mut(&*s.tenant) {
            Some(f) => f,
            None => out.tenants.entry(s.tenant.to_string()).or_default(),
        };
        f.ge_micros = f.ge_micros.clone() + held;
        let line = compute_line(s.kind);
        add(&mut f.lines, line, amount.clone());
        if matches!(
            final_state.get(&(&*s.job_id, s.attempt)),
            Some(JobState::Failed | JobState::Preempted | JobState::Cancelled)
        ) {
            f.failed_work = f.failed_work.clone() + amount.clone();
        }
        if last_attempt.get(&*s.job_id).is_some_and(|l| *l > s.attempt) {
            f.retried_work = f.retried_work.clone() + amount.clone();
        }
        if !credit.is_zero() {
            add(&mut f.lines, StatementLine::HealthCredit, -credit.clone());
        }
        let charged = || Charged::Attempt {
            job_id: s.job_id.to_string(),
            attempt: s.attempt,
            kind: s.kind,
            model: s.model.to_string(),
            slices: s.slices,
            max_slices: s.max_slices,
        };
        let gpu_hours = ge_hours(&s.ge(), b.as_micros() - a.as_micros());
        f.charges.push(Charge::new(
            &s.tenant,
            name,
            line,
            charged(),
            (a, b),
            Some(gpu_hours),
            amount,
        ));
        if !credit.is_zero() {
            f.charges.push(Charge::new(
                &s.tenant,
                name,
                StatementLine::HealthCredit,
                charged(),
                (a, b),
                None,
                -credit,
            ));
        }
    }
    Ok(())
}

/// What one segment row adds over [from, to): the part of it inside,
/// GE × microseconds held, compute and health credit.
struct RowShare {
    span: (Timestamp, Timestamp),
    held: Rational,
    amount: Rational,
    credit: Rational,
}

/// `row`'s share of [from, to), or `None` where it lies outside.
fn row_share(
    facts: &Facts,
    name: &str,
    pool: &PoolFacts,
    row: &Row,
    generation: u64,
    from: Timestamp,
    to: Timestamp,
) -> Result<Option<RowShare>, BillingError> {
    let s = &row.segment;
    let Some((a, b)) = s.within(from, to) else {
        return Ok(None);
    };
    let (amount, credit) = row.priced(generation, a, b, || {
        Ok((
            facts.segment_compute(s, a, b)?,
            health_credit(facts, name, pool, s, a, b)?,
        ))
    })?;
    Ok(Some(RowShare {
        span: (a, b),
        held: s.ge() * Rational::from_integer(b.as_micros() - a.as_micros()),
        amount,
        credit,
    }))
}

/// One tenant's compute by kind and health credit (budgets): settled
/// segments come from the tenant's running total, the others are priced
/// now; both class by class where they can be ([`ByClass`]).
fn tenant_segments(
    facts: &Facts,
    name: &str,
    pool: &PoolFacts,
    from: Timestamp,
    to: Timestamp,
    tenant: &str,
    out: &mut PoolFigures,
) -> Result<(), BillingError> {
    let generation = facts.generation();
    let mut pricer = TenantPricer {
        facts,
        name,
        pool,
        generation,
        span: (from, to),
        classes: ByClass::new(facts, name, pool, from, to),
    };
    let sums = pool
        .segments
        .tenant_sums(tenant, generation, from, to, &mut pricer)?;
    if sums != Sums::default() {
        let f = out.tenants.entry(tenant.to_owned()).or_default();
        f.ge_micros = sums.ge_micros;
        f.lines = sums.lines;
    }
    Ok(())
}

/// Prices a tenant's rows over `span` for its own figures.
struct TenantPricer<'f> {
    facts: &'f Facts,
    name: &'f str,
    pool: &'f PoolFacts,
    generation: u64,
    span: (Timestamp, Timestamp),
    classes: ByClass,
}

impl Pricer for TenantPricer<'_> {
    type Error = BillingError;

    fn add(&mut self, row: &Row, sums: &mut Sums) -> Result<(), BillingError> {
        let (from, to) = self.span;
        let s = &row.segment;
        if let Some((a, b)) = s.within(from, to)
            && self.classes.take(s, a, b)
        {
            return Ok(());
        }
        let Some(share) = row_share(
            self.facts,
            self.name,
            self.pool,
            row,
            self.generation,
            from,
            to,
        )?
        else {
            return Ok(());
        };
        sums.ge_micros = sums.ge_micros.clone() + share.held;
        sums.add(compute_line(s.kind), share.amount);
        if !share.credit.is_zero() {
            sums.add(StatementLine::HealthCredit, -share.credit);
        }
        Ok(())
    }

    fn flush(&mut self, sums: &mut Sums) -> Result<(), BillingError> {
        self.classes
            .add_to(self.facts, self.name, sums, compute_line)
    }
}

/// The compute line a kind of use is billed on.
fn compute_line(kind: UseKind) -> StatementLine {
    match kind {
        UseKind::Reserved => StatementLine::ComputeReserved,
        UseKind::Quota => StatementLine::ComputeQuota,
        UseKind::Burst | UseKind::Unadmitted => StatementLine::ComputeBurst,
    }
}

/// GE × `micros` in GPU-hours.
fn ge_hours(ge: &Rational, micros: i64) -> Rational {
    (ge.clone() * Rational::from_integer(micros))
        .checked_div(&Rational::from_integer(MICROS_PER_HOUR))
        .unwrap_or_default()
}

/// Whether `device` is `failed` at `at`: its own health, or its parent's.
fn failed_at(pool: &PoolFacts, device: &str, at: Timestamp) -> bool {
    pool.health.get(device).is_some_and(|changes| {
        changes
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .is_some_and(|(_, state)| *state == HealthState::Failed)
    })
}

/// A device's parent GPU and GE, from the inventory in force at `at` (or
/// any inventory that lists it).
fn device_info(
    pool: &PoolFacts,
    device: &str,
    at: Timestamp,
) -> Option<(Option<String>, Rational)> {
    let listed = |(_, _, devices): &&(Timestamp, String, Vec<crate::events::InventoryDevice>)| {
        devices.iter().any(|d| d.device_uuid == device)
    };
    let (_, _, devices) = pool
        .inventory
        .iter()
        .rev()
        .filter(|(t, _, _)| *t <= at)
        .find(listed)
        .or_else(|| pool.inventory.iter().find(listed))?;
    let d = devices.iter().find(|d| d.device_uuid == device)?;
    Some((
        d.parent_gpu_uuid.clone(),
        Rational::new(d.slices.into(), d.max_slices.into())?,
    ))
}

/// The credit for segment time on failed devices over [a, b): at each
/// instant min(segment GE, Σ GE of its failed devices) at the segment's
/// rate. Returned as a positive amount.
fn health_credit(
    facts: &Facts,
    name: &str,
    pool: &PoolFacts,
    s: &Segment,
    a: Timestamp,
    b: Timestamp,
) -> Result<Rational, BillingError> {
    // No device of the pool ever failed (the common case): no credit.
    if pool.health.is_empty() {
        return Ok(Rational::zero());
    }
    let devices: Vec<(String, Option<String>, Rational)> = s
        .devices
        .iter()
        .filter_map(|d| device_info(pool, d, a).map(|(parent, ge)| (d.to_string(), parent, ge)))
        .collect();
    let mut points: BTreeSet<Timestamp> = BTreeSet::from([a, b]);
    let mut any = false;
    for (device, parent, _) in &devices {
        for id in std::iter::once(device).chain(parent) {
            if let Some(changes) = pool.health.get(id) {
                any = true;
                points.extend(changes.iter().map(|(t, _)| *t).filter(|t| *t > a && *t < b));
            }
        }
    }
    if !any {
        return Ok(Rational::zero());
    }
    points.extend(facts.books().change_points(name, a, b));
    let points: Vec<Timestamp> = points.into_iter().collect();
    let mut credit = Rational::zero();
    let segment_ge = s.ge();
    for w in points.windows(2) {
        let (x, y) = (w[0], w[1]);
        let failed: Rational = devices
            .iter()
            .filter(|(d, parent, _)| {
                failed_at(pool, d, x) || parent.as_deref().is_some_and(|p| failed_at(pool, p, x))
            })
            .map(|(_, _, ge)| ge.clone())
            .sum();
        let ge = failed.min(segment_ge.clone());
        if ge.is_zero() {
            continue;
        }
        let rate = facts.books().rate(name, &s.model, s.kind.rate_kind(), x)?;
        credit = credit + ge_amount(&ge, y.as_micros() - x.as_micros(), &rate);
    }
    Ok(credit)
}

/// Σ GE of the devices in the latest inventory of each node at `at` that
/// are not failed then.
fn capacity_at(pool: &PoolFacts, at: Timestamp) -> Rational {
    let mut nodes = BTreeMap::new();
    for (t, node, devices) in &pool.inventory {
        if *t > at {
            break;
        }
        nodes.insert(node.as_str(), devices);
    }
    nodes
        .values()
        .flat_map(|devices| devices.iter())
        .filter(|d| {
            !failed_at(pool, &d.device_uuid, at)
                && !d
                    .parent_gpu_uuid
                    .as_deref()
                    .is_some_and(|p| failed_at(pool, p, at))
        })
        .filter_map(|d| Rational::new(d.slices.into(), d.max_slices.into()))
        .sum()
}

/// What changes at an instant of the sweep, for the tenant it names.
enum Change<'f> {
    Held {
        tenant: &'f str,
        ge: Rational,
        reserved: bool,
    },
    Released {
        tenant: &'f str,
        ge: Rational,
        reserved: bool,
    },
    WindowOpens {
        tenant: &'f str,
        ge: Rational,
    },
    WindowCloses {
        tenant: &'f str,
        ge: Rational,
    },
}

/// Adds `delta` to `key`'s sum (a new key starts at zero).
fn plus<'f>(map: &mut BTreeMap<&'f str, Rational>, key: &'f str, delta: Rational) {
    let sum = map.entry(key).or_default();
    *sum = sum.clone() + delta;
}

/// `reservation_unused`, held GE-time per tenant, unallocated capacity and
/// `shared_idle`.
fn sweep(
    facts: &Facts,
    name: &str,
    pool: &PoolFacts,
    from: Timestamp,
    to: Timestamp,
    scope: Scope<'_>,
    out: &mut PoolFigures,
) -> Result<(), BillingError> {
    let model = pool
        .inventory
        .iter()
        .flat_map(|(_, _, devices)| devices.first())
        .map(|d| d.model.clone())
        .next()
        .or_else(|| pool.segments.values().next().map(|s| s.model.to_string()));
    let Some(model) = model else {
        return Ok(());
    };
    // A tenant's own figures need the sweep only for its reservations.
    if let Scope::Tenant(tenant) = scope
        && !pool
            .reservations
            .values()
            .any(|r| r.tenant == tenant && r.start < to && r.end > from)
    {
        return Ok(());
    }
    // The pool's figures, or one tenant's own. What everyone holds, the
    // pool's unallocated capacity and the shares of it are needed only for
    // the first.
    let pool_wide = scope == Scope::Pool;
    // Every change with its instant, in time order once sorted (the order
    // within an instant does not matter: they all apply before it lasts).
    let mut changes: Vec<(Timestamp, Change<'_>)> = Vec::new();
    let rows: Box<dyn Iterator<Item = &Segment>> = match scope {
        Scope::Pool => Box::new(pool.segments.values()),
        Scope::Tenant(t) => Box::new(pool.segments.values_of(t)),
    };
    for s in rows {
        // A tenant's own figures need only its reserved use, against its
        // windows; what everyone holds matters for unallocated capacity.
        if !pool_wide && s.kind != UseKind::Reserved {
            continue;
        }
        let Some((a, b)) = s.within(from, to) else {
            continue;
        };
        let reserved = s.kind == UseKind::Reserved;
        let (tenant, ge) = (&*s.tenant, s.ge());
        changes.push((
            a,
            Change::Held {
                tenant,
                ge: ge.clone(),
                reserved,
            },
        ));
        changes.push((
            b,
            Change::Released {
                tenant,
                ge,
                reserved,
            },
        ));
    }
    for r in pool
        .reservations
        .values()
        .filter(|r| scope.covers(&r.tenant))
    {
        let (a, b) = (r.start.max(from), r.end.min(to));
        if b <= a {
            continue;
        }
        let tenant = r.tenant.as_str();
        changes.push((
            a,
            Change::WindowOpens {
                tenant,
                ge: r.ge.clone(),
            },
        ));
        changes.push((
            b,
            Change::WindowCloses {
                tenant,
                ge: r.ge.clone(),
            },
        ));
    }
    let inside = |t: &Timestamp| *t > from && *t < to;
    let capacity_points: BTreeSet<Timestamp> = pool
        .inventory
        .iter()
        .map(|(t, _, _)| *t)
        .chain(pool.health.values().flatten().map(|(t, _)| *t))
        .filter(inside)
        .collect();
    changes.sort_unstable_by_key(|(t, _)| *t);
    let mut points: Vec<Timestamp> = [from, to]
        .into_iter()
        .chain(changes.iter().map(|(t, _)| *t).filter(inside))
        .chain(capacity_points.iter().copied())
        .chain(facts.books().change_points(name, from, to))
        .collect();
    points.sort_unstable();
    points.dedup();

    let mut held: BTreeMap<&str, Rational> = BTreeMap::new();
    let mut reserved_use: BTreeMap<&str, Rational> = BTreeMap::new();
    let mut reserved_ge: BTreeMap<&str, Rational> = BTreeMap::new();
    let mut capacity = capacity_at(pool, from);
    let mut shared = Rational::zero();
    // Per tenant: unused reserved GPU-hours charged, and when.
    let mut unused_hours: BTreeMap<&str, (Rational, Timestamp, Timestamp)> = BTreeMap::new();
    // Changes before `next` have applied; none lies before `from`.
    let mut next = 0;
    for w in points.windows(2) {
        let (x, y) = (w[0], w[1]);
        let at_x = changes[next..].partition_point(|(t, _)| *t <= x);
        for (_, change) in &changes[next..next + at_x] {
            match change {
                Change::Held {
                    tenant,
                    ge,
                    reserved,
                } => {
                    if pool_wide {
                        plus(&mut held, tenant, ge.clone());
                    }
                    if *reserved {
                        plus(&mut reserved_use, tenant, ge.clone());
                    }
                }
                Change::Released {
                    tenant,
                    ge,
                    reserved,
                } => {
                    if pool_wide {
                        plus(&mut held, tenant, -ge.clone());
                    }
                    if *reserved {
                        plus(&mut reserved_use, tenant, -ge.clone());
                    }
                }
                Change::WindowOpens { tenant, ge } => plus(&mut reserved_ge, tenant, ge.clone()),
                Change::WindowCloses { tenant, ge } => plus(&mut reserved_ge, tenant, -ge.clone()),
            }
        }
        next += at_x;
        if capacity_points.contains(&x) {
            capacity = capacity_at(pool, x);
        }
        let micros = y.as_micros() - x.as_micros();
        let book = facts.books().in_force(name, x);
        let mut unused_charged = Rational::zero();
        for (tenant, ge) in &reserved_ge {
            let used = reserved_use.get(tenant).cloned().unwrap_or_default();
            let unused = (ge.clone() - used).max(Rational::zero());
            if unused.is_zero() {
                continue;
            }
            let book = facts.books().require(name, x)?;
            if book.reservation_charge != ReservationCharge::Window {
                continue;
            }
            let rate = facts.books().rate(name, &model, RateKind::Reserved, x)?;
            let f = match out.tenants.get_mut(*tenant) {
                Some(f) => f,
                None => out.tenants.entry((*tenant).to_owned()).or_default(),
            };
            add(
                &mut f.lines,
                StatementLine::ReservationUnused,
                ge_amount(&unused, micros, &rate),
            );
            let hours = ge_hours(&unused, micros);
            unused_hours
                .entry(tenant)
                .and_modify(|(h, _, last)| {
                    *h = h.clone() + hours.clone();
                    *last = y;
                })
                .or_insert((hours, x, y));
            unused_charged = unused_charged + unused;
        }
        if !pool_wide {
            continue;
        }
        let total_held: Rational = held.values().cloned().sum();
        let unallocated = (capacity.clone() - total_held - unused_charged).max(Rational::zero());
        if unallocated.is_zero() {
            continue;
        }
        let rate = facts.books().rate(name, &model, RateKind::Quota, x)?;
        let cost = ge_amount(&unallocated, micros, &rate);
        if book.is_some_and(|b| b.idle_distribution == IdleDistribution::Proportional) {
            shared = shared + cost.clone();
        }
        out.unallocated = out.unallocated.clone() + cost;
    }
    if pool_wide {
        for (tenant, (hours, first, last)) in unused_hours {
            let f = out.tenants.entry(tenant.to_owned()).or_default();
            let amount = f
                .lines
                .get(&StatementLine::ReservationUnused)
                .cloned()
                .unwrap_or_default();
            f.charges.push(Charge::new(
                tenant,
                name,
                StatementLine::ReservationUnused,
                Charged::UnusedReservations {
                    model: model.clone(),
                },
                (first, last),
                Some(hours),
                amount,
            ));
        }
    }
    if !shared.is_zero() {
        let total: Rational = out.tenants.values().map(|f| f.ge_micros.clone()).sum();
        for (tenant, f) in out.tenants.iter_mut() {
            if f.ge_micros.is_zero() {
                continue;
            }
            let share = (shared.clone() * f.ge_micros.clone())
                .checked_div(&total)
                .unwrap_or_default();
            add(&mut f.lines, StatementLine::SharedIdle, share.clone());
            f.charges.push(Charge::new(
                tenant,
                name,
                StatementLine::SharedIdle,
                Charged::Pool,
                (from, to),
                None,
                share,
            ));
        }
    }
    Ok(())
}
