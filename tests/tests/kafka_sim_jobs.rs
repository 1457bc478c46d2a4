//! The simulated fleet with tenants, through the real broker and the
//! processor: every admission request its jobs make is decided once, every
//! attempt becomes an allocation, and the samples of held devices name the
//! jobs the ledger knows.

use std::time::Duration;

use gpuledger_tests::{LedgerStack, eventually, post, simulate, sql};

const ADMIN: &str = "admin-secret-simjobs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_simulated_jobs_are_admitted_and_allocated() {
    let LedgerStack {
        bootstrap,
        prefix,
        mut processor,
        api,
        mut query,
        base_url,
        work: _work,
        ..
    } = LedgerStack::start("simjobs", 1, ADMIN).await;

    // Two tenants with quota in the pool, and a book.
    let env = |id: &str| {
        format!(
            r#""event_id":"{id}","event_time":"2026-11-01T00:00:00Z","source":"test","cluster":"sim""#
        )
    };
    let setup = [
        format!(
            r#"{{"type":"PriceBook",{},"version":1,"effective_from":"2026-10-01T00:00:00Z","currency":"USD","rates":[{{"model":"NVIDIA H200","reserved_per_gpu_hour":"2","quota_per_gpu_hour":"2.5","on_demand_per_gpu_hour":"4"}}],"storage_per_gb_month":"0","egress_per_gb":"0","overhead_pct":"0","reservation_charge":"window","idle_distribution":"central"}}"#,
            env("book")
        ),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"h200","tenant":"team-llm","nominal_ge":"2","burst_ge":"1","enforcement":"alert"}}"#,
            env("pol-llm")
        ),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"h200","tenant":"team-vision","nominal_ge":"1","burst_ge":"1","enforcement":"alert"}}"#,
            env("pol-vision")
        ),
    ];
    let summary = simulate(
        &bootstrap,
        &prefix,
        &[
            "--cluster",
            "sim",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--ticks",
            "720",
            "--start",
            "2026-11-01T00:00:00Z",
            "--tenants",
            "team-llm,team-vision",
        ],
    );
    // The inventories are in: the pool exists; the policies may follow.
    let (status, answer) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &setup.join("\n"),
    );
    assert_eq!(status, 200, "{answer}");
    let requests = summary["admission_requests"].as_i64().unwrap();
    let job_events = summary["job_events"].as_i64().unwrap();
    assert!(requests > 5, "{summary}");

    let decided = eventually(
        "every admission request decided",
        Duration::from_secs(90),
        || {
            assert!(processor.is_running(), "the processor exited");
            let rows = sql(
                &base_url,
                "SELECT count(*) AS n, count(DISTINCT request_id) AS distinct_n FROM decisions \
                 WHERE type = 'AdmissionDecision'",
            )
            .ok()?;
            (rows[0]["n"].as_i64()? >= requests).then(|| rows[0].clone())
        },
    );
    assert_eq!(decided["n"], requests);
    assert_eq!(decided["distinct_n"], requests);

    // Every job event is in the history too (ends after the last request
    // come in later flushes than its decision).
    eventually(
        "every job event in history",
        Duration::from_secs(60),
        || {
            let rows = sql(
                &base_url,
                "SELECT count(*) AS n FROM ledger_events WHERE type = 'JobEvent'",
            )
            .ok()?;
            (rows[0]["n"].as_i64()? >= job_events).then_some(())
        },
    );
    // Every attempt the simulator started is an allocation, and every job
    // a held sample names is one of them.
    let starts = job_events - sql(
        &base_url,
        "SELECT count(*) AS n FROM allocations WHERE \"end\" IS NOT NULL AND final_state IS NOT NULL",
    )
    .unwrap()[0]["n"]
        .as_i64()
        .unwrap();
    let attempts = sql(
        &base_url,
        "SELECT count(DISTINCT job_id || '/' || CAST(attempt AS VARCHAR)) AS n FROM allocations",
    )
    .unwrap()[0]["n"]
        .as_i64()
        .unwrap();
    assert_eq!(attempts, starts, "one allocation per started attempt");
    let stray = sql(
        &base_url,
        "SELECT count(*) AS n FROM (SELECT DISTINCT job_id FROM samples WHERE job_id IS NOT NULL) s \
         WHERE s.job_id NOT IN (SELECT job_id FROM allocations)",
    )
    .unwrap();
    assert_eq!(
        stray[0]["n"], 0,
        "a sample names a job the ledger never saw"
    );
    let tenants = sql(
        &base_url,
        "SELECT DISTINCT tenant FROM allocations ORDER BY tenant",
    )
    .unwrap();
    assert_eq!(
        tenants,
        [
            serde_json::json!({"tenant": "team-llm"}),
            serde_json::json!({"tenant": "team-vision"})
        ]
    );
    processor.kill();
    query.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_a_simulated_scheduler_asks_the_control_api() {
    let LedgerStack {
        bootstrap,
        prefix,
        mut processor,
        api,
        mut query,
        base_url,
        work: _work,
        ..
    } = LedgerStack::start("simapi", 1, ADMIN).await;
    // The pool (one node of its own), team-llm with 2 GE of quota and
    // team-vision with none: its jobs are all denied.
    let now = gpuledger_schemas::Timestamp::now();
    let env = |id: &str| {
        format!(r#""event_id":"{id}","event_time":"{now}","source":"test","cluster":"sim""#)
    };
    let setup = [
        format!(
            r#"{{"type":"NodeInventory",{},"pool":"h200","node":"h200-seed","devices":[{{"device_uuid":"GPU-seed-0","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}]}}"#,
            env("inv-seed")
        ),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"h200","tenant":"team-llm","nominal_ge":"2","burst_ge":"0","enforcement":"alert"}}"#,
            env("pol-llm")
        ),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"h200","tenant":"team-vision","nominal_ge":"0","burst_ge":"0","enforcement":"alert"}}"#,
            env("pol-vision")
        ),
    ];
    let (status, answer) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &setup.join("\n"),
    );
    assert_eq!(status, 200, "{answer}");

    let summary = simulate(
        &bootstrap,
        &prefix,
        &[
            "--cluster",
            "sim",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--ticks",
            "8",
            "--interval-ms",
            "1000",
            "--realtime",
            "--api",
            &api,
            "--api-token",
            ADMIN,
            "--tenants",
            "team-llm,team-vision",
        ],
    );
    assert_eq!(
        summary["admission_requests"], 0,
        "every request went through the API: {summary}"
    );
    let count =
        |sql_text: &str| -> i64 { sql(&base_url, sql_text).unwrap()[0]["n"].as_i64().unwrap() };
    let decided = eventually("the decisions in history", Duration::from_secs(60), || {
        assert!(processor.is_running(), "the processor exited");
        let allocated = count("SELECT count(*) AS n FROM allocations");
        let decided = count("SELECT count(*) AS n FROM decisions WHERE type = 'AdmissionDecision'");
        (allocated > 0 && decided > 0).then_some(decided)
    });
    // Both answers were given; a denied job never started, an admitted one
    // did; and the only requests in the ledger are the API's.
    let denied = count(
        "SELECT count(*) AS n FROM decisions WHERE type = 'AdmissionDecision' AND decision = 'deny'",
    );
    assert!(
        denied > 0 && denied < decided,
        "{denied} of {decided} denied"
    );
    assert_eq!(
        count(
            "SELECT count(*) AS n FROM decisions d WHERE d.type = 'AdmissionDecision' \
             AND d.decision = 'deny' AND d.job_id IN (SELECT job_id FROM allocations)"
        ),
        0
    );
    assert_eq!(
        count(
            "SELECT count(*) AS n FROM allocations a WHERE a.kind = 'unadmitted' OR a.tenant <> 'team-llm'"
        ),
        0
    );
    assert_eq!(
        count(
            "SELECT count(*) AS n FROM ledger_events WHERE type = 'AdmissionRequest' \
             AND source <> 'control-api'"
        ),
        0
    );
    processor.kill();
    query.kill();
}
