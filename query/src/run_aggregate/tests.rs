//! [`RunAggregateExec`] against DataFusion's own partial aggregation.

use datafusion::arrow::array::{Float64Array, Int32Array, Int64Array, StringViewArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::MemTable;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use proptest::prelude::*;

use super::*;

/// Keys of both lengths a string view stores: inline (up to 12 bytes)
/// and in a data buffer.
const NAMES: [&str; 4] = ["pool-a", "pool-b", "a-pool-name-longer-than-twelve", "c"];

/// One run of rows sharing a key: (name or null, number or null,
/// length).
type Run = (Option<usize>, Option<i32>, usize);

fn table(runs: &[Run], batch_rows: usize) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8View, true),
        Field::new("n", DataType::Int32, true),
        Field::new("v", DataType::Float64, true),
        Field::new("w", DataType::Int64, false),
    ]));
    let mut names = Vec::new();
    let mut ns = Vec::new();
    for &(name, n, len) in runs {
        for _ in 0..len {
            names.push(name.map(|i| NAMES[i]));
            ns.push(n);
        }
    }
    let rows = names.len();
    // Halves only, and few: every sum is exact in any order.
    let v: Float64Array = (0..rows)
        .map(|i| (i % 5 != 0).then_some((i % 9) as f64 * 0.5))
        .collect();
    let w = Int64Array::from_iter_values((0..rows).map(|i| (i as i64 % 13) - 6));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringViewArray::from(names)),
            Arc::new(Int32Array::from(ns)),
            Arc::new(v),
            Arc::new(w),
        ],
    )
    .unwrap();
    // Two partitions, each in batches of `batch_rows`.
    let mut partitions = vec![Vec::new(), Vec::new()];
    let mut offset = 0;
    while offset < rows {
        let len = batch_rows.min(rows - offset);
        partitions[(offset / batch_rows) % 2].push(batch.slice(offset, len));
        offset += len;
    }
    MemTable::try_new(schema, partitions).unwrap()
}

fn session(with_rule: bool) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(2);
    let mut state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features();
    if with_rule {
        state = state.with_physical_optimizer_rule(Arc::new(RunAggregate));
    }
    SessionContext::new_with_state(state.build())
}

async fn physical_plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    let frame = ctx.sql(sql).await.unwrap();
    frame.create_physical_plan().await.unwrap()
}

/// The answer to `sql` over `table`, sorted, and whether the plan ran
/// through a [`RunAggregateExec`].
async fn answer(ctx: &SessionContext, sql: &str) -> (String, bool) {
    let plan = physical_plan(ctx, sql).await;
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    let text = pretty_format_batches(&batches).unwrap().to_string();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    (lines.join("\n"), shown.contains("RunAggregateExec"))
}

const QUERIES: [&str; 5] = [
    "SELECT name, n, sum(w), avg(v), count(*), min(v), max(w), \
     count(v) FILTER (WHERE w > 0) FROM t GROUP BY name, n",
    "SELECT name, count(*), sum(v) FROM t WHERE w > -3 AND name IS NOT NULL GROUP BY name",
    "SELECT n, sum(CASE WHEN v < 2 THEN w ELSE 0 END) FROM t GROUP BY n",
    "SELECT name || 'x' AS k, n + 1 AS m, count(*) FROM t GROUP BY k, m",
    // Planned as a grouping by (name, n) under one by name.
    "SELECT name, count(DISTINCT n) FROM t GROUP BY name",
];

fn runs() -> impl Strategy<Value = Vec<Run>> {
    proptest::collection::vec(
        (
            proptest::option::of(0..NAMES.len()),
            proptest::option::of(0..3i32),
            // Mostly long runs, some of a single row.
            prop_oneof![1 => Just(1usize), 3 => 2..60usize],
        ),
        0..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Long runs, short runs, nulls, both kinds of string view and
    /// batches split anywhere: the same groups and sums as DataFusion's
    /// own partial aggregation.
    #[test]
    fn answers_as_the_hash_aggregation(runs in runs(), batch_rows in 1..200usize) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let plain = session(false);
            let with_runs = session(true);
            plain.register_table("t", Arc::new(table(&runs, batch_rows))).unwrap();
            with_runs.register_table("t", Arc::new(table(&runs, batch_rows))).unwrap();
            for sql in QUERIES {
                let (want, used) = answer(&plain, sql).await;
                assert!(!used);
                let (got, used) = answer(&with_runs, sql).await;
                assert!(used, "{sql}: no RunAggregateExec in the plan");
                assert_eq!(want, got, "{sql}");
            }
        });
    }
}

