//! The statement views (DESIGN §7): `chargeback` (one row per tenant,
//! period and statement line), `statements` (one row per tenant and
//! period, every line a column), `job_costs` (one row per job attempt and
//! period) and `tenant_usage_hourly` (GPU-hours per hour, tenant, pool and
//! kind). They are tables whose rows are computed when scanned, by the
//! same billing module as `GET /v1/statements`, from the history as it
//! stands; a filter `period = 'YYYY-MM'` limits the work to that month.
//! Amounts are `DECIMAL(38, 2)`: exact, already rounded; a job's amounts
//! are its charges' shares of the statement lines, so they add up to them.

mod attempts;

/// `utilization`: the raw samples per hour and device (and the tenant and
/// job holding it). Seconds come from each sample's interval; a sample
/// counts as idle when its SM activity is known and below 5 % (DESIGN §5).
/// Power is averaged over samples that report it; an unsupported value is
/// null, never 0.
pub(crate) const UTILIZATION: &str = "CREATE VIEW utilization AS \
    SELECT date_trunc('hour', \"time\") AS \"hour\", \"cluster\", pool, node, model, device_uuid, \
        parent_gpu_uuid, mig_profile, slices, max_slices, tenant, job_id, \
        count(*) AS samples, \
        CAST(sum(interval_ms) AS DOUBLE) / 1000.0 AS covered_s, \
        CAST(sum(CASE WHEN sm_util_pct < 5 THEN interval_ms ELSE 0 END) AS DOUBLE) / 1000.0 AS idle_s, \
        avg(sm_util_pct) AS sm_util_pct, \
        avg(mem_util_pct) AS mem_util_pct, \
        max(mem_used_bytes) AS mem_used_max_bytes, \
        max(mem_total_bytes) AS mem_total_bytes, \
        avg(power_mw) / 1000.0 AS power_w \
    FROM samples \
    GROUP BY date_trunc('hour', \"time\"), \"cluster\", pool, node, model, device_uuid, \
        parent_gpu_uuid, mig_profile, slices, max_slices, tenant, job_id";

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, Decimal128Builder, Int64Builder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use gpuledger_schemas::Decimal;
use gpuledger_schemas::billing::{Period, Statement};
use gpuledger_schemas::pricing::StatementLine;

use crate::statements::{self, Recorded};

/// Money columns: exact decimals with two fractional digits.
const MONEY: DataType = DataType::Decimal128(38, 2);

/// Which view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Chargeback,
    Statements,
    JobCosts,
    UsageHourly,
}

/// A statement view.
#[derive(Debug)]
pub struct StatementView {
    shape: Shape,
    schema: SchemaRef,
    /// Rows of this tenant only; `None`: every tenant's.
    tenant: Option<String>,
}

impl StatementView {
    fn new(shape: Shape, schema: SchemaRef) -> Self {
        Self {
            shape,
            schema,
            tenant: None,
        }
    }

    /// The same view with the rows of `tenant` alone: the others are never
    /// built.
    pub fn only(&self, tenant: &str) -> Self {
        Self {
            shape: self.shape,
            schema: self.schema.clone(),
            tenant: Some(tenant.to_owned()),
        }
    }

    /// `chargeback`: period, currency, tenant, line, amount.
    pub fn chargeback() -> Self {
        let schema = Schema::new(vec![
            Field::new("period", DataType::Utf8, false),
            Field::new("currency", DataType::Utf8, false),
            Field::new("tenant", DataType::Utf8, false),
            Field::new("line", DataType::Utf8, false),
            Field::new("amount", MONEY, false),
        ]);
        Self::new(Shape::Chargeback, Arc::new(schema))
    }

    /// `statements`: period, currency, tenant, a column per line, and the
    /// breakdowns (work units as JSON objects keyed by unit name).
    pub fn statements() -> Self {
        let mut fields = vec![
            Field::new("period", DataType::Utf8, false),
            Field::new("currency", DataType::Utf8, false),
            Field::new("tenant", DataType::Utf8, false),
        ];
        fields.extend(
            StatementLine::ALL
                .iter()
                .map(|l| Field::new(l.as_str(), MONEY, false)),
        );
        fields.extend([
            Field::new("failed_work", MONEY, false),
            Field::new("retried_work", MONEY, false),
            Field::new("idle_allocated", MONEY, true),
            Field::new("completed_jobs", DataType::Int64, false),
            Field::new("cost_per_completed_job", MONEY, true),
            Field::new("completed_work_units", DataType::Utf8, false),
            Field::new("cost_per_work_unit", DataType::Utf8, false),
        ]);
        Self::new(Shape::Statements, Arc::new(Schema::new(fields)))
    }

    /// `job_costs`: one row per job attempt and period.
    pub fn job_costs() -> Self {
        Self::new(Shape::JobCosts, attempts::job_costs_schema())
    }

    /// `tenant_usage_hourly`: GPU-hours per hour, tenant, pool and kind.
    pub fn tenant_usage_hourly() -> Self {
        Self::new(Shape::UsageHourly, attempts::usage_hourly_schema())
    }

