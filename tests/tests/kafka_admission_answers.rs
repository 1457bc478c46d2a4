//! An admission is answered as soon as the ledger worker decides it, before
//! the decision's transaction commits. The answer must be the decision that
//! is committed in the end, also when the processor dies in between.
//!
//! Against the real broker: with commits held back (`--ledger-linger-ms`),
//! admissions are answered, the processor is killed with SIGKILL before
//! their transaction commits, and restarted; more admissions follow. Every
//! request then has exactly one `AdmissionDecision` in `gpuledger.decisions`
//! (read with `read_committed`), and it is the one its caller was given.

use std::collections::BTreeMap;
use std::time::Duration;

use gpuledger_schemas::{Codec, EventBody};
use gpuledger_tests::{
    WorkDir, create_topics, post, read_committed, require_broker, start_processor, unique_prefix,
};

const ADMIN: &str = "admin-token-answers";
/// Requests before the kill, and after the restart.
const BEFORE: usize = 30;
const AFTER: usize = 30;

/// Four GPUs; team-a has 2 GE of quota and 1 of burst: 21 one-slice
/// admissions fit, so the requests are answered quota, burst and deny.
const SETUP: &str = concat!(
    r#"{"type":"NodeInventory","event_id":"inv","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","node":"n1","devices":["#,
    r#"{"device_uuid":"GPU-0","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1},"#,
    r#"{"device_uuid":"GPU-1","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1},"#,
    r#"{"device_uuid":"GPU-2","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1},"#,
    r#"{"device_uuid":"GPU-3","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}]}"#,
    "\n",
    r#"{"type":"TenantPolicy","event_id":"pol","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","nominal_ge":"2","burst_ge":"1","enforcement":"deny"}"#,
    "\n",
);

fn ask(i: usize) -> String {
    format!(
        r#"{{"pool":"h200","request_id":"r{i}","job_id":"job-{i}","tenant":"team-a","slices":1,"max_slices":7}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_answers_given_before_the_commit_are_the_decisions_committed() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("answers");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("answers");
    let token = format!("admin:{ADMIN}");
    // Transactions wait 400 ms for company: answers come well before them.
    let args = [
        "--api-token",
        &token,
        "--clock-interval-s",
        "0",
        "--ledger-linger-ms",
        "400",
    ];
    let start = || {
        let mut processor =
            start_processor(&bootstrap, &prefix, work.path(), &args, "processor.log");
        let api = processor.wait_for_line("control API listening on ", Duration::from_secs(120));
        (processor, api)
    };
    let decisions_topic = format!("{prefix}gpuledger.decisions");
    let codec = Codec::builtin();
    let committed = |want: usize, timeout: Duration| -> Vec<(String, String, Option<String>)> {
        read_committed(&bootstrap, &decisions_topic, want, timeout)
            .into_iter()
            .filter_map(
                |(value, _)| match codec.decode(&value).expect("a decision").body {
                    EventBody::AdmissionDecision(d) => Some((
                        d.request_id.into(),
                        d.decision.to_string(),
                        d.kind.map(|k| k.to_string()),
                    )),
                    _ => None,
                },
            )
            .collect()
    };

    let (mut processor, api) = start();
    let (status, body) = post(&format!("{api}/v1/events?mode=import"), Some(ADMIN), SETUP);
    assert_eq!(status, 200, "{body}");
    let mut answers = BTreeMap::new();
    let mut answer = |api: &str, i: usize| {
        let (status, body) = post(&format!("{api}/v1/admission"), Some(ADMIN), &ask(i));
        assert_eq!(status, 200, "request r{i}: {body}");
        let kind = body["kind"].as_str().map(str::to_owned);
        answers.insert(
            format!("r{i}"),
            (body["decision"].as_str().unwrap().to_owned(), kind),
        );
    };
    for i in 0..BEFORE {
        answer(&api, i);
    }
    processor.kill();
    // What was committed when it died: not every answer yet, or this test
    // would not test answering before the commit.
    let before_restart = committed(BEFORE, Duration::from_secs(3)).len();
    assert!(
        before_restart < BEFORE,
        "all {BEFORE} answers were committed before the kill; nothing was answered ahead of its commit"
    );

    let (_processor, api) = start();
    for i in BEFORE..BEFORE + AFTER {
        answer(&api, i);
    }

    let decided = committed(BEFORE + AFTER, Duration::from_secs(60));
    let mut by_request: BTreeMap<String, Vec<(String, Option<String>)>> = BTreeMap::new();
    for (request, decision, kind) in decided {
        by_request
            .entry(request)
            .or_default()
            .push((decision, kind));
    }
    assert_eq!(by_request.len(), BEFORE + AFTER, "every request decided");
    for (request, (decision, kind)) in &answers {
        let committed = &by_request[request];
        assert_eq!(committed.len(), 1, "{request} decided once: {committed:?}");
        assert_eq!(
            committed[0],
            (decision.clone(), kind.clone()),
            "{request}: the committed decision is the one answered"
        );
    }
    let kinds: std::collections::BTreeSet<_> = answers.values().collect();
    assert!(
        kinds.len() >= 3,
        "quota, burst and deny answered: {kinds:?}"
    );
}
