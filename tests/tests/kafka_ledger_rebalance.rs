//! Several processor instances in one consumer group share the ledger's
//! partitions, and partitions move between them without a decision lost or
//! repeated. Two instances start; one is killed with SIGKILL while
//! admission requests stream in, and the survivor takes its partitions
//! over once its session times out; a third, with no snapshot of its own,
//! joins and takes some back. Afterwards every request has exactly one
//! decision in `gpuledger.decisions` (`read_committed`), the decisions
//! equal an uninterrupted fold (`replay` from offset 0), and the ledger
//! history the instances share holds every event and decision once.

use std::collections::BTreeSet;
use std::time::Duration;

use gpuledger_schemas::{Event, EventBody, Timestamp};
use gpuledger_tests::{
    Service, WorkDir, create_topics, eventually, ledger_line as line,
    live_decisions_equal_a_replay, require_broker, sql, start_query, stream_events, unique_prefix,
};

const REQUESTS: usize = 4_000;
const POOLS: usize = 8;

/// Eight pools of four GPUs, two tenants each with one GE of quota and one
/// of burst; then per request its admission, its start, and (four requests
/// later in the same pool) its end: quota, burst and denials.
fn ledger() -> Vec<Event> {
    let t0 = Timestamp::from_secs(1_793_491_200); // 2026-11-01T00:00:00Z
    let mut events = Vec::new();
    for p in 0..POOLS {
        let devices: Vec<String> = (0..4)
            .map(|i| format!(r#"{{"device_uuid":"GPU-p{p}-{i}","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}"#))
            .collect();
        let fields = format!(
            r#""pool":"p{p}","node":"p{p}-n1","devices":[{}]"#,
            devices.join(",")
        );
        events.push(line("NodeInventory", &format!("inv-p{p}"), t0, &fields));
        for t in 0..2 {
            let fields = format!(
                r#""pool":"p{p}","tenant":"t{t}","nominal_ge":"1","burst_ge":"1","enforcement":"alert""#
            );
            events.push(line("TenantPolicy", &format!("pol-p{p}-t{t}"), t0, &fields));
        }
    }
    let job = |i: usize| (i % POOLS, format!("t{}", i / POOLS % 2), format!("job-{i}"));
    for i in 0..REQUESTS {
        let at = t0.plus_micros((i as i64 + 1) * 10_000_000);
        let (p, tenant, job_id) = job(i);
        let common =
            format!(r#""pool":"p{p}","job_id":"{job_id}","attempt":1,"tenant":"{tenant}""#);
        events.push(line(
            "AdmissionRequest",
            &format!("req-{i}"),
            at,
            &format!(
                r#"{common},"request_id":"r-{i}","slices":{},"max_slices":7"#,
                i % 7 + 1
            ),
        ));
        events.push(line(
            "JobEvent",
            &format!("{job_id}-start"),
            at,
            &format!(
                r#"{common},"state":"started","requested_slices":{},"requested_max_slices":7"#,
                i % 7 + 1
            ),
        ));
        if i >= 4 * POOLS {
            let (p, tenant, job_id) = job(i - 4 * POOLS);
            events.push(line(
                "JobEvent",
                &format!("{job_id}-end"),
                at,
                &format!(r#""pool":"p{p}","job_id":"{job_id}","attempt":1,"tenant":"{tenant}","state":"completed""#),
            ));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_instances_share_partitions_and_hand_them_over_exactly_once() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("rebalance");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("ledger-rebalance");
    let events = ledger();
    let total = events.len();

    // The stream: 400 events every 400 ms, about 20 s in all.
    let stream = stream_events(&bootstrap, &prefix, events, 400, Duration::from_millis(400));
    let history = work.path().join("history");
    let group = format!("{prefix}processor");
    let instance = |name: &str| {
        let state = work.path().join(format!("state-{name}"));
        let id = format!("{prefix}{name}");
        let args = [
            "run",
            "--kafka-bootstrap",
            &bootstrap,
            "--topic-prefix",
            &prefix,
            "--history-root",
            history.to_str().unwrap(),
            "--group-id",
            &group,
            "--group-instance-id",
            &id,
            "--state-dir",
            state.to_str().unwrap(),
            "--api-listen",
            "127.0.0.1:0",
            "--clock-interval-s",
            "0",
            "--snapshot-every",
            "200",
            "--flush-interval-ms",
            "200",
        ];
        let log = work.path().join(format!("processor-{name}.log"));
        Service::start("gpuledger-processor", &args, &log)
    };
    let log_of = |name: &str| {
        std::fs::read_to_string(work.path().join(format!("processor-{name}.log")))
            .unwrap_or_default()
    };
    let mut a = instance("a");
    let mut b = instance("b");
    // Both own partitions before one dies.
    eventually(
        "both instances hold partitions",
        Duration::from_secs(60),
        || {
            (log_of("a").contains("ledger partitions assigned")
                && log_of("b").contains("ledger partitions assigned"))
            .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    b.kill();
    std::thread::sleep(Duration::from_secs(4));
    let mut c = instance("c");
    stream.await.unwrap();

    // The live decisions: those of an uninterrupted fold, each once.
    let live = live_decisions_equal_a_replay(&bootstrap, &prefix, work.path());
    let requests: BTreeSet<&str> = live
        .iter()
        .filter_map(|d| match &d.body {
            EventBody::AdmissionDecision(a) => Some(a.request_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), REQUESTS, "every request decided once");

    // Partitions did move: the survivor was assigned more than once, and
    // the newcomer got some.
    assert!(
        log_of("a").matches("ledger partitions assigned").count() >= 2,
        "{}",
        log_of("a")
    );
    assert!(
        log_of("c").contains("ledger partitions assigned"),
        "{}",
        log_of("c")
    );

    // The shared history: every ledger event and decision once.
    let (mut query, base_url, _postgres) =
        start_query(&history, &[], &work.path().join("query.log"));
    let counts = |table: &str| -> Option<(u64, u64)> {
        let rows = sql(
            &base_url,
            &format!("SELECT count(*) AS n, count(DISTINCT event_id) AS d FROM {table}"),
        )
        .ok()?;
        Some((rows[0]["n"].as_u64()?, rows[0]["d"].as_u64()?))
    };
    let seen = eventually(
        "every ledger event in history",
        Duration::from_secs(60),
        || counts("ledger_events").filter(|c| c.0 >= total as u64),
    );
    assert_eq!(seen, (total as u64, total as u64));
    let seen = eventually("every decision in history", Duration::from_secs(60), || {
        counts("decisions").filter(|c| c.0 >= live.len() as u64)
    });
    assert_eq!(seen, (live.len() as u64, live.len() as u64));
    a.kill();
    c.kill();
    query.kill();
}
