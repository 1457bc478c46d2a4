//! Helpers for end-to-end tests: the real local broker, the real binaries
//! as child processes (killed on drop), and HTTP calls.
//!
//! Tests that need the broker fail with a clear message when none answers;
//! `make test` starts it (`deploy/local/kafka.sh start`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};

mod ledger;

pub use ledger::{
    demo_month, ledger_line, live_decisions_equal_a_replay, offline_statement, stream_events,
    wait_for_month_end,
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

/// Path of a workspace binary, built by `cargo build --workspace`.
pub fn binary(name: &str) -> PathBuf {
    // Test executables live in <target>/<profile>/deps; binaries one up.
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace` first (make test does)",
        path.display()
    );
    path
}

/// A scratch folder for a test's data and logs: removed when the test
/// passes, kept (and its path printed) when it fails.
#[derive(Debug)]
pub struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    /// A new folder named after the test.
    pub fn new(name: &str) -> WorkDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpuledger-{name}-"))
            .tempdir()
            .expect("scratch folder");
        WorkDir(Some(dir))
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        self.0
            .as_ref()
            .map(|d| d.path())
            .expect("work dir is present until drop")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "kept the failed test's data and logs in {}",
                dir.keep().display()
            );
        }
    }
}

/// Starts `gpuledger-processor run` on `bootstrap` with the topics of
/// `prefix`, the consumer group `<prefix>processor`, history and state in
/// `work`'s `history` and `state` folders, the control API on a free port,
/// then the `extra` flags; stderr goes to `log` in `work`.
pub fn start_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
    extra: &[&str],
    log: &str,
) -> Service {
    let history = work.join("history");
    let state = work.join("state");
    let group = format!("{prefix}processor");
    // One instance, restarted in place as a StatefulSet pod would be.
    let instance = format!("{prefix}processor-0");
    let mut args = vec![
        "run",
        "--group-instance-id",
        &instance,
        "--kafka-bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--history-root",
        history.to_str().expect("a UTF-8 path"),
        "--group-id",
        &group,
        "--state-dir",
        state.to_str().expect("a UTF-8 path"),
        "--api-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Service::start("gpuledger-processor", &args, &work.join(log))
}

/// Starts a processor for a telemetry test: files roll after 300 ms, so
/// rows show up in the history soon after their records. Returns it and
/// its control API's URL.
pub fn start_telemetry_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
) -> (Service, String) {
    let extra = ["--flush-interval-ms", "300"];
    let mut processor = start_processor(bootstrap, prefix, work, &extra, "processor.log");
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(30));
    (processor, api)
}

/// Starts a processor for a ledger test: `admin` may post events, it
/// ticks no clock of its own (the ledger carries its `Clock` events) and
/// flushes history every 200 ms. Returns it and its control API's URL.
pub fn start_ledger_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
    admin: &str,
    log: &str,
) -> (Service, String) {
    let token = format!("admin:{admin}");
    let extra = [
        "--api-token",
        &token,
        "--clock-interval-s",
        "0",
        "--flush-interval-ms",
        "200",
    ];
    let mut processor = start_processor(bootstrap, prefix, work, &extra, log);
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(120));
    (processor, api)
}

/// A running child process, killed when dropped.
#[derive(Debug)]
pub struct Service {
    pub name: &'static str,
    child: Child,
}

impl Service {
    /// Starts `name` with `args`; stderr goes to `log`.
    pub fn start(name: &'static str, args: &[&str], log: &std::path::Path) -> Service {
        Self::start_with_env(name, args, &[], log)
    }

    /// [`Service::start`] with `env` added to the environment.
    pub fn start_with_env(
        name: &'static str,
        args: &[&str],
        env: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Service {
        let log = std::fs::File::create(log).expect("log file");
        let child = Command::new(binary(name))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {name}: {e}"));
        Service { name, child }
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        self.wait_for_lines(&[prefix], timeout).remove(0)
    }

    /// Reads stdout lines until one has started with each of `prefixes`, in
    /// that order; returns the rest of each. Stdout can be read once.
    pub fn wait_for_lines(&mut self, prefixes: &[&str], timeout: Duration) -> Vec<String> {
        let stdout = self.child.stdout.take().expect("stdout is read once");
        let (tx, rx) = std::sync::mpsc::channel();
        let wanted: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
        std::thread::spawn(move || {
            let mut found = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix(&wanted[found.len()]) {
                    found.push(rest.to_owned());
                    if found.len() == wanted.len() {
                        let _ = tx.send(found);
                        return;
                    }
                }
            }
        });
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("{} printed no lines starting with {prefixes:?}", self.name))
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the query service over `history` on free ports, with `extra`
/// arguments; returns it, its HTTP base URL and its PostgreSQL address
/// (`host:port`).
pub fn start_query(
    history: impl AsRef<std::path::Path>,
    extra: &[&str],
    log: &std::path::Path,
) -> (Service, String, String) {
    let history = history.as_ref().to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--history-root",
        history,
        "--listen",
        "127.0.0.1:0",
        "--pg-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut query = Service::start("gpuledger-query", &args, log);
    let mut bound = query.wait_for_lines(
        &["listening on ", "postgres listening on "],
        Duration::from_secs(30),
    );
    let postgres = bound.pop().expect("two lines");
    let http = bound.pop().expect("two lines");
    (query, http, postgres)
}

/// A ledger test's services on fresh topics: a processor whose control API
/// takes `admin`'s events (see [`start_ledger_processor`]) and a query
/// service over its history. Keep `work` alive while they run: dropping it
/// removes their folder.
#[derive(Debug)]
pub struct LedgerStack {
    pub bootstrap: String,
    pub prefix: String,
    pub work: WorkDir,
    pub processor: Service,
    /// The control API's URL.
    pub api: String,
    pub query: Service,
    /// The query service's HTTP URL and PostgreSQL address.
    pub base_url: String,
    pub postgres: String,
}

impl LedgerStack {
    /// Starts the stack for test `name` on topics of `partitions`
    /// partitions.
    pub async fn start(name: &str, partitions: i32, admin: &str) -> LedgerStack {
        let bootstrap = require_broker();
        let prefix = unique_prefix(name);
        create_topics(&bootstrap, &prefix, partitions).await;
        let work = WorkDir::new(name);
        let (processor, api) =
            start_ledger_processor(&bootstrap, &prefix, work.path(), admin, "processor.log");
        let (query, base_url, postgres) = start_query(
            work.path().join("history"),
            &[],
            &work.path().join("query.log"),
        );
        LedgerStack {
            bootstrap,
            prefix,
            work,
            processor,
            api,
            query,
            base_url,
            postgres,
        }
    }
}

/// Runs a binary to completion and returns its stdout; panics with its
/// stderr if it fails.
pub fn run_to_end(name: &str, args: &[&str]) -> String {
    let output = Command::new(binary(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {name}: {e}"));
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
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
