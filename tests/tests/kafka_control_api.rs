//! The control API against the real broker: NDJSON events are checked line
//! by line and appended; an admission request is answered with the ledger's
//! decision; tokens and roles are enforced.

use std::time::Duration;

use gpuledger_tests::{
    Record, WorkDir, call, create_topics, post, read_committed, require_broker, start_processor,
    unique_prefix,
};

const ADMIN: &str = "admin-secret-1";
const SCHEDULER: &str = "scheduler-secret-1";
const LEAD: &str = "lead-secret-team-a";

const SETUP: &str = r#"{"type":"NodeInventory","event_id":"inv-1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","node":"n1","devices":[{"device_uuid":"GPU-1","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1},{"device_uuid":"GPU-2","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}]}
{"type":"TenantPolicy","event_id":"pol-a","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","nominal_ge":"1","burst_ge":"0","enforcement":"deny"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_control_api_appends_events_and_answers_admissions() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("api");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("api");
    let tokens = format!("admin:{ADMIN},scheduler:{SCHEDULER},lead:team-a:{LEAD}");
    let mut processor = start_processor(
        &bootstrap,
        &prefix,
        work.path(),
        &[
            "--api-token",
            &tokens,
            "--clock-interval-s",
            "1",
            "--k8s-namespace",
            "ml-a=team-a",
            "--k8s-default-pool",
            "h200",
        ],
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(60));
    let events = format!("{api}/v1/events?mode=import");
    let admission = format!("{api}/v1/admission");

    // No token, no entry.
    assert_eq!(post(&events, None, SETUP).0, 401);
    assert_eq!(post(&events, Some("wrong-token-x"), SETUP).0, 401);

    // One bad line refuses the whole body, naming the line and the field.
    let bad = format!(
        "{SETUP}{}\n",
        r#"{"type":"JobEvent","event_id":"j","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","job_id":"j","attempt":1,"tenant":"team-a","state":"started"}"#
    );
    let (status, body) = post(&events, Some(ADMIN), &bad);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["line"], 3);
    assert_eq!(body["field"], "pool");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("JobEvent \"j\": field `pool` is required"),
        "{body}"
    );

    // Roles: policies are the admin's; a team lead only reserves for its tenant.
    let (status, body) = post(&events, Some(SCHEDULER), SETUP);
    assert_eq!(status, 403, "{body}");
    assert_eq!(post(&events, Some(LEAD), SETUP).0, 403);

    let (status, body) = post(&events, Some(ADMIN), SETUP);
    assert_eq!(
        (status, body["accepted"].clone()),
        (200, serde_json::json!(2)),
        "{body}"
    );

    // A scheduler asks; the ledger answers through the decisions topic.
    let ask = |id: &str, slices: i32| {
        format!(
            r#"{{"pool":"h200","request_id":"{id}","job_id":"job-{id}","tenant":"team-a","slices":{slices},"max_slices":7}}"#
        )
    };
    let (status, first) = post(&admission, Some(SCHEDULER), &ask("r1", 7));
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["type"], "AdmissionDecision");
    assert_eq!(first["decision"], "admit");
    assert_eq!(first["kind"], "quota");
    // The same request again gets the same answer, not a second admission.
    let (status, again) = post(&admission, Some(SCHEDULER), &ask("r1", 7));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["event_id"], first["event_id"]);
    // Quota (1 GE) is used up and burst is 0.
    let (_, denied) = post(&admission, Some(SCHEDULER), &ask("r2", 1));
    assert_eq!(denied["decision"], "deny");
    assert_eq!(denied["reason"], "quota_exceeded");
    // A team lead cannot ask for admissions; bad bodies are named.
    assert_eq!(post(&admission, Some(LEAD), &ask("r3", 1)).0, 403);
    let (status, body) = post(&admission, Some(SCHEDULER), r#"{"pool":"h200"}"#);
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("missing field"),
        "{body}"
    );
    let (status, body) = post(&admission, Some(SCHEDULER), &ask("r4", 0));
    assert_eq!(
        (status, body["field"].clone()),
        (400, serde_json::json!("slices")),
        "{body}"
    );

    // Reservations: spare is 2 GPUs − 1 GE nominal = 1 GE; no double booking.
    let reservations = format!("{api}/v1/reservations");
    let reserve = |id: &str, start: &str, end: &str| {
        format!(
            r#"{{"pool":"h200","reservation_id":"{id}","slices":7,"max_slices":7,"start":"{start}","end":"{end}"}}"#
        )
    };
    let (status, confirmed) = post(
        &reservations,
        Some(LEAD),
        &reserve("res-1", "2027-01-01T00:00:00Z", "2027-01-03T00:00:00Z"),
    );
    assert_eq!(status, 200, "{confirmed}");
    assert_eq!(
        (confirmed["decision"].as_str(), confirmed["tenant"].as_str()),
        (Some("confirmed"), Some("team-a"))
    );
    let (status, rejected) = post(
        &reservations,
        Some(LEAD),
        &reserve("res-2", "2027-01-02T00:00:00Z", "2027-01-04T00:00:00Z"),
    );
    assert_eq!(status, 200, "{rejected}");
    assert_eq!(rejected["decision"], "rejected");
    assert!(
        rejected["reason"]
            .as_str()
            .unwrap()
            .contains("[2027-01-02T00:00:00Z, 2027-01-03T00:00:00Z)"),
        "{rejected}"
    );
    let other = r#"{"pool":"h200","reservation_id":"res-3","tenant":"team-b","slices":1,"max_slices":7,"start":"2027-02-01T00:00:00Z","end":"2027-02-02T00:00:00Z"}"#;
    assert_eq!(post(&reservations, Some(LEAD), other).0, 403);
    let delete = |id: &str| {
        call(
            ureq::delete(&format!("{reservations}/{id}?pool=h200")),
            Some(LEAD),
            None,
        )
    };
    let (status, cancelled) = delete("res-1");
    assert_eq!(
        (status, cancelled["decision"].clone()),
        (200, serde_json::json!("cancelled")),
        "{cancelled}"
    );
    // What the ledger rejects comes back as 409 with its reason.
    let (status, body) = delete("res-404");
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("unknown reservation \"res-404\""),
        "{body}"
    );
    let (status, body) = post(
        &admission,
        Some(SCHEDULER),
        &ask("r5", 1).replace("h200", "a100"),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("unknown pool \"a100\""),
        "{body}"
    );

    // The Kubernetes webhook: the pod's GPUs become an admission request.
    let webhook = format!("{api}/v1/k8s/admission");
    let review = |uid: &str, namespace: &str, resources: &str| {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{uid}","kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"{namespace}","operation":"CREATE","object":{{"metadata":{{"name":"train-0"}},"spec":{{"containers":[{{"name":"c","resources":{{"limits":{resources}}}}}]}}}}}}}}"#
        )
    };
    // team-a's 1 GE of quota is held by r1: a 1g MIG slice is denied.
    let (status, reply) = post(
        &webhook,
        Some(SCHEDULER),
        &review("rev-1", "ml-a", r#"{"nvidia.com/mig-1g.18gb":"1"}"#),
    );
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["response"]["uid"], "rev-1");
    assert_eq!(reply["response"]["allowed"], false);
    assert_eq!(reply["response"]["status"]["code"], 403);
    assert!(
        reply["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("quota_exceeded"),
        "{reply}"
    );
    // The API server retries with a new review uid: same pod, same answer.
    let (_, retry) = post(
        &webhook,
        Some(SCHEDULER),
        &review("rev-2", "ml-a", r#"{"nvidia.com/mig-1g.18gb":"1"}"#),
    );
    assert_eq!(
        (
            retry["response"]["uid"].as_str(),
            retry["response"]["allowed"].as_bool()
        ),
        (Some("rev-2"), Some(false))
    );
    let (_, cpu) = post(
        &webhook,
        Some(SCHEDULER),
        &review("rev-3", "ml-a", r#"{"cpu":"2"}"#),
    );
    assert_eq!(cpu["response"]["allowed"], true);
    let (_, unmapped) = post(
        &webhook,
        Some(SCHEDULER),
        &review("rev-4", "elsewhere", r#"{"nvidia.com/gpu":"1"}"#),
    );
    assert_eq!(unmapped["response"]["allowed"], false);
    assert!(
        unmapped["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("elsewhere"),
        "{unmapped}"
    );

    // Read views of the ledger's state.
    let get = |path: &str, token: &str| call(ureq::get(&format!("{api}{path}")), Some(token), None);
    let (status, free) = get(
        "/v1/availability?pool=h200&from=2027-01-01T00:00:00Z&to=2027-01-05T00:00:00Z&ge=1&hours=24",
        LEAD,
    );
    assert_eq!(status, 200, "{free}");
    assert_eq!(free["windows"][0]["free_ge"], "1", "{free}");
    assert_eq!(free["earliest_start"], "2027-01-01T00:00:00Z", "{free}");
    assert_eq!(get("/v1/availability?pool=nowhere", LEAD).0, 404);
    let (status, me) = get("/v1/tenants/team-a", LEAD);
    assert_eq!(status, 200, "{me}");
    assert_eq!(
        (
            me["pools"][0]["nominal_ge"].as_str(),
            me["pools"][0]["use"]["quota"].as_str()
        ),
        (Some("1"), Some("1")),
        "{me}"
    );
    assert_eq!(get("/v1/tenants/team-b", LEAD).0, 403);
    // A dry run decides on a copy of the state and appends nothing.
    let dry = review("rev-5", "ml-a", r#"{"nvidia.com/gpu":"1"}"#)
        .replace(
            r#""operation":"CREATE""#,
            r#""operation":"CREATE","dryRun":true"#,
        )
        .replace("train-0", "train-1");
    let (_, reply) = post(&webhook, Some(SCHEDULER), &dry);
    assert_eq!(reply["response"]["allowed"], false, "{reply}");
    assert!(
        reply["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("quota_exceeded"),
        "{reply}"
    );

    // A body of many slices arrives whole and in order: its last line
    // raises team-a's quota, and the next admission sees it.
    let mut many: String = (0..999)
        .map(|i| {
            format!(
                r#"{{"type":"UsageRecord","event_id":"use-{i}","event_time":"2026-11-02T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","kind":"storage_gb_hours","quantity":"1","start":"2026-11-01T00:00:00Z","end":"2026-11-02T00:00:00Z"}}"#
            ) + "\n"
        })
        .collect();
    many.push_str(
        &SETUP
            .lines()
            .nth(1)
            .unwrap()
            .replace(r#""nominal_ge":"1""#, r#""nominal_ge":"2""#)
            .replace(r#""pol-a""#, r#""pol-a-2""#),
    );
    let (status, body) = post(&events, Some(ADMIN), &many);
    assert_eq!(
        (status, body["accepted"].clone()),
        (200, serde_json::json!(1000)),
        "{body}"
    );
    let (_, raised) = post(&admission, Some(SCHEDULER), &ask("r6", 1));
    assert_eq!(raised["decision"], "admit", "{raised}");

    // Metrics: what was applied and what was rejected is counted.
    // Admissions are answered once decided, and decisions are counted once
    // their transaction commits, a moment later.
    let read_metrics = || {
        ureq::get(&format!("{api}/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    };
    let metric = |metrics: &str, name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
    };
    let mut metrics = read_metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metric(&metrics, "gpuledger_decisions_emitted_total") < 5
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        metrics = read_metrics();
    }
    let value = |name: &str| metric(&metrics, name);
    assert!(value("gpuledger_ledger_events_applied_total") >= 1_007);
    assert!(value("gpuledger_ledger_events_rejected_total") >= 2);
    assert!(value("gpuledger_decisions_emitted_total") >= 5);
    assert!(value("gpuledger_api_requests_refused_total") >= 8);
    // Every answered admission (HTTP and webhook) is timed; the buckets
    // are cumulative up to `+Inf`, which counts them all.
    let answered = value("gpuledger_admission_seconds_count");
    assert!(answered >= 2, "{metrics}");
    assert_eq!(
        value("gpuledger_admission_seconds_bucket{le=\"+Inf\"}"),
        answered
    );

    // The processor's own ticks (every second here): a Clock for the pool
    // among whatever the ledger holds after a few seconds.
    let ledger = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.ledger"),
        usize::MAX,
        Duration::from_secs(5),
    );
    let clocks: Vec<&Record> = ledger
        .iter()
        .filter(|(_, h)| {
            h.iter()
                .any(|(k, v)| k == "ce_type" && v == "gpuledger.Clock")
        })
        .collect();
    assert!(!clocks.is_empty(), "no Clock event on the ledger");
    let clock = gpuledger_schemas::Codec::builtin()
        .decode(&clocks[0].0)
        .unwrap();
    assert_eq!(clock.key(), "h200");
    assert!(processor.is_running());
}
