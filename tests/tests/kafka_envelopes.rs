//! Who sets the ledger's time and ids, and the bounds of what a caller may
//! ask, against the real broker and processor.
//!
//! A team lead or a scheduler never sets an event's time or id: the
//! control API stamps them, and a caller's id is only its own idempotency
//! key. An admin's times are kept within a skew of the API's clock, or any
//! past time in an explicit import. Every bound (instants, slices, GPU
//! counts, decimal digits, JSON numbers for money, reservation length,
//! start and count) is refused with a 400 naming the field. A producer
//! writing to the ledger topic without the API, with a time far ahead of
//! its record's append time, is sent to the DLQ.

use std::time::Duration;

use gpuledger_common::kafka::DLQ_REASON_HEADER;
use gpuledger_schemas::{Codec, Event, Timestamp};
use gpuledger_tests::{
    WorkDir, create_topics, post, read_committed, require_broker, start_processor, stream_events,
    unique_prefix,
};

const ADMIN: &str = "admin-secret-envelopes";
const SCHEDULER: &str = "scheduler-secret-envelopes";
const LEAD: &str = "lead-secret-envelopes-a";

const SETUP: &str = r#"{"type":"NodeInventory","event_id":"inv-1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","node":"n1","devices":[{"device_uuid":"GPU-1","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1},{"device_uuid":"GPU-2","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}]}
{"type":"TenantPolicy","event_id":"pol-a","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","nominal_ge":"1","burst_ge":"0","enforcement":"deny"}
"#;

/// The micros between `a` and `b`.
fn apart(a: Timestamp, b: Timestamp) -> i64 {
    (a.as_micros() - b.as_micros()).abs()
}

