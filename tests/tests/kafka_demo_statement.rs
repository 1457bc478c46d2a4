//! The demo's month, two ways: through the real broker, the processor's
//! four ledger partitions, the Parquet history and the query service; and
//! recomputed offline from the same NDJSON by `gpuledger-processor
//! statement` (one partition, no Kafka, no history). The two statements
//! must be identical to the cent, every line and breakdown.

use std::process::Command;
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, binary, create_topics, eventually, post, require_broker, simulate, sql,
    start_ledger_processor, start_query, unique_prefix, wait_for_month_end,
};

const ADMIN: &str = "admin-secret-demo-statement";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_the_demo_month_prices_the_same_live_and_offline() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("demostmt");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("demo-statement");
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let generated = Command::new("python3")
        .arg(format!("{repo}/deploy/local/demo_ledger.py"))
        .args(["--cluster", "demo-test"])
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let ledger_path = work.path().join("ledger.ndjson");
    std::fs::write(&ledger_path, &generated.stdout).unwrap();
    let ledger = String::from_utf8(generated.stdout).unwrap();

    // Offline.
    let offline = Command::new(binary("gpuledger-processor"))
        .args([
            "statement",
            "--ledger",
            ledger_path.to_str().unwrap(),
            "--period",
            "2026-11",
        ])
        .output()
        .unwrap();
    assert!(
        offline.status.success(),
        "{}",
        String::from_utf8_lossy(&offline.stderr)
    );
    let offline: serde_json::Value = serde_json::from_slice(&offline.stdout).unwrap();
    // The month exercises the rules that matter.
    let llm = offline["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "team-llm")
        .unwrap();
    for line in [
        "compute_reserved",
        "compute_burst",
        "reservation_unused",
        "health_credit",
        "shared_idle",
        "storage",
        "data_movement",
        "overhead",
    ] {
        assert_ne!(llm["lines"][line], "0.00", "{line} is zero: {llm}");
    }

    // Live.
    let (mut processor, api) =
        start_ledger_processor(&bootstrap, &prefix, work.path(), ADMIN, "processor.log");
    let (mut query, base_url, postgres) = start_query(
        work.path().join("history"),
        &[],
        &work.path().join("query.log"),
    );
    let lines: Vec<&str> = ledger.lines().collect();
    for chunk in lines.chunks(1_000) {
        let (status, body) = post(&format!("{api}/v1/events"), Some(ADMIN), &chunk.join("\n"));
        assert_eq!(status, 200, "{body}");
    }
    wait_for_month_end(&base_url, 2);
    let live: serde_json::Value = ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(live, offline);

    // Per job attempt, the same money: job_costs adds up to the compute and
    // credit lines, and tenant_usage_hourly to the GPU-hours of job_costs.
    let sums = sql(
        &base_url,
        "SELECT j.tenant, CAST(sum(j.compute) AS VARCHAR) AS compute, \
                CAST(sum(j.health_credit) AS VARCHAR) AS credit, \
                CAST(round(sum(j.gpu_hours), 2) AS VARCHAR) AS hours, \
                (SELECT CAST(round(sum(u.gpu_hours), 2) AS VARCHAR) FROM tenant_usage_hourly u \
                  WHERE u.period = '2026-11' AND u.tenant = j.tenant) AS hourly \
         FROM job_costs j WHERE j.period = '2026-11' GROUP BY j.tenant ORDER BY j.tenant",
    )
    .unwrap();
    assert_eq!(sums.len(), live["tenants"].as_array().unwrap().len());
    for (row, tenant) in sums.iter().zip(live["tenants"].as_array().unwrap()) {
        assert_eq!(row["tenant"], tenant["tenant"]);
        let lines = &tenant["lines"];
        // Amounts have exactly two digits: add them as cents.
        let cents = |text: &str| text.replace('.', "").parse::<i64>().unwrap();
        let compute: i64 = ["compute_reserved", "compute_quota", "compute_burst"]
            .iter()
            .map(|l| cents(lines[l].as_str().unwrap()))
            .sum();
        assert_eq!(cents(row["compute"].as_str().unwrap()), compute, "{row}");
        assert_eq!(row["credit"], lines["health_credit"], "{row}");
        assert_eq!(row["hours"], row["hourly"], "{row}");
    }

    // The FOCUS export of that month: every kind of charge, each tenant's
    // rows adding up to its total.
    let focus = gpuledger_tests::focus_export(&base_url, "2026-11", work.path());
    for tenant in live["tenants"].as_array().unwrap() {
        let name = tenant["tenant"].as_str().unwrap();
        assert_eq!(
            focus["billed_by_subaccount"][name], tenant["lines"]["total"],
            "{name}: {focus}"
        );
    }
    assert_eq!(
        focus["categories"],
        serde_json::json!(["Adjustment", "Credit", "Usage"])
    );
    for line in [
        "compute_reserved",
        "compute_quota",
        "compute_burst",
        "reservation_unused",
        "storage",
        "data_movement",
        "health_credit",
        "shared_idle",
        "overhead",
    ] {
        assert!(
            focus["lines"].as_array().unwrap().iter().any(|l| l == line),
            "{line}: {focus}"
        );
    }

    // The dashboards: the simulated lab fleet of the demo streams in too,
    // then every panel's SQL, with Grafana's macros expanded as Grafana
    // expands them, runs over the PostgreSQL protocol and must give rows of
    // the shape its panel draws.
    let simulated = simulate(
        &bootstrap,
        &prefix,
        &[
            "--cluster",
            "demo-test",
            "--pool",
            "lab",
            "--nodes",
            "4",
            "--gpus-per-node",
            "2",
            "--ticks",
            "360",
            "--start",
            "2026-11-03T23:30:00Z",
        ],
    );
    eventually("the lab's samples", Duration::from_secs(90), || {
        let rows = sql(&base_url, "SELECT count(*) AS n FROM samples").ok()?;
        (rows[0]["n"] == simulated["samples"]).then_some(())
    });
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let checked = Command::new(gpuledger_tests::python())
        .arg(format!("{repo}/tests/dashboards/check_panels.py"))
        .args([host, port])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "dashboard panels:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    processor.kill();
    query.kill();
}
