//! Kafka over SASL_SSL, against the local broker's second listener (TLS
//! with the CA `deploy/local/kafka.sh` made, SCRAM logins, ACLs):
//!
//! - a client that speaks plaintext, or TLS without a login, or logs in
//!   with a wrong password, is refused; the right password is let in;
//! - the processor and the collector run with SCRAM users that hold the
//!   ACLs of `deploy/k8s/kafka-users.yaml` (topic, group and transactional
//!   id names carry the test's prefix): an admission is decided through
//!   the ledger and decisions topics, and the collector's job events and
//!   samples arrive;
//! - the collector's user can neither see nor write the decisions topic,
//!   and a user without ACLs sees no topic at all.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpuledger_schemas::{Codec, EventBody};
use gpuledger_tests::{
    Service, WorkDir, create_topics, eventually, post, read_committed, repo_root, require_broker,
    start_processor, unique_prefix,
};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};

const ADMIN: &str = "admin-secret-sasl";
const SCHEDULER: &str = "scheduler-secret-sasl";

const SETUP: &str = r#"{"type":"NodeInventory","event_id":"inv-1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","node":"n1","devices":[{"device_uuid":"GPU-1","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}]}
{"type":"TenantPolicy","event_id":"pol-a","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"h200","tenant":"team-a","nominal_ge":"1","burst_ge":"0","enforcement":"deny"}
"#;

/// The local broker's SASL_SSL listener and the CA that signed it.
struct SecureListener {
    bootstrap: String,
    ca: PathBuf,
}

fn secure_listener() -> SecureListener {
    assert!(
        std::env::var_os("GPULEDGER_KAFKA_BOOTSTRAP").is_none(),
        "this test adds SCRAM users and ACLs with deploy/local/kafka.sh, so it needs the local \
         broker: unset GPULEDGER_KAFKA_BOOTSTRAP (make test starts the local broker)"
    );
    let port: u16 = std::env::var("GPULEDGER_KAFKA_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9092);
    let data = std::env::var_os("GPULEDGER_KAFKA_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(format!("var/kafka-{port}")));
    let ca = data.join("tls/ca.crt");
    assert!(
        ca.exists(),
        "{} is missing: the local broker was started before it had a SASL_SSL listener; \
         restart it: deploy/local/kafka.sh stop && deploy/local/kafka.sh start",
        ca.display()
    );
    SecureListener {
        bootstrap: format!("127.0.0.1:{}", port + 2),
        ca,
    }
}

fn kafka_sh(args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new(repo_root().join("deploy/local/kafka.sh"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("deploy/local/kafka.sh runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kafka.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A SCRAM user with `password`, whose password file is written in `dir`.
fn add_user(name: &str, password: &str, dir: &Path) -> PathBuf {
    kafka_sh(&["user", name], Some(password));
    let file = dir.join(format!("{name}.password"));
    std::fs::write(&file, format!("{password}\n")).unwrap();
    file
}

/// Grants `operations` on `resources` (AclCommand's `--topic T`,
/// `--group G`, `--transactional-id T`, `--cluster` flags) to `user`.
fn allow(user: &str, operations: &[&str], resources: &[String], pattern: &str) {
    let principal = format!("User:{user}");
    let mut args = vec![
        "acl",
        "--add",
        "--allow-principal",
        &principal,
        "--resource-pattern-type",
        pattern,
    ];
    for op in operations {
        args.extend(["--operation", op]);
    }
    args.extend(resources.iter().map(String::as_str));
    kafka_sh(&args, None);
}

/// `--topic <prefix>gpuledger.<name>` for each name.
fn topics(prefix: &str, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| ["--topic".to_owned(), format!("{prefix}gpuledger.{n}")])
        .collect()
}

fn flag(name: &str, value: &str) -> Vec<String> {
    [name, value].map(str::to_owned).to_vec()
}

/// The ACLs of `deploy/k8s/kafka-users.yaml`, under the test's prefix.
fn grant_deployment_acls(prefix: &str, collector: &str, processor: &str) {
    let all = ["telemetry", "ledger", "decisions", "dlq"];
    let cluster = vec!["--cluster".to_owned()];
    // The collector writes samples and job events, nothing else.
    let written = topics(prefix, &["telemetry", "ledger"]);
    allow(collector, &["Write", "Describe"], &written, "literal");
    allow(collector, &["IdempotentWrite"], &cluster, "literal");
    // The processor reads every topic; writes the ledger (the control
    // API's events), decisions and the DLQ; commits its groups' offsets
    // and its transactions.
    allow(
        processor,
        &["Read", "Describe"],
        &topics(prefix, &all),
        "literal",
    );
    let written = topics(prefix, &["ledger", "decisions", "dlq"]);
    allow(processor, &["Write"], &written, "literal");
    for group in [prefix, "gpuledger-"] {
        allow(processor, &["Read"], &flag("--group", group), "prefixed");
    }
    let transactions = flag("--transactional-id", &format!("{prefix}processor"));
    allow(processor, &["Write", "Describe"], &transactions, "prefixed");
    allow(processor, &["IdempotentWrite"], &cluster, "literal");
}

/// A client of the SASL_SSL listener with the given protocol and login.
fn client(listener: &SecureListener, protocol: &str, login: Option<(&str, &str)>) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &listener.bootstrap)
        .set("security.protocol", protocol)
        .set("socket.timeout.ms", "5000");
    if protocol != "plaintext" {
        config.set("ssl.ca.location", listener.ca.display().to_string());
    }
    if let Some((user, password)) = login {
        config
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", user)
            .set("sasl.password", password);
    }
    config
}

/// Whether a metadata request over `config` is answered.
fn metadata_answered(config: &ClientConfig) -> bool {
    let consumer: BaseConsumer = config.create().expect("client");
    consumer
        .fetch_metadata(None, Duration::from_secs(8))
        .is_ok()
}

/// The error the broker gives `config`'s client for `topic`'s metadata.
fn topic_error(config: &ClientConfig, topic: &str) -> Option<RDKafkaErrorCode> {
    let consumer: BaseConsumer = config.create().expect("client");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("an authenticated client gets metadata");
    metadata
        .topics()
        .first()
        .and_then(|t| t.error())
        .map(RDKafkaErrorCode::from)
}

/// The gpuledger flags for the SASL_SSL listener with `user`'s login.
fn security_flags(listener: &SecureListener, user: &str, password_file: &Path) -> Vec<String> {
    [
        "--kafka-security-protocol",
        "sasl_ssl",
        "--kafka-ca",
        listener.ca.to_str().unwrap(),
        "--kafka-sasl-mechanism",
        "SCRAM-SHA-512",
        "--kafka-sasl-username",
        user,
        "--kafka-sasl-password-file",
        password_file.to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sasl_ssl_refuses_strangers_and_runs_the_stack_with_acls() {
    let plain = require_broker();
    let listener = secure_listener();
    let prefix = unique_prefix("sasl");
    create_topics(&plain, &prefix, 1).await;
    let work = WorkDir::new("sasl");
    let collector_user = format!("{prefix}collector");
    let processor_user = format!("{prefix}processor");
    let stranger = format!("{prefix}stranger");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let password = |who: &str| format!("{who}-pw-{nanos}").replace('.', "-");
    let collector_file = add_user(&collector_user, &password("c"), work.path());
    let processor_file = add_user(&processor_user, &password("p"), work.path());
    add_user(&stranger, &password("s"), work.path());
    grant_deployment_acls(&prefix, &collector_user, &processor_user);

    // Refused: plaintext, TLS without a login, a wrong password. The right
    // password on the same settings is let in.
    assert!(!metadata_answered(&client(&listener, "plaintext", None)));
    assert!(!metadata_answered(&client(&listener, "ssl", None)));
    let wrong = client(&listener, "sasl_ssl", Some((&stranger, "not-the-password")));
    assert!(!metadata_answered(&wrong));
    let unknown = client(&listener, "sasl_ssl", Some(("nobody-here", "whatever-pw")));
    assert!(!metadata_answered(&unknown));
    let stranger_pw = password("s");
    let stranger_client = client(&listener, "sasl_ssl", Some((&stranger, &stranger_pw)));
    assert!(metadata_answered(&stranger_client));

    // A user without ACLs sees no topic.
    let decisions = format!("{prefix}gpuledger.decisions");
    assert_eq!(
        topic_error(&stranger_client, &decisions),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed)
    );

    // The processor with its user: an admission is decided.
    let tokens = format!("admin:{ADMIN},scheduler:{SCHEDULER}");
    let mut extra = vec![
        "--api-token".to_owned(),
        tokens,
        "--clock-interval-s".into(),
        "1".into(),
    ];
    extra.extend(security_flags(&listener, &processor_user, &processor_file));
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut processor = start_processor(
        &listener.bootstrap,
        &prefix,
        work.path(),
        &extra,
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(90));
    let (status, body) = post(&format!("{api}/v1/events?mode=import"), Some(ADMIN), SETUP);
    assert_eq!(status, 200, "{body}");
    let ask = r#"{"pool":"h200","request_id":"r1","job_id":"job-r1","tenant":"team-a","slices":7,"max_slices":7}"#;
    let (status, decision) = post(&format!("{api}/v1/admission"), Some(SCHEDULER), ask);
    assert_eq!(status, 200, "{decision}");
    assert_eq!(decision["decision"], "admit", "{decision}");

    // The collector with its user: a job start and samples arrive.
    let spool = work.path().join("spool");
    let mut args: Vec<String> = [
        "run",
        "--source",
        "fake",
        "--fake-gpus",
        "1",
        "--fake-migs",
        "0",
        "--node",
        "n1",
        "--pool",
        "h200",
        "--cluster",
        "c",
        "--interval-ms",
        "1000",
        "--listen",
        "127.0.0.1:0",
        "--jobs-listen",
        "127.0.0.1:0",
        "--topic-prefix",
        &prefix,
        "--kafka-bootstrap",
        &listener.bootstrap,
        "--spool-dir",
        spool.to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(security_flags(&listener, &collector_user, &collector_file));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut collector = Service::start(
        "gpuledger-collector",
        &args,
        &work.path().join("collector.log"),
    );
    let urls = collector.wait_for_lines(
        &["metrics listening on ", "jobs listening on "],
        Duration::from_secs(30),
    );
    let (status, answer) = post(
        &format!("{}/v1/jobs/start", urls[1]),
        None,
        r#"{"job_id":"train-1","tenant":"team-a","devices":["GPU-fake-0000"]}"#,
    );
    assert_eq!(status, 202, "{answer}");
    let codec = Codec::builtin();
    let ledger = format!("{prefix}gpuledger.ledger");
    eventually(
        "the collector's job event on the ledger",
        Duration::from_secs(60),
        || {
            read_committed(&plain, &ledger, 100, Duration::from_secs(3))
                .iter()
                .any(|(value, _)| {
                    matches!(
                        codec.decode(value).map(|e| e.body),
                        Ok(EventBody::JobEvent(_))
                    )
                })
                .then_some(())
        },
    );
    let telemetry = format!("{prefix}gpuledger.telemetry");
    eventually("the collector's samples", Duration::from_secs(60), || {
        (!read_committed(&plain, &telemetry, 1, Duration::from_secs(3)).is_empty()).then_some(())
    });

    // The collector's user can neither see nor write the decisions topic.
    let collector_pw = password("c");
    let as_collector = client(
        &listener,
        "sasl_ssl",
        Some((&collector_user, &collector_pw)),
    );
    assert_eq!(
        topic_error(&as_collector, &decisions),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed)
    );
    let producer: FutureProducer = as_collector
        .clone()
        .set("message.timeout.ms", "10000")
        .create()
        .unwrap();
    let sent = producer
        .send(
            FutureRecord::<(), [u8]>::to(&decisions).payload(b"forged"),
            Duration::from_secs(10),
        )
        .await;
    let (err, _) = sent.expect_err("the collector may not write decisions");
    assert_eq!(
        err.rdkafka_error_code(),
        Some(RDKafkaErrorCode::TopicAuthorizationFailed),
        "{err}"
    );
    assert!(
        read_committed(&plain, &decisions, 100, Duration::from_secs(3))
            .iter()
            .all(|(value, _)| value.as_slice() != b"forged")
    );
    assert!(processor.is_running() && collector.is_running());
    collector.kill();
    processor.kill();
}
