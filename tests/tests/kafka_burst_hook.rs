//! The burst provider hook against the real broker: a burst beyond free
//! spare makes the processor POST its `BurstTriggered` decision to the
//! configured URL, retrying a failing provider with the same
//! `Idempotency-Key`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, post, require_broker, start_processor, unique_prefix,
};

const ADMIN: &str = "admin-secret-burst";
const SCHEDULER: &str = "scheduler-secret-burst";

/// One HTTP request as the provider saw it.
#[derive(Debug)]
struct Call {
    idempotency_key: String,
    body: serde_json::Value,
}

/// A provider that answers 503 to its first call and 200 afterwards.
fn provider() -> (String, mpsc::Receiver<Call>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/burst", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut key) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("idempotency-key:") {
                    key = line["idempotency-key:".len()..].trim().to_owned();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let status = if n == 0 {
                "503 Service Unavailable"
            } else {
                "200 OK"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = tx.send(Call {
                idempotency_key: key,
                body: serde_json::from_slice(&body).unwrap_or_default(),
            });
        }
    });
    (url, rx)
}

const SETUP: &str = r#"{"type":"NodeInventory","event_id":"inv-1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","node":"n1","devices":[{"device_uuid":"GPU-1","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}]}
{"type":"TenantPolicy","event_id":"pol-a","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","nominal_ge":"1","burst_ge":"1","enforcement":"alert"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_burst_hook_posts_the_decision_and_retries() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("burst");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("burst");
    let (url, calls) = provider();
    let tokens = format!("admin:{ADMIN},scheduler:{SCHEDULER}");
    let mut processor = start_processor(
        &bootstrap,
        &prefix,
        work.path(),
        &[
            "--api-token",
            &tokens,
            "--clock-interval-s",
            "0",
            "--burst-webhook",
            &url,
            "--burst-webhook-backoff-ms",
            "100",
        ],
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(60));
    let (status, body) = post(&format!("{api}/v1/events?mode=import"), Some(ADMIN), SETUP);
    assert_eq!(status, 200, "{body}");
    // The one GPU is team-a's quota: a second GPU is burst with no spare
    // left, so on-demand capacity is asked for.
    for (id, kind) in [("r1", "quota"), ("r2", "burst")] {
        let (status, decision) = post(
            &format!("{api}/v1/admission"),
            Some(SCHEDULER),
            &format!(
                r#"{{"pool":"h200","request_id":"{id}","job_id":"job-{id}","tenant":"team-a","slices":1,"max_slices":1}}"#
            ),
        );
        assert_eq!(
            (status, &decision["kind"]),
            (200, &serde_json::json!(kind)),
            "{decision}"
        );
    }
    let first = calls
        .recv_timeout(Duration::from_secs(30))
        .expect("a first call");
    let retry = calls
        .recv_timeout(Duration::from_secs(30))
        .expect("a retry after the 503");
    assert_eq!(first.body["type"], "BurstTriggered", "{:?}", first.body);
    assert_eq!(first.body["tenant"], "team-a");
    assert_eq!(first.body["slices"], 1);
    assert_eq!(first.body["billed_as"], "burst");
    assert!(!first.idempotency_key.is_empty());
    assert_eq!(retry.idempotency_key, first.idempotency_key);
    assert_eq!(
        retry.idempotency_key,
        first.body["event_id"].as_str().unwrap()
    );
    // Delivered once: no third call.
    assert!(calls.recv_timeout(Duration::from_secs(2)).is_err());
    processor.kill();
}
