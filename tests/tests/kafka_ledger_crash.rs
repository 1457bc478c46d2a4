//! Exactly once under SIGKILL, for decisions and for the ledger's history.
//!
//! 10,000 admission requests (with their jobs' starts and ends, 30,000
//! ledger events over four pools and two partitions) stream into the real
//! broker while the processor is killed with SIGKILL ten times and
//! restarted. Afterwards every request has exactly one decision in
//! `gpuledger.decisions` read with `read_committed`, the decisions equal
//! those of an uninterrupted fold (`replay` from offset 0), and every
//! history table holds each row once: `ledger_events` every event,
//! `decisions` every decision, `allocations` one closed segment per
//! attempt, and the fact tables (`reservations`, `policies`,
//! `price_books`, `usage_records`, `inventory`) every fact of the events
//! spread through the stream.

use std::collections::BTreeSet;
use std::time::Duration;

use gpuledger_schemas::{Event, EventBody, Timestamp};
use gpuledger_tests::{
    WorkDir, create_topics, eventually, ledger_line as line, live_decisions_equal_a_replay,
    require_broker, sql, start_processor, start_query, stream_events, unique_prefix,
};

const REQUESTS: usize = 10_000;
/// A job ends when the request this many later is made, so several run at
/// once: some requests are quota, some burst, some denied.
const OVERLAP: usize = 8;
const POOLS: [&str; 4] = ["a", "b", "c", "d"];

