//! `CASE WHEN condition THEN column ELSE constant END` as one select over
//! the batch.
//!
//! Ad-hoc queries over samples sum "this column where that holds, else
//! 0" (`sum(CASE WHEN sm_util_pct < 5 THEN interval_ms ELSE 0 END)`).
//! DataFusion evaluates such a `CASE` by filtering the batch for each
//! branch and merging the results, copying the constant in one row at a
//! time. Where the `THEN` side is a numeric column (or a widening cast of
//! one), it can be read for the whole batch without failing, and the
//! answer is a single pass choosing, row by row, the column's value or the
//! constant. [`CaseSelect`] is a physical optimizer rule that swaps those
//! `CASE` expressions, in projections and in aggregate arguments, for
//! [`SelectExpr`]; the results are the same, nulls included: a row whose
//! condition is null takes the constant, a row whose condition holds takes
//! the column, null or not.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray, RecordBatch,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, Schema,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{CaseExpr, CastExpr, Column, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

/// `CASE WHEN when THEN then ELSE otherwise END` where `then` is a numeric
/// column (or a widening cast of one) and `otherwise` a non-null constant
/// of the same type.
#[derive(Debug, Eq)]
pub struct SelectExpr {
    when: Arc<dyn PhysicalExpr>,
    then: Arc<dyn PhysicalExpr>,
    otherwise: ScalarValue,
}

// By hand: deriving them moves out of the `Arc<dyn …>` fields
// (rust-lang/rust#78808).
impl PartialEq for SelectExpr {
    fn eq(&self, other: &Self) -> bool {
        self.when.eq(&other.when) && self.then.eq(&other.then) && self.otherwise == other.otherwise
    }
}

impl std::hash::Hash for SelectExpr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.when.hash(state);
        self.then.hash(state);
        self.otherwise.hash(state);
    }
}

impl SelectExpr {
    /// The select a `CASE` expression is, if it is of that form.
    pub fn of(case: &CaseExpr, schema: &Schema) -> Option<SelectExpr> {
        let [(when, then)] = case.when_then_expr() else {
            return None;
        };
        if case.expr().is_some() || !reads_a_column_whole(then, schema) {
            return None;
        }
        let otherwise = case.else_expr()?.downcast_ref::<Literal>()?;
        let data_type = then.data_type(schema).ok()?;
        let value = otherwise.value();
        if value.is_null() || value.data_type() != data_type || !selectable(&data_type) {
            return None;
        }
        Some(SelectExpr {
            when: when.clone(),
            then: then.clone(),
            otherwise: value.clone(),
        })
    }
}

/// The types [`SelectExpr`] chooses values of.
fn selectable(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
    )
}

/// A column, or a cast of a numeric column to a wider number (see
/// [`widening`]): it can be evaluated for every row of a batch, whatever
/// the condition, and never fails.
fn reads_a_column_whole(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    if expr.is::<Column>() {
        return true;
    }
    let Some(cast) = expr.downcast_ref::<CastExpr>() else {
        return false;
    };
    cast.expr().is::<Column>()
        && cast
            .expr()
            .data_type(schema)
            .is_ok_and(|from| widening(&from, cast.cast_type()))
}

/// Whether a cast from `from` to `to` always succeeds.
fn widening(from: &DataType, to: &DataType) -> bool {
    match to {
        DataType::Int64 => matches!(
            from,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        ),
        // Every type a select chooses from becomes a Float64.
        DataType::Float64 => selectable(from),
        _ => false,
    }
}

impl fmt::Display for SelectExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CASE WHEN {} THEN {} ELSE {} END",
            self.when, self.then, self.otherwise
        )
    }
}

