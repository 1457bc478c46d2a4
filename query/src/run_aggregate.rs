//! Partial aggregation that looks a group up once per run of equal keys.
//!
//! History is written sorted (samples by device, then time), so the columns
//! people group by — pool, tenant, model, the date of the file — keep the
//! same value for hundreds or thousands of rows in a row. DataFusion's
//! partial aggregation hashes and compares the key of every row.
//! [`RunAggregateExec`] first finds where the key changes (one vectorised
//! comparison of each row with the one before it), interns only the first
//! row of each run, and hands the accumulators that group for the whole
//! run. A batch whose runs are short (under [`MIN_RUN`] rows on average) is
//! interned row by row. When the first batch of a partition has short runs
//! (a grouping by something near unique), the whole partition goes to
//! DataFusion's own operator, which also knows when partial aggregation is
//! not worth doing at all.
//!
//! The group table, the accumulators and the output (groups, then each
//! aggregate's partial state) are DataFusion's own, so the final stage
//! above cannot tell which operator fed it. [`RunAggregate`] is the physical
//! optimizer rule that puts the operator in place of the partial
//! aggregations it can stand for.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{partition, prep_null_mask_filter, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode,
    PlanProperties, ReplaceChildrenOptions,
};
use futures::{StreamExt, TryStreamExt};

/// The shortest average run, in rows, for which a batch is interned run by
/// run; below it every row is interned.
pub const MIN_RUN: usize = 4;

/// The physical optimizer rule that puts [`RunAggregateExec`] in place of
/// every partial aggregation it can stand for (see [`RunAggregateExec::of`]).
#[derive(Debug, Default)]
pub struct RunAggregate;

