//! Exactly-once Parquet history under crashes: the processor is killed with
//! SIGKILL ten times while a fleet streams samples, and restarted each time.
//! Afterwards every sample is in the `samples` table exactly once.

use std::time::Duration;

use gpuledger_tests::{
    Service, WorkDir, create_topics, eventually, require_broker, sql, start_processor, start_query,
    unique_prefix,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_telemetry_history_survives_ten_kills() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("crash");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("crash");
    let history = work.path().join("history");
    let history = history.to_str().unwrap().to_owned();
    let spawn_processor = |n: usize| {
        start_processor(
            &bootstrap,
            &prefix,
            work.path(),
            &[
                "--clock-interval-s",
                "0",
                // Small, frequent files: many moments to be killed in.
                "--flush-rows",
                "300",
                "--flush-interval-ms",
                "150",
            ],
            &format!("processor-{n}.log"),
        )
    };

    // 4 nodes × (4 MIG + 1 GPU) × 200 ticks = 4,000 samples over ~20 s.
    let mut collector = Service::start(
        "gpuledger-collector",
        &[
            "simulate",
            "--kafka-bootstrap",
            &bootstrap,
            "--topic-prefix",
            &prefix,
            "--nodes",
            "4",
            "--ticks",
            "200",
            "--interval-ms",
            "100",
            "--realtime",
            "--start",
            "2026-11-03T23:59:50Z",
            "--summary",
        ],
        &work.path().join("collector.log"),
    );
    let mut processor = spawn_processor(0);
    for n in 1..=10 {
        std::thread::sleep(Duration::from_millis(1500 + 97 * n as u64));
        processor.kill();
        processor = spawn_processor(n);
    }
    let summary = collector.wait_for_line("{", Duration::from_secs(120));
    let summary: serde_json::Value =
        serde_json::from_str(&format!("{{{summary}")).expect("collector summary");
    assert_eq!(summary["samples"], 4000);

    let (query, base_url, _postgres) = start_query(&history, &[], &work.path().join("query.log"));
    let row = eventually(
        "every sample in the history",
        Duration::from_secs(90),
        || {
            assert!(
                processor.is_running(),
                "the last processor exited; see {}",
                work.path().display()
            );
            let rows = sql(
            &base_url,
            "SELECT count(*) AS n, count(DISTINCT concat(source, ':', CAST(seq AS VARCHAR))) AS ids, \
             sum(mem_used_bytes) AS mem FROM samples",
        )
        .expect("SQL answers");
            (rows[0]["n"].as_u64() >= Some(4000)).then(|| rows[0].clone())
        },
    );
    assert_eq!(row["n"], 4000, "rows in the history");
    assert_eq!(row["ids"], 4000, "distinct event ids (source:seq)");
    assert_eq!(row["mem"], summary["sum_mem_used_bytes"]);
    // The roll-up beside the samples sums each of them exactly once (a
    // roll-up whose samples file a kill prevented was removed on restart).
    let rolled = sql(
        &base_url,
        "SELECT sum(samples) AS n, sum(sampled_ms) AS ms, count(*) AS rows FROM device_hourly",
    )
    .expect("SQL answers");
    let raw = sql(&base_url, "SELECT sum(interval_ms) AS ms FROM samples").expect("SQL answers");
    assert_eq!(rolled[0]["n"], 4000, "samples in device_hourly");
    assert_eq!(
        rolled[0]["ms"], raw[0]["ms"],
        "sampled time in device_hourly"
    );
    drop(query);
    drop(processor);

    // Other engines read the same files as they are: DuckDB and pyarrow,
    // with the `date` partition column from the folder names.
    let python = gpuledger_tests::python();
    let out = std::process::Command::new(&python)
        .arg(gpuledger_tests::interop_script("read_history.py"))
        .args([&history, "samples"])
        .output()
        .unwrap_or_else(|e| panic!("{} runs (make setup creates it): {e}", python.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["duckdb_rows"], 4000, "{read}");
    assert_eq!(read["duckdb_ids"], 4000, "{read}");
    assert_eq!(read["pyarrow_rows"], 4000, "{read}");
    assert_eq!(read["pyarrow_has_date"], true, "{read}");
    assert_eq!(
        read["dates"],
        serde_json::json!(["2026-11-03", "2026-11-04"]),
        "{read}"
    );
    // The roll-up too, row for row as the query service counted it.
    let hourly =
        gpuledger_tests::read_with_parquet_engines(std::path::Path::new(&history), "device_hourly");
    assert_eq!(hourly["duckdb_rows"], rolled[0]["rows"], "{hourly}");
    assert_eq!(hourly["pyarrow_rows"], rolled[0]["rows"], "{hourly}");
    assert_eq!(hourly["pyarrow_has_date"], true, "{hourly}");
    assert_eq!(hourly["dates"], read["dates"], "{hourly}");
}