    fn rows(&self, recorded: &Recorded, statements: &[Arc<Statement>]) -> Result<RecordBatch> {
        let columns = match self.shape {
            Shape::Chargeback => chargeback_columns(statements)?,
            Shape::Statements => statement_columns(statements)?,
            Shape::JobCosts => attempts::job_costs_columns(recorded, statements)?,
            Shape::UsageHourly => attempts::usage_hourly_columns(statements)?,
        };
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// A two-digit decimal as the unscaled `i128` of `DECIMAL(38, 2)`.
fn cents(d: &Decimal) -> Result<i128> {
    Ok(crate::columns::unscaled(d.as_rational(), 2)?)
}

fn money() -> Decimal128Builder {
    Decimal128Builder::new().with_data_type(MONEY)
}

fn chargeback_columns(statements: &[Arc<Statement>]) -> Result<Vec<ArrayRef>> {
    let (mut period, mut currency, mut tenant, mut line, mut amount) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        money(),
    );
    for s in statements {
        for (t, l, a) in s.rows() {
            period.append_value(s.period.to_string());
            currency.append_value(&s.currency);
            tenant.append_value(t);
            line.append_value(l.as_str());
            amount.append_value(cents(a)?);
        }
    }
    Ok(vec![
        Arc::new(period.finish()),
        Arc::new(currency.finish()),
        Arc::new(tenant.finish()),
        Arc::new(line.finish()),
        Arc::new(amount.finish()),
    ])
}

fn statement_columns(statements: &[Arc<Statement>]) -> Result<Vec<ArrayRef>> {
    let (mut period, mut currency, mut tenant) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let mut lines: Vec<Decimal128Builder> = StatementLine::ALL.iter().map(|_| money()).collect();
    let (mut failed, mut retried, mut idle, mut per_job) = (money(), money(), money(), money());
    let mut jobs = Int64Builder::new();
    let (mut units, mut per_unit) = (StringBuilder::new(), StringBuilder::new());
    for s in statements {
        for t in &s.tenants {
            period.append_value(s.period.to_string());
            currency.append_value(&s.currency);
            tenant.append_value(&t.tenant);
            for (builder, line) in lines.iter_mut().zip(StatementLine::ALL) {
                builder.append_value(cents(&t.line(*line))?);
            }
            let b = &t.breakdown;
            failed.append_value(cents(&b.failed_work)?);
            retried.append_value(cents(&b.retried_work)?);
            idle.append_option(b.idle_allocated.as_ref().map(cents).transpose()?);
            jobs.append_value(b.completed_jobs as i64);
            per_job.append_option(b.cost_per_completed_job.as_ref().map(cents).transpose()?);
            let json = t.to_json();
            units.append_value(json["breakdown"]["completed_work_units"].to_string());
            per_unit.append_value(json["breakdown"]["cost_per_work_unit"].to_string());
        }
    }
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(period.finish()),
        Arc::new(currency.finish()),
        Arc::new(tenant.finish()),
    ];
    columns.extend(lines.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    columns.extend([
        Arc::new(failed.finish()) as ArrayRef,
        Arc::new(retried.finish()),
        Arc::new(idle.finish()),
        Arc::new(jobs.finish()),
        Arc::new(per_job.finish()),
        Arc::new(units.finish()),
        Arc::new(per_unit.finish()),
    ]);
    Ok(columns)
}

/// The periods a filter `period = '…'` (or `'…' = period`, or `period IN
/// (…)`) names; `None` when the filters do not pin the period.
fn pinned_periods(filters: &[Expr]) -> Option<Vec<Period>> {
    let text = |e: &Expr| match e {
        Expr::Literal(ScalarValue::Utf8(Some(s)), _) => s.parse::<Period>().ok(),
        _ => None,
    };
    let is_period = |e: &Expr| matches!(e, Expr::Column(c) if c.name == "period");
    for filter in filters {
        match filter {
            Expr::BinaryExpr(b) if b.op == Operator::Eq => {
                if is_period(&b.left)
                    && let Some(p) = text(&b.right)
                {
                    return Some(vec![p]);
                }
                if is_period(&b.right)
                    && let Some(p) = text(&b.left)
                {
                    return Some(vec![p]);
                }
            }
            Expr::InList(list) if !list.negated && is_period(&list.expr) => {
                let periods: Option<Vec<Period>> = list.list.iter().map(text).collect();
                if periods.is_some() {
                    return periods;
                }
            }
            _ => {}
        }
    }
    None
}

#[async_trait]
impl TableProvider for StatementView {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Used to pick the months to compute; the engine still applies them.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| {
                DataFusionError::Internal("statement views need a SessionState".into())
            })?;
        let ctx = SessionContext::new_with_state(state.clone());
        let recorded = statements::recorded(&ctx)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        // The months the history has, or those of them the filters name:
        // a list of periods costs no more than the months there are.
        let mut periods = recorded.periods();
        if let Some(pinned) = pinned_periods(filters) {
            periods.retain(|p| pinned.contains(p));
        }
        let mut computed = Vec::new();
        for period in periods {
            let statement = recorded
                .statement(period)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            computed.push(match &self.tenant {
                Some(tenant) => Arc::new(statement.only_tenant(tenant)),
                None => statement,
            });
        }
        let batch = self.rows(&recorded, &computed)?;
        let projection = projection.cloned();
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection,
        )?)
    }
}
