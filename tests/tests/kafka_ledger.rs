//! The ledger through the real broker: events in, decisions out in Kafka
//! transactions, exactly once even when the processor is killed.

use std::collections::BTreeSet;
use std::time::Duration;

use gpuledger_common::kafka::{DLQ_REASON_HEADER, EventProducer, KafkaArgs};
use gpuledger_schemas::{Codec, Event, EventBody};
use gpuledger_tests::{
    Service, WorkDir, create_topics, read_committed, require_broker, start_processor, unique_prefix,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

fn example(name: &str) -> String {
    let path = gpuledger_tests::shared_examples().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn processor(bootstrap: &str, prefix: &str, work: &WorkDir, log: &str) -> Service {
    start_processor(
        bootstrap,
        prefix,
        work.path(),
        &[
            // The example owns time: no wall-clock ticks.
            "--clock-interval-s",
            "0",
            // A snapshot after every event, so the restart resumes from one.
            "--snapshot-every",
            "1",
        ],
        log,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_ledger_decides_the_worked_example_exactly_once_across_a_kill() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("ledger");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("ledger");

    // The worked example's ledger, plus one contradiction and one garbage record.
    let mut events: Vec<Event> = example("mig-quota-basics.ndjson")
        .lines()
        .map(|l| Event::from_json_str(l).expect("example line"))
        .collect();
    let contradiction = Event::from_json_str(
        r#"{"type":"JobEvent","event_id":"bad-1","event_time":"2026-11-30T00:00:00Z","source":"t","cluster":"c",
            "pool":"h100","job_id":"ghost","attempt":1,"tenant":"team-vision","state":"completed"}"#,
    )
    .unwrap();
    events.insert(events.len() - 2, contradiction);
    let mut producer = EventProducer::new(&KafkaArgs::local(&bootstrap, &prefix), "test").unwrap();
    for event in &events {
        producer.send(event).await.unwrap();
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    let raw: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let ledger_topic = format!("{prefix}gpuledger.ledger");
    raw.send(
        FutureRecord::to(&ledger_topic)
            .key("h200")
            .payload(&b"not avro"[..]),
        Duration::from_secs(10),
    )
    .await
    .unwrap();

    // Start, let it decide some, kill -9, start again.
    let decisions_topic = format!("{prefix}gpuledger.decisions");
    let mut first = processor(&bootstrap, &prefix, &work, "processor-1.log");
    let some = read_committed(&bootstrap, &decisions_topic, 1, Duration::from_secs(60));
    assert!(!some.is_empty(), "no decision within 60 s");
    // Kill once a snapshot exists, so the restart must resume from it.
    let state = work.path().join("state");
    gpuledger_tests::eventually("a ledger snapshot", Duration::from_secs(30), || {
        std::fs::read_dir(&state)
            .ok()?
            .flatten()
            .any(|f| f.file_name().to_string_lossy().ends_with(".snapshot.json"))
            .then_some(())
    });
    first.kill();
    let _second = processor(&bootstrap, &prefix, &work, "processor-2.log");

    let expected: serde_json::Value =
        serde_json::from_str(&example("mig-quota-basics.decisions.json")).unwrap();
    let expected = expected["decisions"].as_array().unwrap();
    // Ask for one more than expected: a repeated decision would show up.
    let records = read_committed(
        &bootstrap,
        &decisions_topic,
        expected.len() + 1,
        Duration::from_secs(20),
    );
    // Exactly once: as many decisions as the example has, no repeats.
    assert_eq!(
        records.len(),
        expected.len(),
        "decision records on the topic"
    );
    let codec = Codec::builtin();
    let decisions: Vec<Event> = records
        .iter()
        .map(|(v, _)| codec.decode(v).unwrap())
        .collect();
    let ids: BTreeSet<&str> = decisions
        .iter()
        .map(|d| d.envelope.event_id.as_str())
        .collect();
    assert_eq!(ids.len(), decisions.len(), "a decision appears twice");
    let mut got: Vec<serde_json::Value> = decisions
        .iter()
        .map(|d| {
            let EventBody::AdmissionDecision(a) = &d.body else {
                panic!("unexpected {d:?}")
            };
            serde_json::json!([
                a.request_id,
                a.decision.as_str(),
                a.kind.map(|k| k.as_str()),
                a.reason,
                a.entitled_ge.to_string(),
                a.used_ge.to_string(),
                d.envelope.event_time.to_string(),
                a.cause_event_id
            ])
        })
        .collect();
    let mut want: Vec<serde_json::Value> = expected
        .iter()
        .map(|e| {
            serde_json::json!([
                e["request_id"],
                e["decision"],
                e["kind"],
                e["reason"],
                e["entitled_ge"],
                e["used_ge"],
                e["at"],
                e["event_id"]
            ])
        })
        .collect();
    got.sort_by_key(|v| v.to_string());
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want);
    // A replay from offset 0 makes byte-identical decisions.
    let replayed_path = work.path().join("replayed.ndjson");
    let summary = gpuledger_tests::run_to_end(
        "gpuledger-processor",
        &[
            "replay",
            "--kafka-bootstrap",
            &bootstrap,
            "--topic-prefix",
            &prefix,
            "--state-dir",
            work.path().join("replay-state").to_str().unwrap(),
            "--decisions-out",
            replayed_path.to_str().unwrap(),
        ],
    );
    assert!(summary.contains("2 rejected"), "{summary}");
    assert!(
        summary.contains(&format!("{} decisions", expected.len())),
        "{summary}"
    );
    let replayed: BTreeSet<String> = std::fs::read_to_string(&replayed_path)
        .unwrap()
        .lines()
        .map(|l| Event::from_json_str(l).unwrap().to_json_string())
        .collect();
    let on_topic: BTreeSet<String> = decisions.iter().map(Event::to_json_string).collect();
    assert_eq!(replayed, on_topic);

    let second_log = std::fs::read_to_string(work.path().join("processor-2.log")).unwrap();
    assert!(
        second_log.contains("ledger state restored from snapshot"),
        "{second_log}"
    );

    // The contradiction and the garbage are in the DLQ, each with its reason.
    let dlq = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.dlq"),
        2,
        Duration::from_secs(30),
    );
    let reasons: Vec<String> = dlq
        .iter()
        .map(|(_, h)| {
            h.iter()
                .find(|(k, _)| k == DLQ_REASON_HEADER)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("never started")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("too short for Avro single-object encoding")),
        "{reasons:?}"
    );
}
