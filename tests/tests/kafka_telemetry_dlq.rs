//! Bad records on the telemetry topic, against the real broker: bytes that
//! are not Avro, a sample that breaks a rule, a sample cut short and an
//! event that belongs on the ledger each go to the DLQ with their reason;
//! the good samples around them are all written, once, and the count of
//! dead letters says four.

use std::time::Duration;

use gpuledger_common::kafka::{DLQ_REASON_HEADER, EventProducer, KafkaArgs};
use gpuledger_schemas::samples::one_of_each;
use gpuledger_schemas::{Codec, Event, EventBody};
use gpuledger_tests::{
    WorkDir, create_topics, eventually, read_committed, require_broker, sql, start_query,
    start_telemetry_processor, unique_prefix,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// The template sample of the shared examples, as sample `n` of a device.
fn sample(n: i64) -> Event {
    let mut event = one_of_each()
        .into_iter()
        .find(|e| matches!(e.body, EventBody::GpuSample(_)))
        .expect("an example sample");
    event.envelope.event_id = format!("dlq-test:{n}").into();
    event.envelope.event_time = event.envelope.event_time.plus_micros(n * 10_000_000);
    if let EventBody::GpuSample(s) = &mut event.body {
        s.seq = n;
        s.mem_used_bytes = n;
    }
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_telemetry_bad_records_go_to_the_dlq_and_the_rest_is_written() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("tdlq");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("telemetry-dlq");
    let history = work.path().join("history");

    let mut producer = EventProducer::new(&KafkaArgs::local(&bootstrap, &prefix), "test").unwrap();
    let raw: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let topic = format!("{prefix}gpuledger.telemetry");
    let send_raw = |payload: Vec<u8>| {
        let raw = raw.clone();
        let topic = topic.clone();
        async move {
            raw.send(
                FutureRecord::<[u8], [u8]>::to(&topic)
                    .partition(0)
                    .payload(&payload[..]),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        }
    };
    let codec = Codec::builtin();
    // Good samples 0..10, with the bad records between them.
    for n in 0..5 {
        producer.send_to(&sample(n), Some(0)).await.unwrap();
    }
    send_raw(b"not avro".to_vec()).await;
    let mut hot = sample(100);
    if let EventBody::GpuSample(s) = &mut hot.body {
        s.sm_util_pct = Some(150.0);
    }
    send_raw(codec.encode(&hot).unwrap()).await;
    let mut cut = codec.encode(&sample(101)).unwrap();
    cut.truncate(cut.len() - 3);
    send_raw(cut).await;
    let ledger_event = one_of_each()
        .into_iter()
        .find(|e| matches!(e.body, EventBody::JobEvent(_)))
        .expect("an example job event");
    send_raw(codec.encode(&ledger_event).unwrap()).await;
    for n in 5..10 {
        producer.send_to(&sample(n), Some(0)).await.unwrap();
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();

    let (_processor, api) = start_telemetry_processor(&bootstrap, &prefix, work.path());
    let (_query, base_url, _postgres) = start_query(
        history.to_str().unwrap(),
        &[],
        &work.path().join("query.log"),
    );

    let dlq = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.dlq"),
        4,
        Duration::from_secs(60),
    );
    let reasons: Vec<String> = dlq
        .iter()
        .map(|(_, headers)| {
            headers
                .iter()
                .find(|(k, _)| k == DLQ_REASON_HEADER)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].contains("Avro"), "{reasons:?}");
    assert!(
        reasons[1].contains("sm_util_pct") && reasons[1].contains("150"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("GpuSample"), "{reasons:?}");
    assert!(
        reasons[3].contains("JobEvent") && reasons[3].contains("does not belong"),
        "{reasons:?}"
    );
    // The dead letter keeps the original bytes.
    assert_eq!(dlq[0].0, b"not avro");

    let rows = eventually("the ten good samples", Duration::from_secs(60), || {
        let rows = sql(
            &base_url,
            "SELECT count(*) AS n, count(DISTINCT seq) AS seqs, sum(mem_used_bytes) AS used FROM samples",
        )
        .ok()?;
        (rows[0]["n"] == 10).then(|| rows[0].clone())
    });
    assert_eq!(rows["seqs"], 10);
    assert_eq!(rows["used"], 45);
    let metrics = ureq::get(&format!("{api}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "gpuledger_telemetry_dead_letters_total 4"),
        "{metrics}"
    );
}
