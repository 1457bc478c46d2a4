//! Statements from scenario files, through the whole pipeline: each NDJSON
//! ledger in `tests/scenarios/` is posted to the control API of its own
//! processor, lands in the history, and `GET /v1/statements` must give the
//! lines worked out by hand below. Together the scenarios cover every
//! statement line and rule of DESIGN §5.

use std::time::Duration;

use gpuledger_tests::{LedgerStack, eventually, post, sql};

const ADMIN: &str = "admin-secret-scenarios";

/// Runs `file` through broker, processor and history; the November 2026
/// statement as the query service gives it, and the processor's metrics.
async fn statement_of(file: &str) -> (serde_json::Value, String) {
    let name = file.trim_end_matches(".ndjson");
    let LedgerStack {
        mut processor,
        api,
        mut query,
        base_url,
        work: _work,
        ..
    } = LedgerStack::start(name, 2, ADMIN).await;
    let path = gpuledger_tests::tests_dir().join("scenarios").join(file);
    let ledger = std::fs::read_to_string(&path).unwrap();
    let events = ledger.lines().count();
    let (status, body) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &ledger,
    );
    assert_eq!(status, 200, "{file}: {body}");
    // Every event applied (none rejected), and the month's end in history.
    let clocks = ledger.lines().filter(|l| l.contains("\"Clock\"")).count() as u64;
    eventually(
        "the whole scenario in history",
        Duration::from_secs(60),
        || {
            let rows = sql(
            &base_url,
            "SELECT count(*) AS n FROM ledger_events WHERE type = 'Clock' AND event_time >= '2026-12-01T00:00:00Z'",
        )
        .ok()?;
            (rows[0]["n"].as_u64() == Some(clocks)).then_some(())
        },
    );
    let recorded = sql(&base_url, "SELECT count(*) AS n FROM ledger_events").unwrap();
    assert!(
        recorded[0]["n"].as_u64().unwrap() >= events as u64,
        "{file}: {recorded:?}"
    );
    let statement = ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let metrics = ureq::get(&format!("{api}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    processor.kill();
    query.kill();
    (statement, metrics)
}

/// The tenant's part of `statement`.
fn tenant<'a>(statement: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    statement["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == name)
        .unwrap_or_else(|| panic!("no {name} in {statement}"))
}

