//! History on object storage: the processor writes every table to an
//! `s3://` root and the query service reads it there. The endpoint is
//! moto's S3 server (`moto_server`, installed by `deploy/local/setup.sh`),
//! spoken to over the real S3 protocol. The processor is killed with
//! SIGKILL mid-stream and restarted: afterwards every sample and every
//! ledger event is there exactly once, as the query service and pyarrow's
//! own S3 client both see it. Then `compact` merges each day's files per
//! partition while queries run, none of which counts a row twice.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpuledger_tests::{
    Service, WorkDir, binary, create_topics, eventually, python, require_broker, run_python,
    simulate, sql, unique_prefix,
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
    let counts = pyarrow_counts(&s3);
    assert_eq!(counts, [samples, count("ledger_events").unwrap()]);

    // Compaction: per day and partition, the files become one merged
    // file, stored before its parts are removed. A query loop runs
    // meanwhile: the merged file covers its parts until they go, so no
    // answer counts a row twice.
    processor.kill();
    let totals = "SELECT count(*) AS n, sum(seq) AS seqs, sum(energy_mj) AS energy, \
                  (SELECT count(*) FROM ledger_events) AS events, \
                  (SELECT sum(samples) FROM device_hourly) AS hourly FROM samples";
    let before = sql(&base_url, totals).unwrap();
    let layout_before = object_layout(&s3);
    assert!(
        layout_before.shared > 0,
        "some day and partition has several files to merge: {layout_before:?}"
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, base_url) = (stop.clone(), base_url.clone());
        std::thread::spawn(move || {
            let (mut answers, mut wrong) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A file removed between listing and reading fails the
                // query; it is asked again. A count is never too high.
                if let Ok(rows) = sql(&base_url, "SELECT count(*) AS n FROM samples") {
                    answers += 1;
                    if rows[0]["n"].as_u64() != Some(samples) {
                        wrong.push(rows[0]["n"].clone());
                    }
                }
            }
            (answers, wrong)
        })
    };
    let compact = Command::new(binary("gpuledger-processor"))
        .args(["compact", "--history-root", &root])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (answers, wrong) = watcher.join().unwrap();
    assert!(
        compact.status.success(),
        "{}",
        String::from_utf8_lossy(&compact.stderr)
    );
    let report = String::from_utf8_lossy(&compact.stdout);
    assert!(report.contains("samples 2026-11-02:"), "{report}");
    assert!(answers > 0);
    assert!(
        wrong.is_empty(),
        "queries during compaction counted {wrong:?}"
    );

    let layout_after = object_layout(&s3);
    assert_eq!(layout_after.shared, 0, "{layout_after:?}");
    assert!(
        layout_after.files < layout_before.files,
        "{layout_before:?} -> {layout_after:?}"
    );
    assert_eq!(sql(&base_url, totals).unwrap(), before);
    // Another engine, reading the bucket itself, counts the same.
    assert_eq!(pyarrow_counts(&s3)[0], samples);

    query.kill();
}

/// Objects of the history in the bucket: how many, and how many day and
/// partition folders of a table hold more than one (what compaction
/// merges).
#[derive(Debug)]
struct Layout {
    files: u64,
    shared: u64,
}

fn object_layout(s3: &S3Server) -> Layout {
    let out = run_python([
        "-c",
        &[
            "import sys, collections, pyarrow.fs as fs",
            S3_CLIENT,
            "infos = s3.get_file_info(fs.FileSelector('gpuledger-history/history', recursive=True))",
            "files = [i.path for i in infos if i.type == fs.FileType.File]",
            "groups = collections.Counter((p.rsplit('/', 1)[0], p.rsplit('/', 1)[1].rsplit('-', 2)[0]) for p in files)",
            "print(len(files), sum(1 for n in groups.values() if n > 1))",
        ]
        .join("\n"),
        &s3.endpoint,
    ]);
    let text = String::from_utf8_lossy(&out);
    let mut numbers = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    Layout {
        files: numbers.next().unwrap(),
        shared: numbers.next().unwrap(),
    }
}

/// pyarrow's own S3 client, as `s3`, for the endpoint in `sys.argv[1]`.
const S3_CLIENT: &str = "s3 = fs.S3FileSystem(access_key='testing', secret_key='testing', \
    region='us-east-1', endpoint_override=sys.argv[1], scheme='http')";

/// Row counts of `samples` and `ledger_events` as pyarrow's own S3 client
/// reads them, with the `date` partition column.
fn pyarrow_counts(s3: &S3Server) -> Vec<u64> {
    let out = run_python([
        "-c",
        &[
            "import sys, pyarrow.dataset as ds, pyarrow.fs as fs",
            S3_CLIENT,
            "for table in ('samples', 'ledger_events'):",
            "    d = ds.dataset(f'gpuledger-history/history/{table}', filesystem=s3,",
            "                   format='parquet', partitioning='hive')",
            "    assert 'date' in d.schema.names, d.schema",
            "    print(d.count_rows())",
        ]
        .join("\n"),
        &s3.endpoint,
    ]);
    String::from_utf8_lossy(&out)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}
