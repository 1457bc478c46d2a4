//! Statements end to end: the worked example of DESIGN §12 is fed through
//! the control API into the real broker; the processor decides and writes
//! the ledger's history; the query service prices it. `GET /v1/statements`
//! must give exactly the published statement.

use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, eventually, post, require_broker, start_ledger_processor, start_query,
    unique_prefix,
};

const ADMIN: &str = "admin-secret-statements";

fn examples() -> std::path::PathBuf {
    gpuledger_tests::shared_examples()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_worked_example_statement_through_the_whole_pipeline() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("stmt");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("statements");
    let history = work.path().join("history");
    let (mut processor, api) =
        start_ledger_processor(&bootstrap, &prefix, work.path(), ADMIN, "processor.log");
    let (mut query, base_url, _postgres) =
        start_query(&history, &[], &work.path().join("query.log"));

    let ledger = std::fs::read_to_string(examples().join("mig-quota-basics.ndjson")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(examples().join("mig-quota-basics.statement.json")).unwrap(),
    )
    .unwrap();
    let (status, body) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &ledger,
    );
    assert_eq!(status, 200, "{body}");

    let url = format!("{base_url}/v1/statements?period=2026-11");
    let statement = eventually(
        "the statement to reach the published one",
        Duration::from_secs(60),
        || {
            let got: serde_json::Value = ureq::get(&url).call().ok()?.into_json().ok()?;
            (got == expected).then_some(got)
        },
    );
    assert_eq!(statement, expected);

    // The same statement as CSV: one row per tenant and line, the same totals.
    let csv = ureq::get(&format!("{url}&format=csv"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        csv.starts_with("period,currency,tenant,line,amount\n"),
        "{csv}"
    );
    assert!(csv.contains("2026-11,USD,team-llm,total,689.47\n"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 3 * 11, "{csv}");

    // The same charges as FOCUS rows: every tenant's add up to its total.
    let focus = gpuledger_tests::focus_export(&base_url, "2026-11", work.path());
    for tenant in expected["tenants"].as_array().unwrap() {
        let name = tenant["tenant"].as_str().unwrap();
        assert_eq!(
            focus["billed_by_subaccount"][name], tenant["lines"]["total"],
            "{name}: {focus}"
        );
    }
    // The example's money is quota compute and overhead only.
    assert_eq!(
        focus["lines"],
        serde_json::json!(["compute_quota", "overhead"])
    );
    assert_eq!(
        focus["categories"],
        serde_json::json!(["Adjustment", "Usage"])
    );

    // One tenant; a bad period is named.
    let one: serde_json::Value = ureq::get(&format!("{url}&tenant=team-search"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(one["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(one["tenants"][0]["lines"]["total"], "5.56");
    match ureq::get(&format!("{base_url}/v1/statements?period=2026-13")).call() {
        Err(ureq::Error::Status(400, r)) => {
            let body = r.into_string().unwrap();
            assert!(body.contains("YYYY-MM"), "{body}");
        }
        other => panic!("expected 400, got {other:?}"),
    }

    // The history tables the statement came from read as plain SQL too.
    let rows = gpuledger_tests::sql(
        &base_url,
        "SELECT tenant, count(*) AS n FROM allocations WHERE \"end\" IS NOT NULL GROUP BY tenant ORDER BY tenant",
    )
    .unwrap();
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"tenant": "team-llm", "n": 2}),
            serde_json::json!({"tenant": "team-search", "n": 2}),
            serde_json::json!({"tenant": "team-vision", "n": 3}),
        ]
    );
    // The same statement as SQL views, for dashboards and BI tools.
    let totals = gpuledger_tests::sql(
        &base_url,
        "SELECT tenant, amount FROM chargeback WHERE period = '2026-11' AND line = 'total' ORDER BY tenant",
    )
    .unwrap();
    let totals: Vec<(String, String)> = totals
        .iter()
        .map(|r| {
            (
                r["tenant"].as_str().unwrap().to_owned(),
                r["amount"].to_string().trim_matches('"').to_owned(),
            )
        })
        .collect();
    assert_eq!(
        totals,
        [
            ("team-llm".to_owned(), "689.47".to_owned()),
            ("team-search".to_owned(), "5.56".to_owned()),
            ("team-vision".to_owned(), "32.31".to_owned()),
        ]
    );
    let rows = gpuledger_tests::sql(
        &base_url,
        "SELECT period, count(*) AS n, CAST(sum(total) AS VARCHAR) AS total, sum(completed_jobs) AS jobs \
         FROM statements GROUP BY period ORDER BY period",
    )
    .unwrap();
    // October has no tenant yet; December lists them with nothing owed.
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"period": "2026-11", "n": 3, "total": "727.34", "jobs": 7}),
            serde_json::json!({"period": "2026-12", "n": 3, "total": "0.00", "jobs": 0}),
        ]
    );
    // Every ledger table reads in DuckDB and pyarrow with its `date`
    // column, row for row as the query service counts it.
    for table in ["ledger_events", "decisions", "allocations"] {
        let counted =
            gpuledger_tests::sql(&base_url, &format!("SELECT count(*) AS n FROM {table}")).unwrap()
                [0]["n"]
                .clone();
        let read = gpuledger_tests::read_with_parquet_engines(&history, table);
        assert_eq!(read["duckdb_rows"], counted, "{table}: {read}");
        assert_eq!(read["pyarrow_rows"], counted, "{table}: {read}");
        assert_eq!(read["pyarrow_has_date"], true, "{table}: {read}");
        assert!(
            !read["dates"].as_array().unwrap().is_empty(),
            "{table}: {read}"
        );
    }
    processor.kill();
    query.kill();
}
