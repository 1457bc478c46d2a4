//! Helpers for end-to-end tests: the real local broker, the real binaries
//! as child processes (killed on drop), and HTTP calls.
//!
//! Tests that need the broker fail with a clear message when none answers;
//! `make test` starts it (`deploy/local/kafka.sh start`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};

mod ledger;
mod services;

pub use ledger::{
    demo_month, ledger_line, live_decisions_equal_a_replay, offline_statement, stream_events,
    wait_for_month_end,
};
pub use services::{
    LedgerStack, Service, WorkDir, binary, run_to_end, start_ledger_processor, start_processor,
    start_query, start_telemetry_processor,
};

/// This crate's folder (`tests/`), read when the test runs: cargo sets
/// `CARGO_MANIFEST_DIR` for the tests it runs. The compile-time value is
/// only a fallback, since a build cached in one checkout may be run from
/// another.
pub fn tests_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    tests_dir().join("..")
}

/// The published examples of DESIGN §12 (`../shared/examples`).
pub fn shared_examples() -> PathBuf {
    repo_root().join("../shared/examples")
}

/// The broker tests run against: `GPULEDGER_KAFKA_BOOTSTRAP`, or the local one.
pub fn bootstrap() -> String {
    std::env::var("GPULEDGER_KAFKA_BOOTSTRAP").unwrap_or_else(|_| {
        let port = std::env::var("GPULEDGER_KAFKA_PORT").unwrap_or_else(|_| "9092".into());
        format!("127.0.0.1:{port}")
    })
}

/// The project's Python (with confluent-kafka and fastavro): `GPULEDGER_PYTHON`,
/// or the environment `deploy/local/setup.sh` creates.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("GPULEDGER_PYTHON") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/gpuledger/venv/bin/python")
}

/// Runs the project's Python with `args` (a script and its arguments, or
/// `-c` and code) and returns what it printed. Fails the test, with what
/// the script wrote to stderr, if it fails.
pub fn run_python<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Vec<u8> {
    let out = Command::new(python())
        .args(args)
        .output()
        .expect("python runs (deploy/local/setup.sh creates it)");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A script of `tests/interop/`.
pub fn interop_script(name: &str) -> std::path::PathBuf {
    tests_dir().join("interop").join(name)
}

/// Reads history table `table` under `root` as any Parquet engine would
/// (`tests/interop/read_table.py`: DuckDB with Hive partitioning, and
/// pyarrow), and returns what they saw: `duckdb_rows`, `pyarrow_rows`,
/// `dates`, `pyarrow_has_date`. Fails the test if the script fails.
pub fn read_with_parquet_engines(root: &std::path::Path, table: &str) -> serde_json::Value {
    let out = run_python([
        interop_script("read_table.py").as_os_str(),
        root.as_os_str(),
        table.as_ref(),
    ]);
    serde_json::from_slice(&out).expect("read_table.py prints JSON")
}

/// Fails the test unless a broker answers a metadata request.
pub fn require_broker() -> String {
    let bootstrap = bootstrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("Kafka client");
    if let Err(e) = consumer.fetch_metadata(None, Duration::from_secs(10)) {
        panic!(
            "no Kafka broker answers on {bootstrap} ({e}); start one with `deploy/local/kafka.sh start` \
             (make test does) or set GPULEDGER_KAFKA_BOOTSTRAP"
        );
    }
    bootstrap
}

/// A topic prefix no other run uses, e.g. `e2e-skeleton-1234-99.`.
pub fn unique_prefix(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "e2e-{name}-{}-{}.",
        std::process::id(),
        nanos % 1_000_000_000
    )
}

/// Creates the four gpuledger topics under `prefix`.
pub async fn create_topics(bootstrap: &str, prefix: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("Kafka admin client");
    let names: Vec<String> = gpuledger_schemas::Topic::ALL
        .iter()
        .map(|t| t.name(prefix))
        .collect();
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
        .collect();
    let results = admin
        .create_topics(
            &topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create topics");
    for result in results {
        if let Err((topic, code)) = result {
            panic!("could not create topic {topic}: {code}");
        }
    }
    // Creation returns once the controller has the topics; wait until the
    // broker's metadata shows every partition, as consumers will ask it.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("Kafka client");
    for name in &names {
        eventually(
            &format!("topic {name} in metadata"),
            Duration::from_secs(30),
            || {
                let metadata = consumer
                    .fetch_metadata(Some(name), Duration::from_secs(5))
                    .ok()?;
                let topic = metadata.topics().first()?;
                (topic.error().is_none() && topic.partitions().len() == partitions as usize)
                    .then_some(())
            },
        );
    }
}

/// A record's value and headers.
pub type Record = (Vec<u8>, Vec<(String, String)>);

/// Every committed record of `topic` so far, read from the beginning until
/// `want` records arrived or `timeout` passed.
pub fn read_committed(bootstrap: &str, topic: &str, want: usize, timeout: Duration) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}-{}", std::process::id()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|x| {
                        (
                            x.key.to_owned(),
                            String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push((m.payload().unwrap_or_default().to_vec(), headers));
    }
    out
}