impl PhysicalExpr for SelectExpr {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.then.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.then.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let when = self.when.evaluate(batch)?.into_array(rows)?;
        let Some(when) = when.as_boolean_opt() else {
            return internal_err!("CASE condition is not boolean: {}", when.data_type());
        };
        // A null condition does not hold.
        let mask = match when.nulls() {
            Some(nulls) => when.values() & nulls.inner(),
            None => when.values().clone(),
        };
        let then = self.then.evaluate(batch)?.into_array(rows)?;
        let chosen = match (&self.otherwise, then.data_type()) {
            (ScalarValue::Int8(Some(v)), DataType::Int8) => select::<Int8Type>(&mask, &then, *v),
            (ScalarValue::Int16(Some(v)), DataType::Int16) => select::<Int16Type>(&mask, &then, *v),
            (ScalarValue::Int32(Some(v)), DataType::Int32) => select::<Int32Type>(&mask, &then, *v),
            (ScalarValue::Int64(Some(v)), DataType::Int64) => select::<Int64Type>(&mask, &then, *v),
            (ScalarValue::Float32(Some(v)), DataType::Float32) => {
                select::<Float32Type>(&mask, &then, *v)
            }
            (ScalarValue::Float64(Some(v)), DataType::Float64) => {
                select::<Float64Type>(&mask, &then, *v)
            }
            (other, data_type) => {
                return internal_err!("CASE select of {other:?} and a {data_type} column");
            }
        };
        Ok(ColumnarValue::Array(chosen))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.when, &self.then]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [when, then] = <[_; 2]>::try_from(children).map_err(|c| {
            datafusion::error::DataFusionError::Internal(format!(
                "a CASE select has two children, not {}",
                c.len()
            ))
        })?;
        Ok(Arc::new(SelectExpr {
            when,
            then,
            otherwise: self.otherwise.clone(),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CASE WHEN ")?;
        self.when.fmt_sql(f)?;
        write!(f, " THEN ")?;
        self.then.fmt_sql(f)?;
        write!(f, " ELSE {} END", self.otherwise)
    }
}

/// Row by row, `then`'s value where `mask` is set, `otherwise` elsewhere;
/// null only where `mask` is set and `then` is null.
fn select<T: ArrowPrimitiveType>(
    mask: &BooleanBuffer,
    then: &ArrayRef,
    otherwise: T::Native,
) -> ArrayRef {
    let then = then.as_primitive::<T>();
    let values: ScalarBuffer<T::Native> = then
        .values()
        .iter()
        .zip(mask.iter())
        .map(|(value, chosen)| if chosen { *value } else { otherwise })
        .collect();
    let nulls = then
        .nulls()
        .map(|nulls| NullBuffer::new(nulls.inner() | &!mask));
    Arc::new(PrimitiveArray::<T>::new(values, nulls))
}

/// The physical optimizer rule that puts [`SelectExpr`] in place of the
/// `CASE` expressions it can stand for, in projections and aggregate
/// arguments.
#[derive(Debug, Default)]
pub struct CaseSelect;

impl CaseSelect {
    /// `expr` with every `CASE` of the select form replaced.
    fn rewrite(
        expr: &Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
        Arc::clone(expr).transform_up(|e| {
            let Some(case) = e.downcast_ref::<CaseExpr>() else {
                return Ok(Transformed::no(e));
            };
            match SelectExpr::of(case, schema) {
                Some(select) => Ok(Transformed::yes(Arc::new(select) as Arc<dyn PhysicalExpr>)),
                None => Ok(Transformed::no(e)),
            }
        })
    }
}

impl PhysicalOptimizerRule for CaseSelect {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                let schema = aggregate.input_schema();
                let mut changed = false;
                let mut exprs = Vec::with_capacity(aggregate.aggr_expr().len());
                for expr in aggregate.aggr_expr() {
                    let mut args = Vec::new();
                    let mut any = false;
                    for arg in expr.expressions() {
                        let t = Self::rewrite(&arg, &schema)?;
                        any |= t.transformed;
                        args.push(t.data);
                    }
                    let order_bys = expr.order_bys().iter().map(|s| s.expr.clone()).collect();
                    match any
                        .then(|| expr.with_new_expressions(args, order_bys))
                        .flatten()
                    {
                        Some(rewritten) => {
                            changed = true;
                            exprs.push(Arc::new(rewritten));
                        }
                        None => exprs.push(expr.clone()),
                    }
                }
                if changed {
                    let rewritten: Arc<dyn ExecutionPlan> =
                        Arc::new(aggregate.with_new_aggr_exprs(exprs));
                    return Ok(Transformed::yes(rewritten));
                }
            } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
                let schema = projection.input().schema();
                let mut changed = false;
                let mut exprs = Vec::with_capacity(projection.expr().len());
                for p in projection.expr() {
                    let t = Self::rewrite(&p.expr, &schema)?;
                    changed |= t.transformed;
                    exprs.push(ProjectionExpr {
                        expr: t.data,
                        alias: p.alias.clone(),
                    });
                }
                if changed {
                    let rewritten: Arc<dyn ExecutionPlan> =
                        Arc::new(ProjectionExec::try_new(exprs, projection.input().clone())?);
                    return Ok(Transformed::yes(rewritten));
                }
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "case_select"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Float32Array, Int32Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, cast, col, is_not_null, lit};
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;
    use proptest::prelude::*;

    use super::*;

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("sm", DataType::Float32, true),
            Field::new("ms", DataType::Int32, true),
        ]))
    }

    fn batch(rows: &[(Option<f32>, Option<i32>)]) -> RecordBatch {
        let sm: Float32Array = rows.iter().map(|r| r.0).collect();
        let ms: Int32Array = rows.iter().map(|r| r.1).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(sm), Arc::new(ms)]).unwrap()
    }

    /// `CASE WHEN <when> THEN CAST(ms AS Int64) ELSE 0 END`, as DataFusion builds it.
    fn case(when: Arc<dyn PhysicalExpr>) -> CaseExpr {
        let schema = schema();
        let then = cast(col("ms", &schema).unwrap(), &schema, DataType::Int64).unwrap();
        CaseExpr::try_new(None, vec![(when, then)], Some(lit(0i64))).unwrap()
    }

    fn idle(schema: &Schema) -> Arc<dyn PhysicalExpr> {
        binary(col("sm", schema).unwrap(), Operator::Lt, lit(5f32), schema).unwrap()
    }

    proptest! {
        /// Row by row the same answer as DataFusion's own `CASE`, nulls
        /// in the condition and in the column included.
        #[test]
        fn a_select_answers_as_the_case(
            rows in proptest::collection::vec(
                (proptest::option::of(0f32..10.0), proptest::option::of(-1000i32..1000)),
                0..300,
            )
        ) {
            let batch = batch(&rows);
            let schema = schema();
            for when in [idle(&schema), is_not_null(col("ms", &schema).unwrap()).unwrap()] {
                let case = case(when);
                let select = SelectExpr::of(&case, &schema).expect("a select");
                let want = case.evaluate(&batch).unwrap().into_array(batch.num_rows()).unwrap();
                let got = select.evaluate(&batch).unwrap().into_array(batch.num_rows()).unwrap();
                prop_assert_eq!(want.as_ref(), got.as_ref());
            }
        }
    }

    #[test]
    fn only_a_column_or_a_widening_cast_against_a_constant_is_a_select() {
        let schema = schema();
        let ms = col("ms", &schema).unwrap();
        // THEN a computed value: it may fail (or cost) on rows the
        // condition leaves out.
        let sum = binary(ms.clone(), Operator::Plus, lit(1i32), &schema).unwrap();
        let computed =
            CaseExpr::try_new(None, vec![(idle(&schema), sum)], Some(lit(0i32))).unwrap();
        assert!(SelectExpr::of(&computed, &schema).is_none());
        // ELSE NULL, or another column: not a constant.
        let to_null = CaseExpr::try_new(
            None,
            vec![(idle(&schema), ms.clone())],
            Some(lit(ScalarValue::Int32(None))),
        )
        .unwrap();
        assert!(SelectExpr::of(&to_null, &schema).is_none());
        // A narrowing cast may fail.
        let narrow = cast(ms.clone(), &schema, DataType::Int8).unwrap();
        let narrowing =
            CaseExpr::try_new(None, vec![(idle(&schema), narrow)], Some(lit(0i8))).unwrap();
        assert!(SelectExpr::of(&narrowing, &schema).is_none());
        // The column itself, of the constant's type.
        let plain = CaseExpr::try_new(None, vec![(idle(&schema), ms)], Some(lit(0i32))).unwrap();
        assert!(SelectExpr::of(&plain, &schema).is_some());
    }

    /// Through a session: the rule replaces the `CASE` in the aggregate's
    /// arguments and the sums are what they were without it.
    #[tokio::test]
    async fn the_rule_keeps_the_answer() {
        let rows: Vec<(Option<f32>, Option<i32>)> = (0..1000)
            .map(|i| {
                let sm = (i % 7 != 0).then_some((i % 11) as f32);
                let ms = (i % 5 != 0).then_some(i);
                (sm, ms)
            })
            .collect();
        let table =
            datafusion::datasource::MemTable::try_new(schema(), vec![vec![batch(&rows)]]).unwrap();
        let ctx = SessionContext::new();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let sql = "SELECT sum(CASE WHEN sm < 5 THEN ms ELSE 0 END) AS idle, \
                   sum(CASE WHEN ms IS NOT NULL THEN sm ELSE 0 END) AS held FROM t";
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let without = collect(plan.clone(), ctx.task_ctx()).await.unwrap();
        let rewritten = CaseSelect
            .optimize(plan.clone(), &ConfigOptions::default())
            .unwrap();
        let mut selects = 0;
        rewritten
            .apply(|node| {
                if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
                    // The second sum's select sits under a cast to Float64.
                    for arg in aggregate.aggr_expr().iter().flat_map(|e| e.expressions()) {
                        arg.apply(|e| {
                            selects += usize::from(e.downcast_ref::<SelectExpr>().is_some());
                            Ok(TreeNodeRecursion::Continue)
                        })
                        .unwrap();
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
        assert_eq!(
            selects,
            2,
            "{}",
            datafusion::physical_plan::displayable(rewritten.as_ref()).indent(true)
        );
        let with = collect(rewritten, ctx.task_ctx()).await.unwrap();
        assert_eq!(with, without);
    }
}
