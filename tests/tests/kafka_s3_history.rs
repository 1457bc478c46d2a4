//! History on object storage: the processor writes every table to an
//! `s3://` root and the query service reads it there. The endpoint is
//! moto's S3 server (`moto_server`, installed by `deploy/local/setup.sh`),
//! spoken to over the real S3 protocol. The processor is killed with
//! SIGKILL mid-stream and restarted: afterwards every sample and every
//! ledger event is there exactly once, as the query service and pyarrow's
//! own S3 client both see it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpuledger_tests::{
    Service, WorkDir, binary, create_topics, eventually, python, require_broker, simulate, sql,
    unique_prefix,
};

const BUCKET: &str = "gpuledger-history";

/// moto's S3 server on a free port, stopped when dropped.
struct S3Server {
    child: Child,
    endpoint: String,
}

impl S3Server {
    fn start(work: &std::path::Path) -> S3Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let moto = python().with_file_name("moto_server");
        assert!(
            moto.exists(),
            "{} is missing: run deploy/local/setup.sh",
            moto.display()
        );
        let child = Command::new(moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(work.join("moto.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let endpoint = format!("http://127.0.0.1:{port}");
        let server = S3Server { child, endpoint };
        eventually("the S3 endpoint", Duration::from_secs(60), || {
            ureq::get(&server.endpoint).call().ok().map(|_| ())
        });
        // CreateBucket (moto takes it unsigned).
        ureq::put(&format!("{}/{BUCKET}", server.endpoint))
            .call()
            .expect("the bucket is created");
        server
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT", self.endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_history_on_s3_is_written_exactly_once_and_read_back() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("s3hist");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("s3-history");
    let s3 = S3Server::start(work.path());
    let env = s3.env();
    let root = format!("s3://{BUCKET}/history");
    let state = work.path().join("state");
    let group = format!("{prefix}processor");
    let args = [
        "run",
        "--kafka-bootstrap",
        &bootstrap,
        "--topic-prefix",
        &prefix,
        "--history-root",
        &root,
        "--group-id",
        &group,
        "--group-instance-id",
        &group,
        "--state-dir",
        state.to_str().unwrap(),
        "--clock-interval-s",
        "0",
        "--flush-interval-ms",
        "200",
        "--flush-rows",
        "500",
    ];
    let start = |run: u32| {
        let log = work.path().join(format!("processor-{run}.log"));
        Service::start_with_env("gpuledger-processor", &args, &env, &log)
    };
    let mut processor = start(1);

    // A fleet with tenants: samples, and inventory, admissions, job events
    // and health events for the ledger.
    let simulated = simulate(
        &bootstrap,
        &prefix,
        &[
            "--cluster",
            "s3",
            "--nodes",
            "3",
            "--gpus-per-node",
            "2",
            "--ticks",
            "1500",
            "--interval-ms",
            "60000",
            "--start",
            "2026-11-02T22:00:00Z",
            "--tenants",
            "team-a,team-b",
            "--xid-per-gpu-day",
            "2",
        ],
    );
    let samples = simulated["samples"].as_u64().unwrap();
    let ledger_events = ["inventories", "admission_requests", "job_events"]
        .iter()
        .map(|k| simulated[k].as_u64().unwrap())
        .sum::<u64>();
    let (mut query, base_url, _pg) = {
        let log = work.path().join("query.log");
        let serve = [
            "serve",
            "--history-root",
            &root,
            "--listen",
            "127.0.0.1:0",
            "--pg-listen",
            "127.0.0.1:0",
        ];
        let mut query = Service::start_with_env("gpuledger-query", &serve, &env, &log);
        let mut bound = query.wait_for_lines(
            &["listening on ", "postgres listening on "],
            Duration::from_secs(30),
        );
        let pg = bound.pop().unwrap();
        (query, bound.pop().unwrap(), pg)
    };
    let count = |table: &str| -> Option<u64> {
        sql(&base_url, &format!("SELECT count(*) AS n FROM {table}"))
            .ok()?
            .first()?["n"]
            .as_u64()
    };

    // SIGKILL once some files are in the bucket, then a new process.
    eventually("the first samples files", Duration::from_secs(120), || {
        (count("samples")? > 0).then_some(())
    });
    // Past an offset commit (every second), so the restart resumes from
    // what the first process stored.
    std::thread::sleep(Duration::from_millis(1_500));
    processor.kill();
    let mut processor = start(2);

    eventually(
        "every sample and ledger event",
        Duration::from_secs(240),
        || {
            let devices_and_health = sql(
                &base_url,
                "SELECT count(*) AS n FROM ledger_events WHERE type = 'DeviceHealth'",
            )
            .ok()?[0]["n"]
                .as_u64()?;
            (count("samples")? == samples
                && count("ledger_events")? == ledger_events + devices_and_health)
                .then_some(())
        },
    );
    let once = sql(
        &base_url,
        "SELECT (SELECT count(*) FROM (SELECT node, seq FROM samples GROUP BY node, seq HAVING count(*) > 1)) AS twice_samples, \
                (SELECT count(*) FROM (SELECT event_id FROM ledger_events GROUP BY event_id HAVING count(*) > 1)) AS twice_events, \
                (SELECT count(*) FROM device_hourly) AS hourly, \
                (SELECT count(*) FROM decisions) AS decisions",
    )
    .unwrap();
    assert_eq!(once[0]["twice_samples"], 0, "{once:?}");
    assert_eq!(once[0]["twice_events"], 0, "{once:?}");
    assert!(once[0]["hourly"].as_u64().unwrap() > 0, "{once:?}");
    assert!(once[0]["decisions"].as_u64().unwrap() > 0, "{once:?}");

    // Another engine with its own S3 client reads the same objects, with
    // the `date` partition column.
    let read = Command::new(python())
        .arg("-c")
        .arg(
            [
                "import sys, pyarrow.dataset as ds, pyarrow.fs as fs",
                "s3 = fs.S3FileSystem(access_key='testing', secret_key='testing', region='us-east-1',",
                "                     endpoint_override=sys.argv[1], scheme='http')",
                "for table in ('samples', 'ledger_events'):",
                "    d = ds.dataset(f'gpuledger-history/history/{table}', filesystem=s3,",
                "                   format='parquet', partitioning='hive')",
                "    assert 'date' in d.schema.names, d.schema",
                "    print(d.count_rows())",
            ]
            .join("\n"),
        )
        .arg(&s3.endpoint)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let counts: Vec<u64> = String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(counts, [samples, count("ledger_events").unwrap()]);

    // Compaction needs an atomic swap of a day's files, which S3 lacks: it
    // says so instead of risking a reader counting rows twice.
    let compact = Command::new(binary("gpuledger-processor"))
        .args(["compact", "--history-root", &root])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!compact.status.success());
    let said = String::from_utf8_lossy(&compact.stderr);
    assert!(said.contains("local history only"), "{said}");

    processor.kill();
    query.kill();
}