/// Asserts every `(line, amount)`; lines not listed must be zero.
fn lines(statement: &serde_json::Value, name: &str, expected: &[(&str, &str)]) {
    let t = tenant(statement, name);
    for (line, amount) in t["lines"].as_object().unwrap() {
        let want = expected
            .iter()
            .find(|(l, _)| l == line)
            .map_or("0.00", |(_, a)| a);
        assert_eq!(amount, want, "{name} {line}: {statement}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_scenario_kinds_reservations_and_usage() {
    // Pool pa: four whole A100s. Book: reserved 2.00, quota 3.00,
    // on-demand 5.00 per GPU-hour; storage 0.10 per GB-month, egress 0.05
    // per GB; overhead 10 %; reservation_charge `window`. Tenant t1:
    // nominal 1 GE, burst 1 GE, a monthly budget of 100.00.
    let (s, metrics) = statement_of("kinds.ndjson").await;
    lines(
        &s,
        "t1",
        &[
            // j1 inside t1's reservation r1 (1 GE, 00:00–10:00 on the 2nd):
            // reserved, 4 h × 2.00.
            ("compute_reserved", "8.00"),
            // j2 attempt 1 (fails after 2 h) and attempt 2 (3 h) at quota,
            // j5 cancelled after 30 min: (2 + 3 + 0.5) h × 3.00.
            ("compute_quota", "16.50"),
            // j3 while j2 holds the nominal GE: burst, 1 h × 5.00; j4
            // started with no admission: unadmitted, on-demand, 1 h × 5.00.
            ("compute_burst", "10.00"),
            // r1's window: 10 h reserved, 4 h used: 6 h × 2.00.
            ("reservation_unused", "12.00"),
            // 7,300 GB-hours = 10 GB-months × 0.10.
            ("storage", "1.00"),
            // 20 × 10⁹ bytes = 20 GB × 0.05.
            ("data_movement", "1.00"),
            // 10 % of 8 + 16.50 + 10 + 12 + 1 + 1 = 48.50.
            ("overhead", "4.85"),
            ("total", "53.35"),
        ],
    );
    let b = &tenant(&s, "t1")["breakdown"];
    // Failed and cancelled attempts: j2 #1 (6.00) and j5 (1.50).
    assert_eq!(b["failed_work"], "7.50");
    // j2 #1 was retried.
    assert_eq!(b["retried_work"], "6.00");
    // j1, j2 (its attempt 2), j3, j4: 53.35 / 4 = 13.3375.
    assert_eq!(b["completed_jobs"], 4);
    assert_eq!(b["cost_per_completed_job"], "13.34");
    // Capacity nobody held: 4 GE × 720 h, less 11.5 GE-h held and the 6 h
    // of unused reservation already charged, at quota: 2862.5 × 3.00.
    assert_eq!(s["platform"]["unallocated"], "8587.50");
    // 53.35 of a 100.00 budget: one alert, at 50 %, counted for Prometheus.
    assert!(
        metrics.contains(
            "gpuledger_budget_alerts_total{tenant=\"t1\",pool=\"pa\",threshold=\"50\"} 1\n"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("threshold=\"80\""), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_scenario_mig_two_pools_price_change_and_idle() {
    // Pool pm: one H100 split 3g (M1) + 1g + 1g + 2g; pool pw: one L4.
    // Book v1: H100 quota 2.10, L4 quota 0.70; v2 from Nov 16 00:00:
    // H100 quota 2.80. reservation_charge `usage`, idle `proportional`,
    // no overhead.
    let (s, _) = statement_of("mig-two-pools.ndjson").await;
    lines(
        &s,
        "a",
        &[
            // ja holds 3/7 (M1) from Oct 31 22:00 to Nov 1 02:00: November
            // has 2 h × 3/7 × 2.10.
            ("compute_quota", "1.80"),
            // M1 failed 01:00–01:30: −3/7 × 0.5 h × 2.10.
            ("health_credit", "-0.45"),
            // Idle capacity of pm at quota rates: v1 (360 h) capacity
            // 360 − 3/7 × 0.5 (M1 failed), held 3/7 × 2 + 1/7 × 1 = 1 →
            // 358.7857… × 2.10 = 753.45; v2 (360 h) held 1/7 × 1 →
            // (360 − 1/7) × 2.80 = 1007.60. Together 1761.05, shared by
            // GE-hours held in pm: a 6/7, b 2/7 → a ¾ = 1320.7875.
            ("shared_idle", "1320.79"),
            // a's reservation (1/7, Nov 20 00:00–10:00) goes unused, but
            // `usage` charges only use.
            ("total", "1322.14"),
        ],
    );
    lines(
        &s,
        "b",
        &[
            // jb holds 1/7 (M2) from Nov 15 23:00 to 16 01:00 across the
            // price change: 1/7 × 2.10 + 1/7 × 2.80 = 0.70; jc holds the
            // L4 for 10 h × 0.70 = 7.00.
            ("compute_quota", "7.70"),
            // pm's share ¼ × 1761.05 = 440.2625, plus all of pw's idle
            // capacity: (720 − 10) × 0.70 = 497.00.
            ("shared_idle", "937.26"),
            ("total", "944.96"),
        ],
    );
    assert_eq!(tenant(&s, "b")["breakdown"]["completed_jobs"], 2);
    assert_eq!(
        tenant(&s, "b")["breakdown"]["cost_per_completed_job"],
        "472.48"
    );
    assert_eq!(s["platform"]["unallocated"], "2258.05");
    assert_eq!(s["platform"]["total"], "2267.10");
}
