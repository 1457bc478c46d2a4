//! Compaction of closed days: many small `samples` files (the processor
//! rolls a file every 50 rows here) become one per day and partition.
//! Counts and sums are the same before and after, through the query service
//! and DuckDB, and a query running over and over during compaction never
//! counts a row twice. The processor can also compact in the background
//! (`run --compact-interval-s`) while its writers add to the same days.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, eventually, require_broker, run_to_end, sql, start_processor,
    start_query, unique_prefix,
};

/// The simulated fleet both tests stream: 3 nodes × 2 GPUs × 40 ticks =
/// 600 samples over the midnight between two closed days.
fn simulate_fleet(bootstrap: &str, prefix: &str) {
    run_to_end(
        "gpuledger-collector",
        &[
            "simulate",
            "--kafka-bootstrap",
            bootstrap,
            "--topic-prefix",
            prefix,
            "--nodes",
            "3",
            "--gpus-per-node",
            "2",
            "--ticks",
            "40",
            "--start",
            "2026-11-03T23:55:00Z",
        ],
    );
}

/// A processor rolling a `samples` file every 50 rows (or 200 ms), so a
/// day ends up in many small files; `extra` adds to its flags.
fn start_writer(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
    extra: &[&str],
) -> gpuledger_tests::Service {
    let mut args = vec![
        "--clock-interval-s",
        "0",
        "--flush-rows",
        "50",
        "--flush-interval-ms",
        "200",
    ];
    args.extend_from_slice(extra);
    start_processor(bootstrap, prefix, work, &args, "processor.log")
}

const TOTALS: &str = "SELECT count(*) AS n, count(DISTINCT concat(source, ':', CAST(seq AS VARCHAR))) AS ids, \
     sum(mem_used_bytes) AS mem, sum(energy_mj) AS energy FROM samples";

/// Files per day folder of `samples`.
fn files(history: &std::path::Path) -> BTreeMap<String, usize> {
    std::fs::read_dir(history.join("samples"))
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().starts_with("date="))
        .map(|d| {
            let n = std::fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .filter(|f| f.file_name().to_string_lossy().ends_with(".parquet"))
                .count();
            (d.file_name().to_string_lossy().into_owned(), n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_compaction_keeps_every_row_once() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("compact");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("compaction");
    let history = work.path().join("history");
    let mut processor = start_writer(&bootstrap, &prefix, work.path(), &[]);
    let (mut query, base_url, _postgres) =
        start_query(&history, &[], &work.path().join("query.log"));
    simulate_fleet(&bootstrap, &prefix);
    let before = eventually("600 samples in history", Duration::from_secs(90), || {
        let rows = sql(&base_url, TOTALS).ok()?;
        (rows[0]["n"] == 600).then(|| rows[0].clone())
    });
    assert_eq!(before["ids"], 600);
    processor.kill();
    let small = files(&history);
    assert!(small.values().sum::<usize>() > 8, "{small:?}");

    // Query over and over while compaction runs: never more than 600 rows.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, base_url) = (stop.clone(), base_url.clone());
        std::thread::spawn(move || {
            let (mut answers, mut seen_too_many) = (0, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                if let Ok(rows) = sql(&base_url, "SELECT count(*) AS n FROM samples") {
                    answers += 1;
                    if rows[0]["n"].as_i64().unwrap_or(0) > 600 {
                        seen_too_many.push(rows[0]["n"].clone());
                    }
                }
            }
            (answers, seen_too_many)
        })
    };
    let report = run_to_end(
        "gpuledger-processor",
        &[
            "compact",
            "--history-root",
            history.to_str().unwrap(),
            "--table",
            "samples",
        ],
    );
    stop.store(true, Ordering::Relaxed);
    let (answers, too_many) = watcher.join().unwrap();
    assert!(answers > 0);
    assert!(
        too_many.is_empty(),
        "a query counted rows twice: {too_many:?}"
    );
    assert!(report.contains("samples 2026-11-03:"), "{report}");
    assert!(report.contains("samples 2026-11-04:"), "{report}");

    // One file per day and partition now; every row still there once.
    let merged = files(&history);
    assert_eq!(
        merged.keys().collect::<Vec<_>>(),
        small.keys().collect::<Vec<_>>()
    );
    assert!(merged.values().all(|n| *n <= 2), "{merged:?}");
    let after = sql(&base_url, TOTALS).unwrap();
    assert_eq!(after[0], before);
    let out = gpuledger_tests::run_python([
        gpuledger_tests::interop_script("read_history.py").as_os_str(),
        history.as_os_str(),
        "samples".as_ref(),
    ]);
    let read: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(read["duckdb_rows"], 600);
    assert_eq!(read["duckdb_ids"], 600);
    assert_eq!(read["pyarrow_rows"], 600);
    // Compacting again changes nothing.
    let again = run_to_end(
        "gpuledger-processor",
        &[
            "compact",
            "--history-root",
            history.to_str().unwrap(),
            "--table",
            "samples",
        ],
    );
    assert_eq!(files(&history), merged, "{again}");
    query.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_background_compaction_merges_closed_days_while_they_are_written() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("bgcompact");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("background-compaction");
    let history = work.path().join("history");
    let mut processor = start_writer(
        &bootstrap,
        &prefix,
        work.path(),
        &["--compact-interval-s", "1"],
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(120));
    let (mut query, base_url, _postgres) =
        start_query(&history, &[], &work.path().join("query.log"));
    simulate_fleet(&bootstrap, &prefix);

    // Every sample once, and the days (closed: before today) merged to a
    // file per partition, by the processor itself. The counter is bumped
    // when a round has gone over every table, a moment after the files.
    let metrics = eventually(
        "600 samples in a compacted history, counted",
        Duration::from_secs(120),
        || {
            let rows = sql(&base_url, TOTALS).ok()?;
            let per_day = files(&history);
            if rows[0]["n"] != 600 || rows[0]["ids"] != 600 || per_day.values().any(|n| *n > 2) {
                return None;
            }
            let metrics = ureq::get(&format!("{api}/metrics"))
                .call()
                .ok()?
                .into_string()
                .ok()?;
            let compacted = metrics
                .lines()
                .find_map(|l| l.strip_prefix("gpuledger_history_files_compacted_total "))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or_default();
            (compacted > 0).then_some(metrics)
        },
    );
    assert!(
        metrics.contains("gpuledger_compaction_failures_total 0"),
        "{metrics}"
    );
    processor.kill();
    query.kill();
}
