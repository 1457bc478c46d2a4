//! The walking skeleton end to end, against the real broker: the simulated
//! collector → Kafka → the processor's Parquet history → the query service's
//! SQL. What SQL returns must equal what the simulator says it delivered.

use std::process::Command;
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, eventually, require_broker, run_to_end, sql, start_query,
    start_telemetry_processor, unique_prefix,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_skeleton_samples_travel_from_collector_to_sql() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("skeleton");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("skeleton");
    let history = work.path().join("history");
    let history = history.to_str().unwrap();

    let (mut processor, api) = start_telemetry_processor(&bootstrap, &prefix, work.path());
    let (query, base_url, _postgres) = start_query(history, &[], &work.path().join("query.log"));

    // 3 nodes × (4 MIG instances + 1 whole GPU) × 40 ticks = 600 samples,
    // starting before midnight so the history spans two days.
    let summary = run_to_end(
        "gpuledger-collector",
        &[
            "simulate",
            "--kafka-bootstrap",
            &bootstrap,
            "--topic-prefix",
            &prefix,
            "--nodes",
            "3",
            "--gpus-per-node",
            "2",
            "--ticks",
            "40",
            "--start",
            "2026-11-03T23:55:00Z",
            "--summary",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(summary.trim()).expect("summary JSON");
    assert_eq!(summary["samples"], 600);
    assert_eq!(summary["inventories"], 3);

    let row = eventually(
        "all samples in the history",
        Duration::from_secs(90),
        || {
            assert!(
                processor.is_running(),
                "the processor exited; see its log in {}",
                work.path().display()
            );
            let rows = sql(
                &base_url,
                "SELECT count(*) AS n, sum(mem_used_bytes) AS mem, sum(energy_mj) AS energy, \
             sum(seq) AS seq, count(DISTINCT date) AS days, \
             count(*) FILTER (WHERE sm_util_pct IS NULL) AS no_util, \
             min(time) AS first, max(time) AS last FROM samples",
            )
            .expect("SQL answers");
            (rows[0]["n"] == summary["samples"]).then(|| rows[0].clone())
        },
    );
    // Once the stream is quiet, the last file counts as written (its
    // offsets are stored) without waiting for another file.
    eventually(
        "every sample counted as written",
        Duration::from_secs(30),
        || {
            let metrics = ureq::get(&format!("{api}/metrics"))
                .call()
                .ok()?
                .into_string()
                .ok()?;
            let written: u64 = metrics
                .lines()
                .find_map(|l| l.strip_prefix("gpuledger_samples_written_total "))?
                .trim()
                .parse()
                .ok()?;
            (written == 600).then_some(())
        },
    );
    assert_eq!(row["mem"], summary["sum_mem_used_bytes"]);
    assert_eq!(row["energy"], summary["sum_energy_mj"]);
    assert_eq!(row["seq"], summary["sum_seq"]);
    assert_eq!(
        row["days"], 2,
        "samples before and after midnight land in two date partitions"
    );
    // MIG instances report no utilization: 3 nodes × 4 instances × 40 ticks.
    assert_eq!(row["no_util"], 480);
    assert_eq!(row["first"], "2026-11-03T23:55:10Z");
    assert_eq!(row["last"], "2026-11-04T00:01:40Z");

    // Read-only, and bad SQL is a 400 naming what was wrong.
    let refused = sql(&base_url, "CREATE TABLE x AS SELECT 1").unwrap_err();
    assert!(refused.starts_with("HTTP 400"), "{refused}");
    assert!(refused.to_lowercase().contains("ddl"), "{refused}");
    let refused = sql(&base_url, "INSERT INTO samples SELECT * FROM samples").unwrap_err();
    assert!(refused.starts_with("HTTP 400"), "{refused}");
    let refused = sql(&base_url, "SELECT nope FROM samples").unwrap_err();
    assert!(refused.contains("nope"), "{refused}");

    let metrics = ureq::get(&format!("{base_url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("# TYPE gpuledger_queries_total counter"),
        "{metrics}"
    );

    // Each (source, seq) — the sample's event_id — appears exactly once.
    let dupes = sql(&base_url, "SELECT count(*) AS n FROM (SELECT source, seq FROM samples GROUP BY source, seq HAVING count(*) > 1)").unwrap();
    assert_eq!(dupes[0]["n"], 0);

    // Files follow DESIGN §6: samples/date=YYYY-MM-DD/<topic>-<partition>-<first>-<last>.parquet
    // (beside the day folders, only the writers' `.lock`).
    let entries: Vec<String> = std::fs::read_dir(format!("{history}/samples"))
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    let days: Vec<String> = entries
        .iter()
        .filter(|e| e.starts_with("date="))
        .cloned()
        .collect();
    assert!(
        entries
            .iter()
            .all(|e| e.starts_with("date=") || e == ".lock"),
        "{entries:?}"
    );
    assert!(
        days.contains(&"date=2026-11-03".to_owned())
            && days.contains(&"date=2026-11-04".to_owned()),
        "{days:?}"
    );
    let telemetry = format!("{prefix}gpuledger.telemetry");
    for day in &days {
        for file in std::fs::read_dir(format!("{history}/samples/{day}")).unwrap() {
            let name = file.unwrap().file_name().into_string().unwrap();
            assert!(
                name.starts_with(&format!("{telemetry}-")) && name.ends_with(".parquet"),
                "{name}"
            );
        }
    }

    // The wire format as a plain Kafka client sees it: kcat reads one record.
    let kcat = |format: &str| {
        let out = Command::new("kcat")
            .args([
                "-C",
                "-b",
                &bootstrap,
                "-t",
                &telemetry,
                "-o",
                "beginning",
                "-c",
                "1",
                "-e",
                "-f",
                format,
            ])
            .output()
            .expect("kcat runs (make setup installs it)");
        assert!(
            out.status.success(),
            "kcat failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let value = kcat("%s");
    assert_eq!(
        value[..2],
        [0xC3, 0x01],
        "value starts with the Avro single-object marker"
    );
    let headers = String::from_utf8(kcat("%h")).unwrap();
    assert!(headers.contains("ce_type=gpuledger.GpuSample"), "{headers}");
    assert!(headers.contains("ce_specversion=1.0"), "{headers}");

    // And as a client that knows only the .avsc files: confluent-kafka reads
    // every record, fastavro decodes it by its fingerprint.
    let python = gpuledger_tests::python();
    let repo = gpuledger_tests::repo_root();
    let repo = repo.display();
    let out = Command::new(&python)
        .arg(format!("{repo}/tests/interop/consume_telemetry.py"))
        .args([
            &bootstrap,
            &telemetry,
            "600",
            &format!("{repo}/schemas/avro"),
        ])
        .output()
        .unwrap_or_else(|e| panic!("{} runs (make setup creates it): {e}", python.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["count"], 600);
    assert_eq!(read["types"]["GpuSample"], 600);
    assert_eq!(read["sum_seq"], summary["sum_seq"]);
    assert_eq!(read["sum_mem_used_bytes"], summary["sum_mem_used_bytes"]);

    drop(query);
    drop(processor);
}
