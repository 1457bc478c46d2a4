//! Helpers for the ledger's end-to-end tests: streaming a ledger into
//! the broker, checking live decisions against a replay, and the demo's
//! month.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use gpuledger_common::kafka::{EventProducer, KafkaArgs};
use gpuledger_schemas::Event;

use crate::{binary, eventually, read_committed, run_to_end, sql};

/// A ledger event of type `kind` from its JSON `fields` (source `t`,
/// cluster `c`); a line that does not read fails the test.
pub fn ledger_line(kind: &str, id: &str, at: gpuledger_schemas::Timestamp, fields: &str) -> Event {
    let text = format!(
        r#"{{"type":"{kind}","event_id":"{id}","event_time":"{at}","source":"t","cluster":"c",{fields}}}"#
    );
    Event::from_json_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Sends `events` to `prefix`'s topics in the background, `chunk` at a time
/// with `pause` after each, as a steady stream.
pub fn stream_events(
    bootstrap: &str,
    prefix: &str,
    events: Vec<Event>,
    chunk: usize,
    pause: Duration,
) -> tokio::task::JoinHandle<()> {
    let args = KafkaArgs::local(bootstrap, prefix);
    tokio::spawn(async move {
        let mut producer = EventProducer::new(&args, "test-stream").unwrap();
        for chunk in events.chunks(chunk) {
            for event in chunk {
                producer.send(event).await.unwrap();
            }
            producer.flush(Duration::from_secs(30)).await.unwrap();
            tokio::time::sleep(pause).await;
        }
    })
}

/// What an uninterrupted fold of the ledger on `prefix`'s topics decides
/// (`gpuledger-processor replay` from offset 0), checked against the
/// decisions committed live on `gpuledger.decisions`: each once, the same
/// set. Returns the live decisions.
pub fn live_decisions_equal_a_replay(
    bootstrap: &str,
    prefix: &str,
    work: &Path,
) -> Vec<gpuledger_schemas::Event> {
    let replayed = work.join("replayed.ndjson");
    run_to_end(
        "gpuledger-processor",
        &[
            "replay",
            "--kafka-bootstrap",
            bootstrap,
            "--topic-prefix",
            prefix,
            "--state-dir",
            work.join("replay-state").to_str().unwrap(),
            "--decisions-out",
            replayed.to_str().unwrap(),
        ],
    );
    let expected: std::collections::BTreeSet<String> = std::fs::read_to_string(&replayed)
        .unwrap()
        .lines()
        .map(|l| Event::from_json_str(l).unwrap().to_json_string())
        .collect();
    let topic = format!("{prefix}gpuledger.decisions");
    let records = eventually("every decision committed", Duration::from_secs(180), || {
        let records = read_committed(bootstrap, &topic, expected.len(), Duration::from_secs(20));
        (records.len() >= expected.len()).then_some(records)
    });
    // One more than expected is asked for: a repeat would show up.
    let again = read_committed(
        bootstrap,
        &topic,
        expected.len() + 1,
        Duration::from_secs(5),
    );
    assert_eq!(
        again.len(),
        expected.len(),
        "a decision was committed twice"
    );
    let codec = gpuledger_schemas::Codec::builtin();
    let live: Vec<Event> = records
        .iter()
        .map(|(v, _)| codec.decode(v).unwrap())
        .collect();
    let as_json: std::collections::BTreeSet<String> =
        live.iter().map(Event::to_json_string).collect();
    assert_eq!(
        as_json, expected,
        "live decisions differ from an uninterrupted fold"
    );
    live
}

/// A phase of the demo's month (`deploy/local/demo_month.py`: `setup`,
/// `close`, `month`, `sim-args`) for cluster `cluster`, as NDJSON lines (or
/// the simulator's settings, one per line).
pub fn demo_month(phase: &str, cluster: &str) -> String {
    let repo = crate::repo_root();
    let repo = repo.display();
    let output = Command::new("python3")
        .arg(format!("{repo}/deploy/local/demo_month.py"))
        .arg(phase)
        .arg("--collector")
        .arg(binary("gpuledger-collector"))
        .args(["--cluster", cluster])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run demo_month.py: {e}"));
    assert!(
        output.status.success(),
        "demo_month.py {phase} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The statement `gpuledger-processor statement` computes offline from the
/// NDJSON ledger at `path` for `period`.
pub fn offline_statement(path: &Path, period: &str) -> serde_json::Value {
    let out = run_to_end(
        "gpuledger-processor",
        &[
            "statement",
            "--ledger",
            path.to_str().unwrap(),
            "--period",
            period,
        ],
    );
    serde_json::from_str(&out).expect("a JSON statement")
}

/// Waits until `pools` pools' `Clock` events at the month's end (December
/// 1st 2026) are in the history: the ledger before them is too.
pub fn wait_for_month_end(base_url: &str, pools: u64) {
    eventually(
        "the month's end in history",
        Duration::from_secs(240),
        || {
            let rows = sql(
                base_url,
                "SELECT count(DISTINCT pool) AS n FROM ledger_events \
             WHERE type = 'Clock' AND event_time >= '2026-12-01T00:00:00Z'",
            )
            .ok()?;
            (rows[0]["n"].as_u64() == Some(pools)).then_some(())
        },
    );
}
