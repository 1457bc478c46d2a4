//! Statements over the history (DESIGN §5, §7).
//!
//! DataFusion reads what the ledger recorded — price books, inventory,
//! health, usage records and policies from `ledger_events`, reservation
//! windows from `decisions`, billing segments from `allocations` — and
//! the billing module of `gpuledger-schemas` prices it exactly. SQL
//! decimals would round a 1/7 GE share; the billing module never rounds
//! before a line is complete.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};
use datafusion::prelude::SessionContext;
use gpuledger_schemas::billing::{self, EnergyUse, Facts, IdleStretch, Period, Segment, Statement};
use gpuledger_schemas::{Event, Timestamp};

/// Why a statement could not be given.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    /// Reading the history failed.
    #[error("reading the history: {0}")]
    Engine(#[from] datafusion::error::DataFusionError),
    /// A history row does not read back as what it should be.
    #[error("history row of {table} does not read back: {message}")]
    Row {
        table: &'static str,
        message: String,
    },
    /// The facts cannot be priced (no book in force, no rate for a model).
    #[error("{0}")]
    Pricing(#[from] gpuledger_schemas::pricing::PricingError),
}

/// The ledger events statements need, in ledger order.
const FACT_EVENTS: &str = "SELECT raw FROM ledger_events \
     WHERE type IN ('PriceBook', 'NodeInventory', 'DeviceHealth', 'UsageRecord', 'TenantPolicy') \
     ORDER BY ledger_partition, ledger_offset";
const RESERVATIONS: &str = "SELECT raw FROM decisions WHERE type = 'ReservationDecision' \
     ORDER BY ledger_partition, ledger_offset";
const SEGMENTS: &str = "SELECT raw FROM allocations ORDER BY ledger_partition, ledger_offset";
const SPAN: &str = "SELECT min(event_time) AS first, max(event_time) AS now FROM ledger_events";
/// Which pools have samples, over what span.
const SAMPLED: &str =
    "SELECT pool, min(\"time\") AS first, max(\"time\") AS last FROM samples GROUP BY pool";
/// Each sample's energy counter and the one before it on the same device
/// (MIG instances report their GPU's counter).
const ENERGY: &str = "SELECT pool, device_uuid, \"time\", slices, max_slices, energy_mj, \
     lag(energy_mj) OVER (PARTITION BY device_uuid ORDER BY \"time\") AS previous_mj \
     FROM samples WHERE energy_mj IS NOT NULL";
/// Samples whose SM activity was known and below 5 %.
const IDLE: &str = "SELECT pool, device_uuid, \"time\", interval_ms, slices, max_slices \
     FROM samples WHERE sm_util_pct < 5";

async fn raw_rows(ctx: &SessionContext, sql: &str) -> Result<Vec<String>, StatementError> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let mut out = Vec::new();
    for batch in &batches {
        let column = batch.column(0).as_string::<i32>();
        out.extend(column.iter().flatten().map(str::to_owned));
    }
    Ok(out)
}

fn timestamp_at(batches: &[RecordBatch], column: usize) -> Option<Timestamp> {
    let batch = batches.iter().find(|b| b.num_rows() > 0)?;
    let values = batch
        .column(column)
        .as_primitive_opt::<TimestampMicrosecondType>()?;
    (!values.is_null(0)).then(|| Timestamp::from_micros(values.value(0)))
}

/// What the history holds for statements.
#[derive(Debug)]
pub struct Recorded {
    pub facts: Facts,
    /// The earliest event time in the ledger.
    pub first: Option<Timestamp>,
    /// The ledger's time: the latest event time applied.
    pub now: Option<Timestamp>,
}

impl Recorded {
    /// Every month from the ledger's first event to its time.
    pub fn periods(&self) -> Vec<Period> {
        let (Some(first), Some(now)) = (self.first, self.now) else {
            return Vec::new();
        };
        let last = Period::containing(now);
        let mut out = vec![Period::containing(first)];
        while let Some(p) = out.last().copied().filter(|p| *p < last) {
            out.push(p.next());
        }
        out
    }

    /// The statement of `period`, up to the ledger's time.
    pub fn statement(&self, period: Period) -> Result<Statement, StatementError> {
        let now = self.now.unwrap_or(period.start());
        Ok(billing::statement(&self.facts, period, now)?)
    }
}

/// Everything the ledger recorded that statements need.
pub async fn load(ctx: &SessionContext) -> Result<Recorded, StatementError> {
    let mut facts = Facts::new();
    let event = |table: &'static str, text: &str| {
        Event::from_json_str(text).map_err(|e| StatementError::Row {
            table,
            message: e.to_string(),
        })
    };
    for text in raw_rows(ctx, FACT_EVENTS).await? {
        facts.observe(&event("ledger_events", &text)?)?;
    }
    for text in raw_rows(ctx, RESERVATIONS).await? {
        facts.observe(&event("decisions", &text)?)?;
    }
    for text in raw_rows(ctx, SEGMENTS).await? {
        let segment: Segment = serde_json::from_str(&text).map_err(|e| StatementError::Row {
            table: "allocations",
            message: e.to_string(),
        })?;
        facts.segment(segment);
    }
    telemetry(ctx, &mut facts).await?;
    let span = ctx.sql(SPAN).await?.collect().await?;
    Ok(Recorded {
        facts,
        first: timestamp_at(&span, 0),
        now: timestamp_at(&span, 1),
    })
}

