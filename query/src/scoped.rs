//! A history table as a team lead may scan it.
//!
//! [`Scoped`] stands in for a table in a lead's plan. Its scan is a leaf,
//! [`ScopedScanExec`], that runs the table's own scan inside itself and
//! passes on only the rows of the lead's tenant: nothing above it, no
//! expression the query wrote, ever sees another tenant's row. The scan it
//! wraps is hidden from the plan, so `EXPLAIN` shows neither its files
//! nor its row counts, and no optimizer rule can push a predicate of the
//! query into it or merge one with the tenant test.
//!
//! The query's filters reach the wrapped scan only where they cannot fail
//! on a value (a column compared with a literal, `IN`, `IS NULL` and the
//! ands, ors and nots of those): the scan may use them to skip files and
//! row groups, and the same filters still run above, on the lead's rows.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::compute::kernels::cmp::eq;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::StreamExt;

/// The column that names a row's tenant.
pub(crate) const TENANT: &str = "tenant";

/// A table as one caller may scan it: only `tenant`'s rows when the
/// table has a tenant column, and never its files in a plan.
#[derive(Debug)]
pub(crate) struct Scoped {
    name: String,
    inner: Arc<dyn TableProvider>,
    /// The tenant whose rows pass, with the tenant column's index in the
    /// table; `None`: a table without tenants, every row passes.
    tenant: Option<(String, usize)>,
}

impl Scoped {
    /// `inner` (named `name`) as `tenant` may read it.
    pub(crate) fn new(name: String, inner: Arc<dyn TableProvider>, tenant: &str) -> Self {
        let column = inner.schema().index_of(TENANT).ok();
        Self {
            name,
            inner,
            tenant: column.map(|c| (tenant.to_owned(), c)),
        }
    }
}

#[async_trait]
impl TableProvider for Scoped {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Never exact: every filter of the query runs again above the scan.
        Ok(filters
            .iter()
            .map(|f| {
                if cannot_fail(f) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let all = self.schema();
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..all.fields().len()).collect(),
        };
        // The wrapped scan reads the wanted columns and the tenant's; the
        // tenant test comes first, then only the wanted columns go on.
        let mut read = wanted.clone();
        let tenant = match &self.tenant {
            Some((tenant, column)) => {
                let at = match read.iter().position(|c| c == column) {
                    Some(at) => at,
                    None => {
                        read.push(*column);
                        read.len() - 1
                    }
                };
                Some((tenant.clone(), at))
            }
            None => None,
        };
        let safe: Vec<Expr> = filters.iter().filter(|f| cannot_fail(f)).cloned().collect();
        // No row limit for the wrapped scan: it would count rows before the
        // tenant test.
        let scan = self.inner.scan(state, Some(&read), &safe, None).await?;
        let schema = Arc::new(all.project(&wanted)?);
        Ok(Arc::new(ScopedScanExec::new(
            self.name.clone(),
            scan,
            tenant,
            (0..wanted.len()).collect(),
            schema,
        )))
    }
}

/// Whether evaluating `filter` on any row can only give true, false or
/// null, never an error that would carry the row's values.
fn cannot_fail(filter: &Expr) -> bool {
    match filter {
        Expr::BinaryExpr(b) => match b.op {
            Operator::And | Operator::Or => cannot_fail(&b.left) && cannot_fail(&b.right),
            Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom => {
                // A column compared with a literal: the analyzer has made
                // their types agree, or put a cast on one side (a cast of
                // the column is refused here, as it can fail on a value).
                (is_column(&b.left) && is_literal(&b.right))
                    || (is_literal(&b.left) && is_column(&b.right))
            }
            _ => false,
        },
        Expr::Not(e) => cannot_fail(e),
        Expr::IsNull(e) | Expr::IsNotNull(e) => is_column(e),
        Expr::InList(list) => is_column(&list.expr) && list.list.iter().all(is_literal),
        Expr::Between(b) => is_column(&b.expr) && is_literal(&b.low) && is_literal(&b.high),
        _ => false,
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Column(_))
}

/// A literal, or a cast of one: a cast of the query's own text can fail
/// only on that text.
fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Literal(..) => true,
        Expr::Cast(c) => is_literal(&c.expr),
        Expr::TryCast(c) => is_literal(&c.expr),
        _ => false,
    }
}

/// The scan of a [`Scoped`] table: a leaf that runs the table's own scan
/// and yields only the tenant's rows, in the columns asked for.
pub(crate) struct ScopedScanExec {
    table: String,
    scan: Arc<dyn ExecutionPlan>,
    /// The tenant whose rows pass and where its column is in the wrapped
    /// scan's output.
    tenant: Option<(String, usize)>,
    /// The columns of the wrapped scan's output that go on.
    keep: Vec<usize>,
    properties: Arc<PlanProperties>,
}

impl ScopedScanExec {
    fn new(
        table: String,
        scan: Arc<dyn ExecutionPlan>,
        tenant: Option<(String, usize)>,
        keep: Vec<usize>,
        schema: SchemaRef,
    ) -> Self {
        let partitions = scan.output_partitioning().partition_count();
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            table,
            scan,
            tenant,
            keep,
            properties: Arc::new(properties),
        }
    }
}

impl fmt::Debug for ScopedScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedScanExec")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DisplayAs for ScopedScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tenant {
            Some((tenant, _)) => write!(f, "TenantScan: table={}, tenant={tenant}", self.table),
            None => write!(f, "TenantScan: table={}", self.table),
        }
    }
}

impl ExecutionPlan for ScopedScanExec {
    fn name(&self) -> &str {
        "TenantScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        // The wrapped scan is not a child: no rule may look into it, and
        // no plan shows it.
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            return Ok(self);
        }
        internal_err!("a tenant scan has no children")
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let rows = self.scan.execute(partition, context)?;
        let tenant = match &self.tenant {
            Some((tenant, column)) => {
                let data_type = self.scan.schema().field(*column).data_type().clone();
                let value = ScalarValue::try_from_string(tenant.clone(), &data_type)?;
                Some((value.to_scalar()?, *column))
            }
            None => None,
        };
        let keep = self.keep.clone();
        let schema = self.schema();
        let out = rows.map(move |batch| {
            let batch = batch?;
            let batch = match &tenant {
                Some((value, column)) => {
                    // Null tenants compare as null, and null rows are dropped.
                    let own = eq(batch.column(*column), value)?;
                    filter_record_batch(&batch, &own)?
                }
                None => batch,
            };
            project(&batch, &keep)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, out)))
    }
}

/// `batch` in the columns `keep`, its row count kept when none are.
fn project(batch: &RecordBatch, keep: &[usize]) -> Result<RecordBatch> {
    if keep.len() == batch.num_columns() && keep.iter().enumerate().all(|(i, c)| i == *c) {
        return Ok(batch.clone());
    }
    Ok(batch.project(keep)?)
}