/// A 400 naming `field`, whose message contains `words`.
fn refused(answer: (u16, serde_json::Value), field: &str, words: &str) {
    let (status, body) = answer;
    assert_eq!(status, 400, "{field}: {body}");
    assert_eq!(body["field"], field, "{body}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        message.contains(words),
        "{field}: {message:?} lacks {words:?}"
    );
    assert!(
        message.len() < 600,
        "{field}: a long message: {message:.200}…"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_the_api_stamps_envelopes_and_refuses_what_is_out_of_bounds() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("envelopes");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("envelopes");
    let tokens = format!("admin:{ADMIN},scheduler:{SCHEDULER},lead:team-a:{LEAD}");
    let mut processor = start_processor(
        &bootstrap,
        &prefix,
        work.path(),
        &[
            "--api-token",
            &tokens,
            "--clock-interval-s",
            "0",
            "--ledger-max-ahead-s",
            "300",
        ],
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(60));
    let events = format!("{api}/v1/events");
    let import = format!("{api}/v1/events?mode=import");

    // An admin's history goes in as an import; live, it is too old.
    refused(
        post(&events, Some(ADMIN), SETUP),
        "event_time",
        "?mode=import",
    );
    let (status, body) = post(&import, Some(ADMIN), SETUP);
    assert_eq!(status, 200, "{body}");

    // A lead's reservation with a time of its own choosing, twice with the
    // same key: stamped with the API's time, its id the API's.
    let year_9999 = r#"{"type":"ReservationRequest","event_id":"lead-key-1","event_time":"9999-12-31T00:00:00Z","source":"collector","cluster":"x","pool":"h200","reservation_id":"res-1","tenant":"team-a","slices":1,"max_slices":7,"start":"2027-01-10T00:00:00Z","end":"2027-01-11T00:00:00Z"}"#;
    let before = Timestamp::now();
    for _ in 0..2 {
        let (status, body) = post(&events, Some(LEAD), year_9999);
        assert_eq!(status, 200, "{body}");
    }
    // A lead may not import, and may not name another tenant.
    assert_eq!(post(&import, Some(LEAD), year_9999).0, 403);
    let other = year_9999.replace("\"team-a\"", "\"team-b\"");
    assert_eq!(post(&events, Some(LEAD), &other).0, 403);
    // A scheduler's job event from the year 2001 is stamped too.
    let job = r#"{"type":"JobEvent","event_id":"sched-key-1","event_time":"2001-01-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","job_id":"j-1","attempt":1,"tenant":"team-a","state":"submitted"}"#;
    let (status, body) = post(&events, Some(SCHEDULER), job);
    assert_eq!(status, 200, "{body}");

    // The next admission is decided at the API's time, not in 9999.
    let ask = r#"{"pool":"h200","request_id":"adm-1","job_id":"j-2","tenant":"team-a","slices":1,"max_slices":7}"#;
    let (status, decision) = post(&format!("{api}/v1/admission"), Some(SCHEDULER), ask);
    assert_eq!(status, 200, "{decision}");
    let decided: Timestamp = decision["event_time"].as_str().unwrap().parse().unwrap();
    assert!(
        apart(decided, Timestamp::now()) < 600_000_000,
        "decided at {decided}: {decision}"
    );

    // What the ledger topic holds: the API's ids and times, a retry kept
    // as the same id (the ledger drops it as a duplicate).
    let codec = Codec::builtin();
    let ledger: Vec<Event> = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.ledger"),
        6,
        Duration::from_secs(30),
    )
    .iter()
    .map(|(payload, _)| codec.decode(payload).unwrap())
    .collect();
    let lead_events: Vec<&Event> = ledger
        .iter()
        .filter(|e| e.envelope.event_id.ends_with("lead-key-1"))
        .collect();
    assert_eq!(lead_events.len(), 2, "{ledger:?}");
    for e in &lead_events {
        assert_eq!(
            e.envelope.event_id.to_string(),
            "api-lead.team-a-lead-key-1"
        );
        assert!(apart(e.envelope.event_time, before) < 600_000_000, "{e:?}");
        assert_eq!(e.envelope.cluster.to_string(), "local");
    }
    let scheduled = ledger
        .iter()
        .find(|e| e.envelope.event_id.ends_with("sched-key-1"))
        .expect("the scheduler's job event");
    assert_eq!(
        scheduled.envelope.event_id.to_string(),
        "api-scheduler-sched-key-1"
    );
    assert!(apart(scheduled.envelope.event_time, before) < 600_000_000);
    assert!(!ledger.iter().any(|e| e.envelope.event_id == "lead-key-1"));

    // An admin's time: within the skew live; never far ahead, even in an import.
    let policy = |at: &str| {
        format!(
            r#"{{"type":"TenantPolicy","event_id":"pol-{at}","event_time":"{at}","source":"t","cluster":"c","pool":"h200","tenant":"team-b","nominal_ge":"0","burst_ge":"0","enforcement":"deny"}}"#
        )
    };
    let in_an_hour =
        Timestamp::from_micros(Timestamp::now().as_micros() + 3_600_000_000).to_string();
    refused(
        post(&events, Some(ADMIN), &policy(&in_an_hour)),
        "event_time",
        "skew of 300 s",
    );
    refused(
        post(&import, Some(ADMIN), &policy(&in_an_hour)),
        "event_time",
        "skew of 300 s",
    );
    refused(
        post(&import, Some(ADMIN), &policy("1999-12-31T23:59:59Z")),
        "event_time",
        "2000",
    );
    let now = Timestamp::now().to_string();
    let (status, body) = post(&events, Some(ADMIN), &policy(&now));
    assert_eq!(status, 200, "{body}");

    // Bounds, each a 400 naming the field and the limit.
    let admission = format!("{api}/v1/admission");
    refused(
        post(
            &admission,
            Some(SCHEDULER),
            &ask.replace("\"max_slices\":7", "\"max_slices\":2147483647"),
        ),
        "max_slices",
        "at most 8",
    );
    let number = policy(&now).replace("\"nominal_ge\":\"0\"", "\"nominal_ge\":2");
    refused(
        post(&events, Some(ADMIN), &number),
        "nominal_ge",
        "JSON number",
    );
    let digits = "9".repeat(1_500_000);
    let usage = format!(
        r#"{{"type":"UsageRecord","event_id":"u-1","event_time":"{now}","source":"t","cluster":"c","pool":"h200","tenant":"team-a","kind":"storage_gb_hours","quantity":"{digits}","unit":"GB-month","start":"{now}","end":"{now}"}}"#
    );
    let asked = std::time::Instant::now();
    refused(
        post(&events, Some(ADMIN), &usage),
        "quantity",
        "at most 40 digits",
    );
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "{:?}",
        asked.elapsed()
    );
    let reservation = |id: &str, start: &str, end: &str| {
        format!(
            r#"{{"pool":"h200","reservation_id":"{id}","slices":1,"max_slices":7,"start":"{start}","end":"{end}"}}"#
        )
    };
    let reservations = format!("{api}/v1/reservations");
    refused(
        post(
            &reservations,
            Some(LEAD),
            &reservation("long", "2027-01-01T00:00:00Z", "2027-04-02T00:00:00Z"),
        ),
        "end",
        "at most 90 days",
    );
    refused(
        post(
            &reservations,
            Some(LEAD),
            &reservation("far", "2028-06-01T00:00:00Z", "2028-06-02T00:00:00Z"),
        ),
        "start",
        "at most 365 days",
    );
    refused(
        post(
            &reservations,
            Some(LEAD),
            &reservation("late", "2026-12-20T00:00:00Z", "2100-01-02T00:00:00Z"),
        ),
        "end",
        "",
    );
    let too_many = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","kind":{{"kind":"Pod"}},"namespace":"ml-a","object":{{"metadata":{{"name":"p"}},"spec":{{"containers":[{{"name":"a","resources":{{"limits":{{"nvidia.com/gpu":"{}"}}}}}}]}}}}}}}}"#,
        1025
    );
    let (status, body) = post(
        &format!("{api}/v1/k8s/admission"),
        Some(SCHEDULER),
        &too_many,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("1024"), "{body}");

    // A producer that bypasses the API: an event a day ahead of its
    // record's append time goes to the DLQ with the reason.
    let ahead = Timestamp::from_micros(Timestamp::now().as_micros() + 86_400_000_000).to_string();
    let bypass = Event::from_json_str(&policy(&ahead)).unwrap();
    stream_events(&bootstrap, &prefix, vec![bypass], 1, Duration::ZERO)
        .await
        .unwrap();
    let dead = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.dlq"),
        1,
        Duration::from_secs(60),
    );
    let reasons: Vec<&str> = dead
        .iter()
        .filter_map(|(_, headers)| {
            headers
                .iter()
                .find(|(k, _)| k == DLQ_REASON_HEADER)
                .map(|(_, v)| v.as_str())
        })
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("--ledger-max-ahead-s")),
        "{reasons:?}"
    );
    assert!(processor.is_running());
}
