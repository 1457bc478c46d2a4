//! The per-attempt views, from the charges behind each statement:
//! `job_costs` (what each job attempt cost in a period, with its
//! completed-work fields) and `tenant_usage_hourly` (GPU-hours held per
//! hour, tenant, pool and kind).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Decimal128Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::Result;
use gpuledger_schemas::Rational;
use gpuledger_schemas::billing::{AttemptEnd, Charged, Statement};
use gpuledger_schemas::events::JobState;
use gpuledger_schemas::pricing::StatementLine;
use gpuledger_schemas::time::Timestamp;

use super::{MONEY, money};
use crate::columns::{ge_text, unscaled, utc};
use crate::statements::Recorded;

/// GPU-hours: exact to the microsecond of a 1/7 slice needs more digits
/// than money; six are plenty for dashboards and sums.
const HOURS: DataType = DataType::Decimal128(38, 6);
const HOURS_SCALE: u32 = 6;
const MICROS_PER_HOUR: i64 = 3_600_000_000;

fn hours() -> Decimal128Builder {
    Decimal128Builder::new().with_data_type(HOURS)
}

fn time() -> TimestampMicrosecondBuilder {
    TimestampMicrosecondBuilder::new().with_timezone("UTC")
}

pub(super) fn job_costs_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("period", DataType::Utf8, false),
        Field::new("currency", DataType::Utf8, false),
        Field::new("tenant", DataType::Utf8, false),
        Field::new("pool", DataType::Utf8, false),
        Field::new("job_id", DataType::Utf8, false),
        Field::new("attempt", DataType::Int32, false),
        Field::new("model", DataType::Utf8, false),
        // GE held: `2` whole GPUs, `3/7` of one.
        Field::new("ge", DataType::Utf8, false),
        Field::new("kinds", DataType::Utf8, false),
        Field::new("start", utc(), false),
        Field::new("end", utc(), false),
        Field::new("gpu_hours", HOURS, false),
        Field::new("compute", MONEY, false),
        Field::new("health_credit", MONEY, false),
        Field::new("cost", MONEY, false),
        Field::new("final_state", DataType::Utf8, true),
        Field::new("completed", DataType::Boolean, false),
        Field::new("failed", DataType::Boolean, false),
        Field::new("retried", DataType::Boolean, false),
        Field::new("work_units", DataType::Utf8, true),
        Field::new("work_unit_name", DataType::Utf8, true),
    ]))
}

pub(super) fn usage_hourly_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("period", DataType::Utf8, false),
        Field::new("hour", utc(), false),
        Field::new("tenant", DataType::Utf8, false),
        Field::new("pool", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("model", DataType::Utf8, false),
        Field::new("gpu_hours", HOURS, false),
        Field::new("attempts", DataType::Int64, false),
    ]))
}

/// One attempt's figures in one period.
#[derive(Default)]
struct Attempt {
    model: String,
    ge: String,
    kinds: BTreeSet<&'static str>,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
    gpu_hours: Rational,
    compute: Rational,
    credit: Rational,
}

fn is_compute(line: StatementLine) -> bool {
    matches!(
        line,
        StatementLine::ComputeReserved | StatementLine::ComputeQuota | StatementLine::ComputeBurst
    )
}

