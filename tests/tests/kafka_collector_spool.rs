//! The collector loses nothing to a broker outage or a SIGKILL: while no
//! broker answers, its events go to the on-disk spool; it is killed with
//! SIGKILL; it restarts against the broker, which now answers, and sends
//! the spooled events first. Reading the topic back, every sample of both
//! runs is there exactly once and in `seq` order per device.
//!
//! The outage is an address where no broker listens: the same thing the
//! collector sees when the broker is stopped, without stopping the broker
//! other tests share.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gpuledger_schemas::{Codec, Event, EventBody};
use gpuledger_tests::{
    Service, WorkDir, create_topics, eventually, read_committed, require_broker, unique_prefix,
};

fn spooled(dir: &std::path::Path) -> Vec<Event> {
    std::fs::read_to_string(dir.join("events.ndjson"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| Event::from_json_str(l).ok())
        .collect()
}

fn samples(events: &[Event]) -> Vec<(String, i64)> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::GpuSample(s) => Some((s.device_uuid.clone(), s.seq)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_collector_spools_through_an_outage_and_a_kill() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("spool");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("spool");
    let spool = work.path().join("spool");
    let args = |bootstrap: &str| -> Vec<String> {
        [
            "run",
            "--source",
            "fake",
            "--fake-gpus",
            "2",
            "--fake-migs",
            "2",
            "--node",
            "n1",
            "--pool",
            "h200",
            "--interval-ms",
            "1000",
            "--topic-prefix",
            &prefix,
            "--kafka-bootstrap",
            bootstrap,
            "--spool-dir",
            spool.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    // No broker: rounds pile up in the spool. Then SIGKILL.
    let outage = args("127.0.0.1:1");
    let outage: Vec<&str> = outage.iter().map(String::as_str).collect();
    let mut first = Service::start(
        "gpuledger-collector",
        &outage,
        &work.path().join("collector-1.log"),
    );
    eventually("three rounds spooled", Duration::from_secs(30), || {
        (samples(&spooled(&spool)).len() >= 12).then_some(())
    });
    first.kill();
    let before = samples(&spooled(&spool));
    assert!(before.len() >= 12, "{before:?}");

    // The broker answers again: the spool goes first, then three new rounds.
    let mut back = args(&bootstrap);
    back.extend(["--rounds".to_owned(), "3".to_owned()]);
    let back: Vec<&str> = back.iter().map(String::as_str).collect();
    let mut second = Service::start(
        "gpuledger-collector",
        &back,
        &work.path().join("collector-2.log"),
    );
    let metrics_url = second.wait_for_line("metrics listening on ", Duration::from_secs(30));
    // While it runs: healthy, and the spooled events counted as delivered.
    let metrics = eventually("the spool delivered", Duration::from_secs(30), || {
        let healthy = ureq::get(&format!("{metrics_url}/healthz"))
            .call()
            .ok()?
            .status()
            == 200;
        let text = ureq::get(&format!("{metrics_url}/metrics"))
            .call()
            .ok()?
            .into_string()
            .ok()?;
        let delivered: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("gpuledger_collector_delivered_total "))?
            .parse()
            .ok()?;
        (healthy && delivered as usize >= before.len()).then_some(text)
    });
    assert!(
        metrics.contains("gpuledger_collector_spool_records"),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE gpuledger_collector_nvml_errors_total counter"),
        "{metrics}"
    );
    eventually("the second run to end", Duration::from_secs(60), || {
        (!second.is_running()).then_some(())
    });
    assert!(
        samples(&spooled(&spool)).is_empty(),
        "everything acknowledged leaves the spool"
    );

    let expected = before.len() + 12;
    let topic = format!("{prefix}gpuledger.telemetry");
    let records = read_committed(&bootstrap, &topic, expected + 1, Duration::from_secs(20));
    let codec = Codec::builtin();
    let events: Vec<Event> = records
        .iter()
        .map(|(v, _)| codec.decode(v).unwrap())
        .collect();
    let arrived = samples(&events);
    assert_eq!(arrived.len(), expected, "every sample once");
    let unique: BTreeSet<i64> = arrived.iter().map(|(_, seq)| *seq).collect();
    assert_eq!(unique.len(), expected, "no sample twice");
    for sample in &before {
        assert!(
            unique.contains(&sample.1),
            "spooled sample {sample:?} never arrived"
        );
    }
    // In order per device (a device's samples share a partition).
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for (device, seq) in &arrived {
        if let Some(previous) = last.insert(device, *seq) {
            assert!(*seq > previous, "{device}: {seq} after {previous}");
        }
    }
}