impl PhysicalOptimizerRule for RunAggregate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| match RunAggregateExec::of(&node) {
            Some(exec) => Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>)),
            None => Ok(Transformed::no(node)),
        })
        .data()
    }

    fn name(&self) -> &str {
        "run_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A partial `AggregateExec` that interns one key per run of equal keys.
#[derive(Debug)]
pub struct RunAggregateExec {
    /// The partial aggregation this operator stands for: its expressions,
    /// its output schema and its properties.
    inner: Arc<dyn ExecutionPlan>,
    input: Arc<dyn ExecutionPlan>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    group_schema: SchemaRef,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    metrics: ExecutionPlanMetricsSet,
}

impl RunAggregateExec {
    /// The operator for `plan` when `plan` is a partial aggregation it can
    /// stand for: one plain grouping (no grouping sets), every aggregate
    /// with a groups accumulator and neither `DISTINCT` nor `ORDER BY`, no
    /// limit, no dynamic filter, and input in no useful order (an ordered
    /// input is DataFusion's streaming aggregation's to handle).
    pub fn of(plan: &Arc<dyn ExecutionPlan>) -> Option<Self> {
        let aggregate = plan.downcast_ref::<AggregateExec>()?;
        let group_by = aggregate.group_expr();
        let applies = *aggregate.mode() == AggregateMode::Partial
            && group_by.is_single()
            && !group_by.expr().is_empty()
            && aggregate.limit_options().is_none()
            && aggregate.dynamic_expressions_produced().is_empty()
            && *aggregate.input_order_mode() == InputOrderMode::Linear
            && aggregate.aggr_expr().iter().all(|a| {
                a.groups_accumulator_supported() && !a.is_distinct() && a.order_bys().is_empty()
            });
        if !applies {
            return None;
        }
        let group_schema = group_by.group_schema(&aggregate.input_schema()).ok()?;
        Some(Self {
            inner: Arc::clone(plan),
            input: Arc::clone(aggregate.input()),
            group_exprs: group_by.expr().iter().map(|(e, _)| Arc::clone(e)).collect(),
            group_schema,
            aggregates: aggregate.aggr_expr().to_vec(),
            filters: aggregate.filter_expr().to_vec(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

impl DisplayAs for RunAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunAggregateExec (one lookup per run of equal keys) as ")?;
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for RunAggregateExec {
    fn name(&self) -> &str {
        "RunAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let inner = Arc::clone(&self.inner).replace_children(children, options)?;
        Ok(match Self::of(&inner) {
            Some(exec) => Arc::new(exec),
            None => inner,
        })
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let mut input = self.input.execute(partition, Arc::clone(&context))?;
        let aggregator = Aggregator {
            schema: self.schema(),
            group_exprs: self.group_exprs.clone(),
            groups: new_group_values(Arc::clone(&self.group_schema), &GroupOrdering::None)?,
            args: self.aggregates.iter().map(|a| a.expressions()).collect(),
            filters: self.filters.clone(),
            accumulators: self
                .aggregates
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<Result<_>>()?,
            indices: Vec::new(),
            run_groups: Vec::new(),
            batch_size: context.session_config().batch_size(),
            reservation: MemoryConsumer::new(format!("RunAggregateExec[{partition}]"))
                .with_can_spill(true)
                .register(context.memory_pool()),
            metrics: BaselineMetrics::new(&self.metrics, partition),
        };
        let inner = Arc::clone(&self.inner);
        let input_properties = Arc::clone(self.input.properties());
        // The first batch decides: keys in runs, this operator; keys that
        // change from row to row (a grouping by something near unique),
        // DataFusion's own, which also knows when to skip partial
        // aggregation altogether.
        let decided = async move {
            let first = loop {
                match input.next().await {
                    Some(Ok(batch)) if batch.num_rows() == 0 => continue,
                    Some(Ok(batch)) => break Some(batch),
                    Some(Err(e)) => return Err(e),
                    None => break None,
                }
            };
            let in_runs = match &first {
                Some(batch) => average_run(&evaluate(&aggregator.group_exprs, batch)?)? >= MIN_RUN,
                None => true,
            };
            let schema = input.schema();
            let input: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::iter(first.map(Ok)).chain(input),
            ));
            if in_runs {
                Ok(aggregator.run(input))
            } else {
                let resumed = Arc::new(Resumed::new(input, input_properties));
                let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep);
                inner
                    .replace_children(vec![resumed], options)?
                    .execute(partition, context)
            }
        };
        let stream = futures::stream::once(decided).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The state of one partition's partial aggregation.
struct Aggregator {
    /// The partial aggregation's output: groups, then each aggregate's state.
    schema: SchemaRef,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    groups: Box<dyn GroupValues>,
    args: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// The group of each row of the batch at hand.
    indices: Vec<usize>,
    /// The group of each run of the batch at hand.
    run_groups: Vec<usize>,
    batch_size: usize,
    reservation: MemoryReservation,
    metrics: BaselineMetrics,
}

impl Aggregator {
    /// The partial aggregation of `input`, as a stream of its output.
    fn run(self, input: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.schema);
        let state = (Some(input), self, VecDeque::<RecordBatch>::new());
        let stream = futures::stream::unfold(state, |(mut input, mut agg, mut ready)| async move {
            loop {
                if let Some(batch) = ready.pop_front() {
                    agg.metrics.record_output(batch.num_rows());
                    return Some((Ok(batch), (input, agg, ready)));
                }
                let next = input.as_mut()?.next().await;
                let step = match next {
                    Some(Ok(batch)) => agg.push(&batch, &mut ready),
                    Some(Err(e)) => Err(e),
                    None => {
                        input = None;
                        agg.emit(&mut ready)
                    }
                };
                if let Err(e) = step {
                    return Some((Err(e), (None, agg, VecDeque::new())));
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, stream))
    }

    /// Adds `batch` to the groups. Should the memory pool refuse the groups
    /// their room, they are emitted into `ready` and the aggregation starts
    /// afresh (a partial aggregation may emit at any time).
    fn push(&mut self, batch: &RecordBatch, ready: &mut VecDeque<RecordBatch>) -> Result<()> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        let elapsed = self.metrics.elapsed_compute().clone();
        let _timer = elapsed.timer();
        let keys = evaluate(&self.group_exprs, batch)?;
        self.assign_groups(&keys)?;
        let total_groups = self.groups.len();
        for ((accumulator, args), filter) in self
            .accumulators
            .iter_mut()
            .zip(&self.args)
            .zip(&self.filters)
        {
            let values = evaluate(args, batch)?;
            let filter = match filter {
                Some(f) => {
                    let mask = f.evaluate(batch)?.into_array(rows)?;
                    let Some(mask) = mask.as_boolean_opt() else {
                        return internal_err!("an aggregate's FILTER is not boolean");
                    };
                    // A null is not true: the row is left out.
                    Some(match mask.nulls() {
                        Some(_) => prep_null_mask_filter(mask),
                        None => mask.clone(),
                    })
                }
                None => None,
            };
            accumulator.update_batch(&values, &self.indices, filter.as_ref(), total_groups)?;
        }
        let held = self.groups.size()
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
            + self.indices.capacity() * size_of::<usize>();
        if self.reservation.try_resize(held).is_err() {
            self.emit(ready)?;
        }
        Ok(())
    }

    /// Fills `indices` with the group of every row of `keys`.
    fn assign_groups(&mut self, keys: &[ArrayRef]) -> Result<()> {
        let rows = keys.first().map_or(0, |k| k.len());
        self.indices.clear();
        let runs = partition(keys)?;
        if runs.len() * MIN_RUN > rows {
            // Short runs here: every row looked up.
            return self.groups.intern(keys, &mut self.indices);
        }
        let ranges = runs.ranges();
        let starts = UInt32Array::from_iter_values(ranges.iter().map(|r| r.start as u32));
        let firsts = keys
            .iter()
            .map(|k| take(k.as_ref(), &starts, None))
            .collect::<Result<Vec<_>, _>>()?;
        self.run_groups.clear();
        self.groups.intern(&firsts, &mut self.run_groups)?;
        for (range, &group) in ranges.iter().zip(&self.run_groups) {
            self.indices
                .extend(std::iter::repeat_n(group, range.end - range.start));
        }
        Ok(())
    }

    /// Moves every group, with each aggregate's state, into `ready`, in
    /// batches of the session's batch size.
    fn emit(&mut self, ready: &mut VecDeque<RecordBatch>) -> Result<()> {
        if self.groups.is_empty() {
            return Ok(());
        }
        let mut columns = self.groups.emit(EmitTo::All)?;
        for accumulator in &mut self.accumulators {
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = self.batch_size.max(1).min(batch.num_rows() - offset);
            ready.push_back(batch.slice(offset, len));
            offset += len;
        }
        self.reservation.free();
        Ok(())
    }
}

/// The average length of the runs of equal rows of `keys`.
fn average_run(keys: &[ArrayRef]) -> Result<usize> {
    let rows = keys.first().map_or(0, |k| k.len());
    let runs = partition(keys)?.len();
    Ok(rows / runs.max(1))
}

/// An input already started: the stream of one partition, handed to the
/// `AggregateExec` that takes over from a [`RunAggregateExec`].
struct Resumed {
    stream: std::sync::Mutex<Option<SendableRecordBatchStream>>,
    properties: Arc<PlanProperties>,
}

impl Resumed {
    fn new(stream: SendableRecordBatchStream, properties: Arc<PlanProperties>) -> Self {
        Self {
            stream: std::sync::Mutex::new(Some(stream)),
            properties,
        }
    }
}

impl fmt::Debug for Resumed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resumed")
    }
}

impl DisplayAs for Resumed {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resumed: an input already started")
    }
}

impl ExecutionPlan for Resumed {
    fn name(&self) -> &str {
        "Resumed"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
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
        internal_err!("a resumed input has no children")
    }

    fn execute(&self, _: usize, _: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        match self.stream.lock().ok().and_then(|mut s| s.take()) {
            Some(stream) => Ok(stream),
            None => internal_err!("a resumed input was executed twice"),
        }
    }
}

/// Each of `exprs` evaluated over `batch`, as arrays.
fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}

#[cfg(test)]
mod tests;
