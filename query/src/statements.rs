//! Statements over the history (DESIGN §5, §7).
//!
//! DataFusion reads what the ledger recorded — price books, inventory,
//! health, usage records and policies from `ledger_events`, reservation
//! windows from `decisions`, billing segments from `allocations` — and
//! the billing module of `gpuledger-schemas` prices it exactly. SQL
//! decimals would round a 1/7 GE share; the billing module never rounds
//! before a line is complete.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::TimestampMicrosecondType;
use datafusion::prelude::SessionContext;
use gpuledger_schemas::billing::{self, Facts, Period, Segment, Statement};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use gpuledger_common::history::HistoryRoot;
use gpuledger_schemas::{Event, Timestamp, tables};

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
    /// Statements priced from these facts so far: each is a function of
    /// the facts and the period alone.
    priced: std::sync::Mutex<HashMap<Period, Arc<Statement>>>,
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

    /// The statement of `period`, up to the ledger's time; priced once
    /// per period.
    pub fn statement(&self, period: Period) -> Result<Arc<Statement>, StatementError> {
        let kept = |priced: &std::sync::Mutex<HashMap<Period, Arc<Statement>>>| {
            priced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&period)
                .cloned()
        };
        if let Some(statement) = kept(&self.priced) {
            return Ok(statement);
        }
        let now = self.now.unwrap_or(period.start());
        let statement = Arc::new(billing::statement(&self.facts, period, now)?);
        self.priced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(period, statement.clone());
        Ok(statement)
    }
}

/// Tables statements read.
const READ: [&str; 5] = [
    tables::ledger_events::TABLE,
    tables::decisions::TABLE,
    tables::allocations::TABLE,
    tables::device_hourly::TABLE,
    tables::samples::TABLE,
];

/// Every history file statements read: table, day, name, length and
/// modification time. History files are written once under their final
/// name and never changed (compaction replaces them with new names), so
/// the same listing means the same rows.
type Listing = Vec<(&'static str, String, String, u64, Option<SystemTime>)>;

fn listing(root: &HistoryRoot) -> std::io::Result<Listing> {
    let mut out = Listing::new();
    for table in READ {
        for file in root.files(table)? {
            if file.name.ends_with(".parquet") && !file.name.starts_with('.') {
                out.push((table, file.date, file.name, file.size, file.modified));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What the history recorded, kept while its files stay the same: a
/// statement (or a statement view) over an unchanged history reuses it
/// instead of reading and folding every table again. One per service,
/// installed as an extension of the session's configuration.
#[derive(Debug)]
pub struct RecordedCache {
    root: HistoryRoot,
    kept: tokio::sync::Mutex<Option<(Listing, Arc<Recorded>)>>,
}

impl RecordedCache {
    /// A cache over the history under `root`.
    pub fn new(root: &HistoryRoot) -> Self {
        Self {
            root: root.clone(),
            kept: tokio::sync::Mutex::new(None),
        }
    }
}

/// What the history recorded, from the session's [`RecordedCache`] while
/// the files are unchanged, else read anew.
pub async fn recorded(ctx: &SessionContext) -> Result<Arc<Recorded>, StatementError> {
    let Some(cache) = ctx.state().config().get_extension::<RecordedCache>() else {
        return Ok(Arc::new(load(ctx).await?));
    };
    // One reader at a time: a second caller waits for the first's result
    // rather than reading the same files again.
    let mut kept = cache.kept.lock().await;
    let root = cache.root.clone();
    let now = tokio::task::spawn_blocking(move || listing(&root))
        .await
        .map_err(|e| StatementError::Row {
            table: "history",
            message: format!("listing the files: {e}"),
        })?
        .map_err(|e| StatementError::Row {
            table: "history",
            message: format!("listing the files: {e}"),
        })?;
    if let Some((seen, recorded)) = kept.as_ref()
        && *seen == now
    {
        return Ok(recorded.clone());
    }
    let fresh = Arc::new(load(ctx).await?);
    *kept = Some((now, fresh.clone()));
    Ok(fresh)
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
    let span = ctx.sql(SPAN).await?.collect().await?;
    let now = timestamp_at(&span, 1);
    crate::telemetry::load(ctx, &mut facts, now).await?;
    Ok(Recorded {
        facts,
        first: timestamp_at(&span, 0),
        now,
        priced: std::sync::Mutex::default(),
    })
}

/// The statement of `period`, up to the ledger's time.
pub async fn statement(
    ctx: &SessionContext,
    period: Period,
) -> Result<Arc<Statement>, StatementError> {
    recorded(ctx).await?.statement(period)
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