pub(super) fn job_costs_columns(
    recorded: &Recorded,
    statements: &[Arc<Statement>],
) -> Result<Vec<ArrayRef>> {
    let (mut period, mut currency, mut tenant, mut pool) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut job, mut attempt_no) = (StringBuilder::new(), Int32Builder::new());
    let (mut model, mut ge, mut kinds) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut start, mut end, mut gpu_hours) = (time(), time(), hours());
    let (mut compute, mut credit, mut cost) = (money(), money(), money());
    let (mut final_state, mut completed, mut failed, mut retried) = (
        StringBuilder::new(),
        BooleanBuilder::new(),
        BooleanBuilder::new(),
        BooleanBuilder::new(),
    );
    let (mut units, mut unit_name) = (StringBuilder::new(), StringBuilder::new());

    // How each attempt ended, and each job's last attempt, per pool.
    let mut ends: BTreeMap<(String, String, i32), AttemptEnd> = BTreeMap::new();
    let mut last: BTreeMap<(String, String), i32> = BTreeMap::new();
    for name in recorded.facts.pools() {
        for e in recorded.facts.attempt_ends(&name) {
            ends.insert((name.clone(), e.job_id.clone(), e.attempt), e);
        }
    }
    for s in statements {
        for t in &s.tenants {
            let mut attempts: BTreeMap<(&str, &str, i32), Attempt> = BTreeMap::new();
            for c in &t.charges {
                let Charged::Attempt {
                    job_id,
                    attempt,
                    kind,
                    model,
                    slices,
                    max_slices,
                } = &c.charged
                else {
                    continue;
                };
                let a = attempts
                    .entry((c.pool.as_str(), job_id.as_str(), *attempt))
                    .or_default();
                let l = last.entry((c.pool.clone(), job_id.clone())).or_default();
                *l = (*l).max(*attempt);
                a.model.clone_from(model);
                a.ge = ge_text(*slices, *max_slices);
                a.start = Some(a.start.map_or(c.start, |s| s.min(c.start)));
                a.end = Some(a.end.map_or(c.end, |e| e.max(c.end)));
                if c.line == StatementLine::HealthCredit {
                    a.credit = a.credit.clone() + c.billed.to_rational();
                    continue;
                }
                if is_compute(c.line) {
                    a.kinds.insert(kind.as_str());
                    a.compute = a.compute.clone() + c.billed.to_rational();
                    a.gpu_hours = a.gpu_hours.clone() + c.quantity.clone().unwrap_or_default();
                }
            }
            for ((pool_name, job_id, attempt), a) in attempts {
                period.append_value(s.period.to_string());
                currency.append_value(&s.currency);
                tenant.append_value(&t.tenant);
                pool.append_value(pool_name);
                job.append_value(job_id);
                attempt_no.append_value(attempt);
                model.append_value(&a.model);
                ge.append_value(&a.ge);
                kinds.append_value(a.kinds.iter().copied().collect::<Vec<_>>().join(","));
                start.append_value(a.start.unwrap_or(s.period.start()).as_micros());
                end.append_value(a.end.unwrap_or(s.period.start()).as_micros());
                gpu_hours.append_value(unscaled(&a.gpu_hours, HOURS_SCALE)?);
                compute.append_value(unscaled(&a.compute, 2)?);
                credit.append_value(unscaled(&a.credit, 2)?);
                cost.append_value(unscaled(&(a.compute.clone() + a.credit.clone()), 2)?);
                let ended = ends.get(&(pool_name.to_owned(), job_id.to_owned(), attempt));
                let state = ended.map(|e| e.state);
                final_state.append_option(state.map(|s| s.as_str()));
                completed.append_value(state == Some(JobState::Completed));
                failed.append_value(matches!(
                    state,
                    Some(JobState::Failed | JobState::Preempted | JobState::Cancelled)
                ));
                retried.append_value(
                    last.get(&(pool_name.to_owned(), job_id.to_owned()))
                        .is_some_and(|l| *l > attempt),
                );
                let done = ended.filter(|e| e.state == JobState::Completed);
                units.append_option(
                    done.and_then(|e| e.work_units.as_ref())
                        .map(|u| u.to_string()),
                );
                unit_name.append_option(done.and_then(|e| {
                    e.work_units
                        .as_ref()
                        .map(|_| e.work_unit_name.clone().unwrap_or_else(|| "unit".into()))
                }));
            }
        }
    }
    Ok(vec![
        Arc::new(period.finish()),
        Arc::new(currency.finish()),
        Arc::new(tenant.finish()),
        Arc::new(pool.finish()),
        Arc::new(job.finish()),
        Arc::new(attempt_no.finish()),
        Arc::new(model.finish()),
        Arc::new(ge.finish()),
        Arc::new(kinds.finish()),
        Arc::new(start.finish()),
        Arc::new(end.finish()),
        Arc::new(gpu_hours.finish()),
        Arc::new(compute.finish()),
        Arc::new(credit.finish()),
        Arc::new(cost.finish()),
        Arc::new(final_state.finish()),
        Arc::new(completed.finish()),
        Arc::new(failed.finish()),
        Arc::new(retried.finish()),
        Arc::new(units.finish()),
        Arc::new(unit_name.finish()),
    ])
}

/// Splits every compute charge into the hours it covers.
pub(super) fn usage_hourly_columns(statements: &[Arc<Statement>]) -> Result<Vec<ArrayRef>> {
    /// (hour, tenant, pool, kind, model)
    type Key<'a> = (i64, &'a str, &'a str, &'static str, &'a str);
    /// GPU-hours held, and by which attempts.
    type Held<'a> = (Rational, BTreeSet<(&'a str, i32)>);
    let (mut period, mut hour, mut tenant, mut pool) = (
        StringBuilder::new(),
        time(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut kind, mut model, mut gpu_hours, mut attempts) = (
        StringBuilder::new(),
        StringBuilder::new(),
        hours(),
        Int64Builder::new(),
    );
    for s in statements {
        let mut by_hour: BTreeMap<Key<'_>, Held<'_>> = BTreeMap::new();
        for t in &s.tenants {
            for c in t.charges.iter().filter(|c| is_compute(c.line)) {
                let Charged::Attempt {
                    job_id,
                    attempt,
                    kind,
                    model,
                    slices,
                    max_slices,
                } = &c.charged
                else {
                    continue;
                };
                let ge = Rational::new(*slices, *max_slices).unwrap_or_default();
                let (a, b) = (c.start.as_micros(), c.end.as_micros());
                let mut h = a - a.rem_euclid(MICROS_PER_HOUR);
                while h < b {
                    let overlap = b.min(h + MICROS_PER_HOUR) - a.max(h);
                    let entry = by_hour
                        .entry((h, &t.tenant, &c.pool, kind.as_str(), model))
                        .or_default();
                    entry.0 = entry.0.clone()
                        + (ge.clone() * Rational::from_integer(overlap))
                            .checked_div(&Rational::from_integer(MICROS_PER_HOUR))
                            .unwrap_or_default();
                    entry.1.insert((job_id, *attempt));
                    h += MICROS_PER_HOUR;
                }
            }
        }
        for ((h, t, p, k, m), (held, seen)) in by_hour {
            period.append_value(s.period.to_string());
            hour.append_value(h);
            tenant.append_value(t);
            pool.append_value(p);
            kind.append_value(k);
            model.append_value(m);
            gpu_hours.append_value(unscaled(&held, HOURS_SCALE)?);
            attempts.append_value(seen.len() as i64);
        }
    }
    Ok(vec![
        Arc::new(period.finish()),
        Arc::new(hour.finish()),
        Arc::new(tenant.finish()),
        Arc::new(pool.finish()),
        Arc::new(kind.finish()),
        Arc::new(model.finish()),
        Arc::new(gpu_hours.finish()),
        Arc::new(attempts.finish()),
    ])
}