/// What the samples add: the span each pool has telemetry for, the
/// energy each sample's interval used (only read when some price book
/// prices energy), and the idle stretches.
async fn telemetry(ctx: &SessionContext, facts: &mut Facts) -> Result<(), StatementError> {
    let row_error = |message: String| StatementError::Row {
        table: "samples",
        message,
    };
    for batch in ctx.sql(SAMPLED).await?.collect().await? {
        let pools = batch.column(0).as_string::<i32>();
        let first = time_column(&batch, 1).ok_or_else(|| row_error("no first time".into()))?;
        let last = time_column(&batch, 2).ok_or_else(|| row_error("no last time".into()))?;
        for i in 0..batch.num_rows() {
            if pools.is_valid(i) && first.is_valid(i) && last.is_valid(i) {
                let (a, b) = (first.value(i), last.value(i));
                facts.sampled(
                    pools.value(i),
                    Timestamp::from_micros(a),
                    Timestamp::from_micros(b),
                );
            }
        }
    }
    let prices_energy = facts
        .books()
        .books()
        .iter()
        .any(|b| b.energy_per_kwh.is_some());
    if prices_energy {
        for batch in ctx.sql(ENERGY).await?.collect().await? {
            let pools = batch.column(0).as_string::<i32>();
            let devices = batch.column(1).as_string::<i32>();
            let times = time_column(&batch, 2).ok_or_else(|| row_error("bad time".into()))?;
            let slices = int_column(&batch, 3)?;
            let max_slices = int_column(&batch, 4)?;
            let energy = batch.column(5).as_primitive::<Int64Type>();
            let previous = batch.column(6).as_primitive::<Int64Type>();
            for i in 0..batch.num_rows() {
                if previous.is_null(i) || energy.is_null(i) {
                    continue;
                }
                let (now, before) = (energy.value(i), previous.value(i));
                // A counter that went down restarted from 0.
                let delta_mj = if now < before { now } else { now - before };
                facts.energy(
                    pools.value(i),
                    EnergyUse {
                        device_uuid: devices.value(i).to_owned(),
                        at: Timestamp::from_micros(times.value(i)),
                        delta_mj,
                        slices: slices[i],
                        max_slices: max_slices[i],
                    },
                );
            }
        }
    }
    for batch in ctx.sql(IDLE).await?.collect().await? {
        let pools = batch.column(0).as_string::<i32>();
        let devices = batch.column(1).as_string::<i32>();
        let times = time_column(&batch, 2).ok_or_else(|| row_error("bad time".into()))?;
        let intervals = int_column(&batch, 3)?;
        let slices = int_column(&batch, 4)?;
        let max_slices = int_column(&batch, 5)?;
        for i in 0..batch.num_rows() {
            let to = Timestamp::from_micros(times.value(i));
            facts.idle(
                pools.value(i),
                IdleStretch {
                    device_uuid: devices.value(i).to_owned(),
                    from: to.plus_micros(-intervals[i] * 1_000),
                    to,
                    slices: slices[i],
                    max_slices: max_slices[i],
                },
            );
        }
    }
    Ok(())
}

fn time_column(
    batch: &RecordBatch,
    column: usize,
) -> Option<&datafusion::arrow::array::PrimitiveArray<TimestampMicrosecondType>> {
    batch
        .column(column)
        .as_primitive_opt::<TimestampMicrosecondType>()
}

/// An integer column (Int32 or Int64) as `i64`s.
fn int_column(batch: &RecordBatch, column: usize) -> Result<Vec<i64>, StatementError> {
    let array = batch.column(column);
    if let Some(values) = array.as_primitive_opt::<Int32Type>() {
        return Ok(values.iter().map(|v| i64::from(v.unwrap_or(0))).collect());
    }
    if let Some(values) = array.as_primitive_opt::<Int64Type>() {
        return Ok(values.iter().map(|v| v.unwrap_or(0)).collect());
    }
    Err(StatementError::Row {
        table: "samples",
        message: format!("column {column} is {}, not an integer", array.data_type()),
    })
}

/// The statement of `period`, up to the ledger's time.
pub async fn statement(ctx: &SessionContext, period: Period) -> Result<Statement, StatementError> {
    load(ctx).await?.statement(period)
}

/// A statement as CSV: one row per tenant and line.
pub fn to_csv(statement: &Statement) -> String {
    let mut out = String::from("period,currency,tenant,line,amount\n");
    for (tenant, line, amount) in statement.rows() {
        out.push_str(&format!(
            "{},{},{},{},{}\n",
            statement.period,
            statement.currency,
            csv_field(tenant),
            line,
            amount
        ));
    }
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}
