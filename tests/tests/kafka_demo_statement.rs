//! The demo's month, two ways: live — the company's events through the
//! control API, the simulated collectors' month at accelerated time straight
//! into the real broker, the processor's four ledger partitions, the Parquet
//! history and the query service —; and recomputed offline from the same
//! events by `gpuledger-processor statement` (one partition, no Kafka, no
//! history). The two statements must be identical to the cent, every line
//! and breakdown; only `idle_allocated` needs the samples, which the
//! offline recomputation does not read.

use std::process::Command;
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, demo_month, eventually, offline_statement, post, require_broker,
    simulate, sql, start_ledger_processor, start_query, unique_prefix, wait_for_month_end,
};

const ADMIN: &str = "admin-secret-demo-statement";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_the_demo_month_prices_the_same_live_and_offline() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("demostmt");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("demo-statement");
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let cluster = "demo-test";

    // Offline: the whole month as one ledger file.
    let month_path = work.path().join("month.ndjson");
    std::fs::write(&month_path, demo_month("month", cluster)).unwrap();
    let offline = offline_statement(&month_path, "2026-11");
    // The month exercises the rules that matter.
    let tenant = |name: &str| {
        offline["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant"] == name)
            .unwrap()
            .clone()
    };
    for line in [
        "compute_reserved",
        "compute_quota",
        "compute_burst",
        "reservation_unused",
        "health_credit",
        "shared_idle",
        "storage",
        "data_movement",
        "overhead",
    ] {
        let llm = tenant("team-llm");
        assert_ne!(llm["lines"][line], "0.00", "{line} is zero: {llm}");
    }
    for name in ["team-research", "team-vision", "team-search"] {
        let t = tenant(name);
        assert_ne!(t["lines"]["compute_quota"], "0.00", "{t}");
        assert_ne!(t["breakdown"]["retried_work"], "0.00", "{t}");
    }

    // Live, as `make demo` runs it.
    let (mut processor, api) =
        start_ledger_processor(&bootstrap, &prefix, work.path(), ADMIN, "processor.log");
    let (mut query, base_url, postgres) = start_query(
        work.path().join("history"),
        &[],
        &work.path().join("query.log"),
    );
    let post_events = |ndjson: &str| {
        let (status, body) = post(&format!("{api}/v1/events"), Some(ADMIN), ndjson);
        assert_eq!(status, 200, "{body}");
    };
    post_events(&demo_month("setup", cluster));
    let settings = demo_month("sim-args", cluster);
    let mut args: Vec<&str> = vec!["--cluster", cluster];
    args.extend(settings.lines());
    let simulated = simulate(&bootstrap, &prefix, &args);
    post_events(&demo_month("close", cluster));
    wait_for_month_end(&base_url, 2);
    eventually("the month's samples", Duration::from_secs(240), || {
        let rows = sql(&base_url, "SELECT count(*) AS n FROM samples").ok()?;
        (rows[0]["n"] == simulated["samples"]).then_some(())
    });
    let mut live: serde_json::Value =
        ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
    for t in live["tenants"].as_array_mut().unwrap() {
        let idle = t["breakdown"]
            .as_object_mut()
            .unwrap()
            .remove("idle_allocated");
        let idle = idle.and_then(|v| v.as_str().map(str::to_owned));
        assert!(
            idle.as_deref().is_some_and(|v| v != "0.00"),
            "{}: the samples show no idle time held",
            t["tenant"]
        );
    }
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

    // The dashboards: every panel's SQL, with Grafana's macros expanded as
    // Grafana expands them, runs over the PostgreSQL protocol on the month
    // and must give rows of the shape its panel draws.
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