/// The ledger: four pools of 8 GPUs, four tenants with quota in each, then
/// per request its admission, its start and (OVERLAP requests later) its end.
fn ledger() -> Vec<Event> {
    let t0 = Timestamp::from_secs(1_793_491_200); // 2026-11-01T00:00:00Z
    let mut events = Vec::new();
    for pool in POOLS {
        let devices: Vec<String> = (0..8)
            .map(|i| format!(r#"{{"device_uuid":"GPU-{pool}-{i}","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}"#))
            .collect();
        events.push(line(
            "NodeInventory",
            &format!("inv-{pool}"),
            t0,
            &format!(
                r#""pool":"{pool}","node":"{pool}-n1","devices":[{}]"#,
                devices.join(",")
            ),
        ));
        for t in 0..4 {
            events.push(line(
                "TenantPolicy",
                &format!("pol-{pool}-{t}"),
                t0,
                &format!(r#""pool":"{pool}","tenant":"t{t}","nominal_ge":"1","burst_ge":"1","enforcement":"alert""#),
            ));
        }
    }
    events.push(price_book(1, t0, t0));
    let job = |i: usize| {
        let pool = POOLS[i % 4];
        (pool, format!("t{}", i / 4 % 4), format!("job-{i}"))
    };
    let end = |events: &mut Vec<Event>, i: usize, at: Timestamp| {
        let (pool, tenant, job) = job(i);
        events.push(line(
            "JobEvent",
            &format!("{job}-end"),
            at,
            &format!(r#""pool":"{pool}","job_id":"{job}","attempt":1,"tenant":"{tenant}","state":"completed""#),
        ));
    };
    for i in 0..REQUESTS {
        let at = t0.plus_micros((i as i64 + 1) * 10_000_000);
        let (pool, tenant, job_id) = job(i);
        let slices = i % 7 + 1;
        events.push(line(
            "AdmissionRequest",
            &format!("req-{i}"),
            at,
            &format!(r#""pool":"{pool}","request_id":"r-{i}","job_id":"{job_id}","attempt":1,"tenant":"{tenant}","slices":{slices},"max_slices":7"#),
        ));
        // Denied requests start anyway: unadmitted use, priced on demand.
        events.push(line(
            "JobEvent",
            &format!("{job_id}-start"),
            at,
            &format!(r#""pool":"{pool}","job_id":"{job_id}","attempt":1,"tenant":"{tenant}","state":"started","requested_slices":{slices},"requested_max_slices":7"#),
        ));
        if i >= OVERLAP {
            end(&mut events, i - OVERLAP, at);
        }
        facts(&mut events, i, t0, at);
    }
    let last = t0.plus_micros((REQUESTS as i64 + 1) * 10_000_000);
    for i in REQUESTS - OVERLAP..REQUESTS {
        end(&mut events, i, last);
    }
    events
}

/// A book of two model rates, in force from `from`.
fn price_book(version: i64, from: Timestamp, at: Timestamp) -> Event {
    let rate = |model: &str| {
        format!(
            r#"{{"model":"{model}","reserved_per_gpu_hour":"1.50","quota_per_gpu_hour":"2","on_demand_per_gpu_hour":"3.25"}}"#
        )
    };
    line(
        "PriceBook",
        &format!("book-{version}"),
        at,
        &format!(
            r#""version":{version},"effective_from":"{from}","currency":"USD","rates":[{},{}],"storage_per_gb_month":"0.02","egress_per_gb":"0.05","overhead_pct":"10","reservation_charge":"window","idle_distribution":"central""#,
            rate("NVIDIA H200"),
            rate("NVIDIA A100 80GB PCIe")
        ),
    )
}

/// The facts that go to tables of their own, spread through the stream
/// after request `i`: usage records, reservations (for a window after the
/// run, so no segment splits) and a cancel, a policy repeated, a node
/// reported again, and a second book.
fn facts(events: &mut Vec<Event>, i: usize, t0: Timestamp, at: Timestamp) {
    let hour = 3_600_000_000;
    if i % 250 == 125 {
        events.push(line(
            "UsageRecord",
            &format!("usage-{i}"),
            at,
            &format!(
                r#""pool":"{}","tenant":"t{}","kind":"egress_bytes","quantity":"1000000000","start":"{}","end":"{at}""#,
                POOLS[i / 250 % 4],
                i / 1000 % 4,
                at.plus_micros(-60_000_000)
            ),
        ));
    }
    if i % 1000 == 500 {
        // Two GE each in one window of pool a (spare 4): the third is refused.
        let k = i / 1000;
        events.push(line(
            "ReservationRequest",
            &format!("res-{k}"),
            at,
            &format!(
                r#""pool":"a","reservation_id":"res-{k}","tenant":"t{}","slices":2,"max_slices":1,"start":"{}","end":"{}""#,
                k % 4,
                t0.plus_micros(48 * hour),
                t0.plus_micros(49 * hour)
            ),
        ));
    }
    if i == 1_700 {
        events.push(line(
            "ReservationCancel",
            "res-0-cancel",
            at,
            r#""pool":"a","reservation_id":"res-0","tenant":"t0""#,
        ));
    }
    if i % 3000 == 2999 {
        events.push(line(
            "TenantPolicy",
            &format!("pol-b-1-again-{i}"),
            at,
            r#""pool":"b","tenant":"t1","nominal_ge":"1","burst_ge":"1","enforcement":"alert""#,
        ));
    }
    if i % 4000 == 3999 {
        let devices: Vec<String> = (0..8)
            .map(|d| format!(r#"{{"device_uuid":"GPU-c-{d}","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}"#))
            .collect();
        events.push(line(
            "NodeInventory",
            &format!("inv-c-again-{i}"),
            at,
            &format!(
                r#""pool":"c","node":"c-n1","devices":[{}]"#,
                devices.join(",")
            ),
        ));
    }
    if i == 5_000 {
        events.push(price_book(2, t0.plus_micros(72 * hour), at));
    }
}

/// How many rows each fact table should hold for `events` and the
/// decisions they caused.
fn fact_rows(events: &[Event], decisions: &BTreeSet<String>) -> Vec<(&'static str, i64)> {
    let of = |pick: fn(&EventBody) -> Option<usize>| -> i64 {
        events.iter().filter_map(|e| pick(&e.body)).sum::<usize>() as i64
    };
    vec![
        (
            "reservations",
            decisions
                .iter()
                .filter(|d| d.contains(r#""type":"ReservationDecision""#))
                .count() as i64,
        ),
        (
            "policies",
            of(|b| matches!(b, EventBody::TenantPolicy(_)).then_some(1)),
        ),
        (
            "price_books",
            of(|b| match b {
                EventBody::PriceBook(p) => Some(p.rates.len()),
                _ => None,
            }),
        ),
        (
            "usage_records",
            of(|b| matches!(b, EventBody::UsageRecord(_)).then_some(1)),
        ),
        (
            "inventory",
            of(|b| match b {
                EventBody::NodeInventory(n) => Some(n.devices.len()),
                _ => None,
            }),
        ),
    ]
}

fn count(base_url: &str, query: &str) -> Option<(i64, i64)> {
    let rows = sql(base_url, query).ok()?;
    let row = rows.first()?;
    Some((row["n"].as_i64()?, row["distinct_n"].as_i64()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_ten_kills_during_10000_admissions_lose_and_repeat_nothing() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("ledgercrash");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("ledger-crash");
    let events = ledger();
    let total = events.len();
    let facts_in = events.clone();

    // The stream: a thousand events every 300 ms, while the processor dies.
    let stream = stream_events(
        &bootstrap,
        &prefix,
        events,
        1_000,
        Duration::from_millis(300),
    );
    let spawn = |n: usize| {
        start_processor(
            &bootstrap,
            &prefix,
            work.path(),
            &[
                "--clock-interval-s",
                "0",
                "--snapshot-every",
                "300",
                "--flush-interval-ms",
                "200",
            ],
            &format!("processor-{n}.log"),
        )
    };
    let mut processor = spawn(0);
    for n in 1..=10 {
        // The first run lives long enough to write a snapshot (history
        // files go first, and a debug build writes them slowly); later
        // kills land at varying points of the stream.
        let life = if n == 1 {
            3_000
        } else {
            1_200 + 113 * n as u64
        };
        std::thread::sleep(Duration::from_millis(life));
        processor.kill();
        processor = spawn(n);
    }
    stream.await.unwrap();

    // The live run's committed decisions: those of an uninterrupted fold
    // (a replay from offset 0), each once.
    let live = live_decisions_equal_a_replay(&bootstrap, &prefix, work.path());
    let requests: BTreeSet<&str> = live
        .iter()
        .filter_map(|d| match &d.body {
            EventBody::AdmissionDecision(a) => Some(a.request_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), REQUESTS, "every request decided once");
    let expected: BTreeSet<String> = live.iter().map(Event::to_json_string).collect();
    let admissions = expected
        .iter()
        .filter(|d| d.contains(r#""type":"AdmissionDecision""#))
        .count();
    assert_eq!(admissions, REQUESTS, "one admission decision per request");

    // The history: every row once.
    let (mut query, base_url, _postgres) = start_query(
        work.path().join("history"),
        &[],
        &work.path().join("query.log"),
    );
    let events_seen = eventually(
        "every ledger event in history",
        Duration::from_secs(60),
        || {
            let c = count(
                &base_url,
                "SELECT count(*) AS n, count(DISTINCT event_id) AS distinct_n FROM ledger_events",
            )?;
            (c.0 >= total as i64).then_some(c)
        },
    );
    assert_eq!(events_seen, (total as i64, total as i64));
    let partitions = sql(
        &base_url,
        "SELECT count(DISTINCT ledger_partition) AS n FROM ledger_events",
    )
    .unwrap();
    assert_eq!(partitions[0]["n"], 2, "the pools share one partition");
    let decisions_seen = eventually("every decision in history", Duration::from_secs(60), || {
        let c = count(
            &base_url,
            "SELECT count(*) AS n, count(DISTINCT event_id) AS distinct_n FROM decisions",
        )?;
        (c.0 >= expected.len() as i64).then_some(c)
    });
    assert_eq!(
        decisions_seen,
        (expected.len() as i64, expected.len() as i64)
    );
    let closed = count(
        &base_url,
        "SELECT count(*) AS n, count(DISTINCT job_id) AS distinct_n FROM allocations WHERE \"end\" IS NOT NULL",
    )
    .unwrap();
    assert_eq!(closed, (REQUESTS as i64, REQUESTS as i64));
    // Each fact table: every row once, a row being an event's (or its
    // decision's) device, model rate or the fact itself.
    for (table, rows) in fact_rows(&facts_in, &expected) {
        let key = match table {
            "inventory" => "event_id || '/' || device_uuid",
            "price_books" => "event_id || '/' || model",
            _ => "event_id",
        };
        let seen = count(
            &base_url,
            &format!("SELECT count(*) AS n, count(DISTINCT {key}) AS distinct_n FROM {table}"),
        )
        .unwrap();
        assert_eq!(seen, (rows, rows), "{table}");
        assert!(rows > 0, "{table}: the stream has none");
    }
    let refused = sql(
        &base_url,
        "SELECT count(*) AS n FROM reservations WHERE decision = 'rejected'",
    )
    .unwrap();
    assert!(refused[0]["n"].as_i64().unwrap() > 0, "{refused:?}");
    // DuckDB and pyarrow read each fact table, with its `date` column, row
    // for row as the query service counts it.
    for (table, rows) in fact_rows(&facts_in, &expected) {
        let read = gpuledger_tests::read_with_parquet_engines(&work.path().join("history"), table);
        assert_eq!(read["duckdb_rows"], rows, "{table}: {read}");
        assert_eq!(read["pyarrow_rows"], rows, "{table}: {read}");
        assert_eq!(read["pyarrow_has_date"], true, "{table}: {read}");
    }
    // The kills fell mid-stream: restarts resumed from snapshots taken
    // during it, not from the start.
    let resumed = (1..=10)
        .filter(|n| {
            std::fs::read_to_string(work.path().join(format!("processor-{n}.log")))
                .unwrap_or_default()
                .contains("ledger state restored from snapshot")
        })
        .count();
    assert!(resumed > 0, "no restart resumed from a snapshot");
    processor.kill();
    query.kill();
}