/// How many rows the [`RunAggregateExec`] of the plan run for `sql`
/// put out itself (none when it handed its input to DataFusion's
/// operator), and the answer.
async fn rows_out_of_runs(ctx: &SessionContext, sql: &str) -> (usize, String) {
    let plan = physical_plan(ctx, sql).await;
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    let mut out = None;
    plan.apply(|node| {
        if node.name() == "RunAggregateExec" {
            out = node.metrics().and_then(|m| m.output_rows());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    let text = pretty_format_batches(&batches).unwrap().to_string();
    (out.expect("a RunAggregateExec"), text)
}

/// Keys in runs are aggregated run by run; keys that change on every
/// row go to DataFusion's operator whole. Both give the same answer.
#[tokio::test]
async fn hands_keys_without_runs_to_datafusion() {
    let sql = "SELECT n, count(*), sum(w) FROM t GROUP BY n ORDER BY n";
    let long: Vec<Run> = (0..6).map(|i| (Some(0), Some(i % 3), 50)).collect();
    let single: Vec<Run> = (0..300).map(|i| (Some(0), Some(i % 3), 1)).collect();
    for (runs, by_runs) in [(long, true), (single, false)] {
        let plain = session(false);
        plain
            .register_table("t", Arc::new(table(&runs, 64)))
            .unwrap();
        let (want, _) = answer(&plain, sql).await;
        let ctx = session(true);
        ctx.register_table("t", Arc::new(table(&runs, 64))).unwrap();
        let (out, got) = rows_out_of_runs(&ctx, sql).await;
        assert_eq!(out > 0, by_runs, "rows out of runs: {out}");
        let mut got: Vec<&str> = got.lines().collect();
        got.sort_unstable();
        assert_eq!(want, got.join("\n"));
    }
}

/// With its memory refused, the partial stage emits what it holds after
/// every batch and starts afresh; nothing is lost or counted twice.
#[tokio::test]
async fn emits_early_when_memory_is_refused() {
    use datafusion::arrow::array::Int64Array;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;

    let runs: Vec<Run> = (0..40).map(|i| (Some(0), Some(i % 3), 10)).collect();
    let ctx = session(true);
    ctx.register_table("t", Arc::new(table(&runs, 50))).unwrap();
    let plan = physical_plan(&ctx, "SELECT n, count(*) FROM t GROUP BY n").await;
    let mut partial = None;
    plan.apply(|node| {
        if node.name() == "RunAggregateExec" {
            partial = Some(Arc::clone(node));
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    let partial = partial.expect("a RunAggregateExec");
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(1)))
        .build_arc()
        .unwrap();
    let task = Arc::new(TaskContext::default().with_runtime(runtime));
    let mut rows = 0;
    let mut counted = 0;
    let partitions = partial.properties().partitioning.partition_count();
    for p in 0..partitions {
        let stream = partial.execute(p, Arc::clone(&task)).unwrap();
        for batch in stream.try_collect::<Vec<_>>().await.unwrap() {
            rows += batch.num_rows();
            let counts = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            counted += counts.values().iter().sum::<i64>();
        }
    }
    assert_eq!(counted, 400);
    // Without early emission: at most the 3 groups per partition.
    assert!(
        rows > 3 * partitions,
        "{rows} partial rows: nothing was emitted early"
    );
}

/// Grouping sets keep DataFusion's operator.
#[tokio::test]
async fn leaves_what_it_cannot_stand_for() {
    let ctx = session(true);
    ctx.register_table("t", Arc::new(table(&[(Some(0), Some(1), 10)], 4)))
        .unwrap();
    let sql = "SELECT name, n, count(*) FROM t GROUP BY ROLLUP (name, n)";
    let (_, used) = answer(&ctx, sql).await;
    assert!(!used, "{sql}");
}