/// Sends `request` (with `body`, if any) as `token` and returns the status
/// and the JSON answer, whatever the status.
pub fn call(
    mut request: ureq::Request,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    if let Some(token) = token {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    let url = request.url().to_owned();
    let response = match body {
        Some(body) => request.send_string(body),
        None => request.call(),
    };
    match response {
        Ok(r) => (r.status(), r.into_json().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or_default()),
        Err(e) => panic!("{url}: {e}"),
    }
}

/// POSTs `body` as `token`; the status and the JSON answer.
pub fn post(url: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    call(ureq::post(url), token, Some(body))
}

/// `POST /v1/sql` with JSON in and rows out.
pub fn sql(base_url: &str, query: &str) -> Result<Vec<serde_json::Value>, String> {
    match ureq::post(&format!("{base_url}/v1/sql")).send_json(serde_json::json!({ "sql": query })) {
        Ok(response) => response
            .into_json::<Vec<serde_json::Value>>()
            .map_err(|e| e.to_string()),
        Err(ureq::Error::Status(code, response)) => Err(format!(
            "HTTP {code}: {}",
            response.into_string().unwrap_or_default()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `gpuledger-collector simulate` against the broker with `args`
/// (pool, nodes, ticks, start…) and returns its JSON summary.
pub fn simulate(bootstrap: &str, prefix: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "simulate",
        "--kafka-bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--summary",
    ];
    all.extend_from_slice(args);
    serde_json::from_str(&run_to_end("gpuledger-collector", &all)).expect("a JSON summary")
}

/// The arguments of `gpuledger-processor catch-up` of `prefix`'s telemetry
/// on `bootstrap` into `history` as group `group`, logging warnings only;
/// more may follow.
pub fn catch_up_args(
    bootstrap: &str,
    prefix: &str,
    history: &std::path::Path,
    group: &str,
) -> Vec<String> {
    let history = history.to_str().expect("a history root named in UTF-8");
    [
        "--log-filter",
        "warn",
        "catch-up",
        "--kafka-bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--history-root",
        history,
        "--group-id",
        group,
    ]
    .map(String::from)
    .to_vec()
}

/// Polls `check` until it gives `Some`, or panics with `what` after `timeout`.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// FOCUS 1.2's mandatory columns and the type a FOCUS reader expects of
/// each (Decimal, String, DateTime).
const FOCUS_MANDATORY: [(&str, &str); 21] = [
    ("BilledCost", "decimal128(38, 2)"),
    ("BillingAccountId", "string"),
    ("BillingAccountName", "string"),
    ("BillingCurrency", "string"),
    ("BillingPeriodEnd", "timestamp[us, tz=UTC]"),
    ("BillingPeriodStart", "timestamp[us, tz=UTC]"),
    ("ChargeCategory", "string"),
    ("ChargeClass", "string"),
    ("ChargeDescription", "string"),
    ("ChargePeriodEnd", "timestamp[us, tz=UTC]"),
    ("ChargePeriodStart", "timestamp[us, tz=UTC]"),
    ("ContractedCost", "decimal128(38, 2)"),
    ("EffectiveCost", "decimal128(38, 2)"),
    ("InvoiceIssuerName", "string"),
    ("ListCost", "decimal128(38, 2)"),
    ("PricingQuantity", "decimal128(38, 12)"),
    ("PricingUnit", "string"),
    ("ProviderName", "string"),
    ("PublisherName", "string"),
    ("ServiceCategory", "string"),
    ("ServiceName", "string"),
];

/// `GET /v1/export/focus?period=…` as Parquet, read by pyarrow (saved in
/// `dir`): asserts every mandatory column with its type, custom columns
/// after them, no consumed quantity outside `Usage`, only the categories
/// we write, and the same rows as CSV; returns what `read_focus.py` read.
pub fn focus_export(base_url: &str, period: &str, dir: &std::path::Path) -> serde_json::Value {
    let url = format!("{base_url}/v1/export/focus?period={period}");
    let response = ureq::get(&url)
        .set("Accept", "application/vnd.apache.parquet")
        .call()
        .unwrap();
    assert_eq!(response.content_type(), "application/vnd.apache.parquet");
    let mut parquet = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut parquet).unwrap();
    let file = dir.join(format!("focus-{period}.parquet"));
    std::fs::write(&file, &parquet).unwrap();
    let out = run_python([interop_script("read_focus.py"), file.clone()]);
    let read: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let types = read["types"].as_object().unwrap();
    for (column, data_type) in FOCUS_MANDATORY {
        assert_eq!(
            types.get(column).and_then(|t| t.as_str()),
            Some(data_type),
            "{column}: {read}"
        );
    }
    let names: Vec<&String> = types.keys().collect();
    let first_custom = names.iter().position(|n| n.starts_with("x_")).unwrap();
    assert!(
        names[first_custom..].iter().all(|n| n.starts_with("x_")),
        "{names:?}"
    );
    assert_eq!(read["consumed_outside_usage"], 0, "{read}");
    for category in read["categories"].as_array().unwrap() {
        let category = category.as_str().unwrap();
        assert!(
            ["Usage", "Credit", "Adjustment"].contains(&category),
            "{read}"
        );
    }
    let csv = ureq::get(&format!("{url}&format=csv"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(csv.starts_with("BilledCost,BillingAccountId,"), "{csv}");
    assert_eq!(
        csv.lines().count() as u64,
        1 + read["rows"].as_u64().unwrap()
    );
    read
}

/// `gpuledger-processor generate`: `days` days from `start` of a 16-GPU
/// fleet of four tenants, one sample per GPU every 10 minutes, written to
/// `root` (one telemetry partition).
pub fn generate_history(root: &std::path::Path, days: u32, start: &str, seed: u64) {
    let out = Command::new(binary("gpuledger-processor"))
        .args(["--log-filter", "warn", "generate", "--gpus", "16"])
        .args(["--days", &days.to_string(), "--interval-s", "600"])
        .args([
            "--start",
            start,
            "--seed",
            &seed.to_string(),
            "--partitions",
            "1",
        ])
        .arg("--history-root")
        .arg(root)
        .output()
        .expect("gpuledger-processor runs");
    assert!(
        out.status.success(),
        "generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
