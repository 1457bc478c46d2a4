//! The collector's job endpoint puts a job's lifecycle on the real broker:
//! a start and an end posted over HTTP reach the ledger topic as
//! `JobEvent`s carrying the node's pool, cluster and node; bad bodies get a
//! `400` that names what is wrong, and nothing of them is sent. The
//! endpoint has a listener of its own; with a token, a caller without it
//! gets a `401`, and bound beyond loopback without one, the collector
//! refuses to start.

use std::time::Duration;

use gpuledger_schemas::events::JobState;
use gpuledger_schemas::{Codec, EventBody};
use gpuledger_tests::{
    Service, WorkDir, create_topics, eventually, post, read_committed, require_broker,
    unique_prefix,
};

const TOKEN: &str = "jobs-secret-n7";

#[test]
fn a_job_endpoint_beyond_loopback_needs_a_token() {
    let out = std::process::Command::new(gpuledger_tests::binary("gpuledger-collector"))
        .args([
            "run",
            "--source",
            "fake",
            "--fake-gpus",
            "1",
            "--node",
            "n1",
        ])
        .args(["--pool", "h200", "--listen", "127.0.0.1:0"])
        .args(["--jobs-listen", "0.0.0.0:0", "--spool-dir"])
        .arg(tempfile_dir().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--jobs-token"), "{stderr}");
}

fn tempfile_dir() -> WorkDir {
    WorkDir::new("jobs-endpoint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_posted_job_events_reach_the_ledger() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("jobsapi");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("jobs-api");
    let spool = work.path().join("spool");
    let mut collector = Service::start(
        "gpuledger-collector",
        &[
            "run",
            "--source",
            "fake",
            "--fake-gpus",
            "1",
            "--fake-migs",
            "0",
            "--node",
            "n7",
            "--pool",
            "h200",
            "--cluster",
            "west",
            "--interval-ms",
            "60000",
            "--listen",
            "127.0.0.1:0",
            "--jobs-listen",
            "127.0.0.1:0",
            "--jobs-token",
            TOKEN,
            "--topic-prefix",
            &prefix,
            "--kafka-bootstrap",
            &bootstrap,
            "--spool-dir",
            spool.to_str().unwrap(),
        ],
        &work.path().join("collector.log"),
    );
    let base = collector.wait_for_lines(
        &["metrics listening on ", "jobs listening on "],
        Duration::from_secs(30),
    );
    let jobs = format!("{}/v1/jobs", base[1]);
    let body = r#"{"job_id":"train-1","tenant":"team-llm"}"#;
    for token in [None, Some("not-the-token")] {
        let (status, answer) = post(&format!("{jobs}/start"), token, body);
        assert_eq!(status, 401, "{answer}");
    }
    let (status, _) = post(&format!("{}/v1/jobs/start", base[0]), Some(TOKEN), body);
    assert_eq!(status, 404, "the metrics listener has no job endpoint");

    // Bad bodies: each answer names the problem.
    let (status, answer) = post(
        &format!("{jobs}/start"),
        Some(TOKEN),
        r#"{"job_id":"train-1","tenantt":"team-llm"}"#,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("tenantt"),
        "{answer}"
    );
    let (status, answer) = post(
        &format!("{jobs}/end"),
        Some(TOKEN),
        r#"{"job_id":"train-1","tenant":"team-llm"}"#,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("exit status"),
        "{answer}"
    );
    let (status, answer) = post(
        &format!("{jobs}/end"),
        Some(TOKEN),
        r#"{"job_id":"train-1","tenant":"team-llm","exit":"boom"}"#,
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("boom"),
        "{answer}"
    );
    let (status, answer) = post(
        &format!("{jobs}/start"),
        Some(TOKEN),
        r#"{"job_id":"train-1","tenant":"team-llm","requested_slices":1}"#,
    );
    assert_eq!(status, 400, "{answer}");

    // A start on two GPUs, then an end killed by a signal: cancelled.
    let (status, answer) = post(
        &format!("{jobs}/start"),
        Some(TOKEN),
        r#"{"job_id":"train-1","attempt":2,"tenant":"team-llm","user":"bob","devices":["GPU-fake-0000"]}"#,
    );
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["event_id"], "train-1-2-started-n7");
    let (status, answer) = post(
        &format!("{jobs}/end"),
        Some(TOKEN),
        r#"{"job_id":"train-1","attempt":2,"tenant":"team-llm","exit":"0:15","work_units":"120","work_unit_name":"steps"}"#,
    );
    assert_eq!(status, 202, "{answer}");

    let codec = Codec::builtin();
    let topic = format!("{prefix}gpuledger.ledger");
    let events = eventually(
        "both job events on the ledger",
        Duration::from_secs(60),
        || {
            let jobs: Vec<_> = read_committed(&bootstrap, &topic, 100, Duration::from_secs(3))
                .iter()
                .map(|(value, _)| codec.decode(value).unwrap())
                .filter(|e| matches!(e.body, EventBody::JobEvent(_)))
                .collect();
            (jobs.len() >= 2).then_some(jobs)
        },
    );
    assert_eq!(events.len(), 2, "only the two accepted bodies were sent");
    let states: Vec<_> = events
        .iter()
        .map(|e| {
            let EventBody::JobEvent(j) = &e.body else {
                unreachable!()
            };
            assert_eq!(
                (
                    j.pool.as_str(),
                    j.node.as_deref(),
                    j.attempt,
                    e.envelope.cluster.as_str()
                ),
                ("h200", Some("n7"), 2, "west")
            );
            (j.state, j.exit_code, j.devices.clone())
        })
        .collect();
    assert_eq!(
        states,
        [
            (
                JobState::Started,
                None,
                Some(vec!["GPU-fake-0000".to_owned()])
            ),
            (JobState::Cancelled, Some(0), None),
        ]
    );
    collector.kill();
}
