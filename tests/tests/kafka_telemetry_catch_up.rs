//! `gpuledger-processor catch-up` loads the telemetry topic into the
//! history up to its end and exits, as a batch. Against the real broker:
//! every sample produced is written once; a second catch-up finds nothing
//! new; a streaming `run` of the same group resumes where the catch-up
//! stopped, with no sample twice; and a catch-up refuses to start beside
//! that `run`.

use std::process::{Command, Stdio};
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, binary, catch_up_args, create_topics, eventually, require_broker, run_python,
    run_to_end, simulate, start_telemetry_processor, unique_prefix,
};

/// Rows and distinct samples in the `samples` table under `root`.
fn count_samples(root: &std::path::Path) -> (u64, u64) {
    let script = format!(
        "import duckdb\n\
         rows = duckdb.sql(\"SELECT count(*), count(DISTINCT concat(source, ':', CAST(seq AS VARCHAR), ':', CAST(time AS VARCHAR))) \
         FROM read_parquet('{}/**/*.parquet', hive_partitioning=true)\").fetchall()[0]\n\
         print(*rows)",
        root.display()
    );
    let out = String::from_utf8(run_python(["-c", &script])).unwrap();
    let v: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
    (v[0], v[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_telemetry_catch_up_writes_to_the_end_once() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("catchup");
    create_topics(&bootstrap, &prefix, 3).await;
    let work = WorkDir::new("catchup");
    let history = work.path().join("history");
    let samples = history.join("samples");
    let group = format!("{prefix}processor");
    let mut catch_up_args = catch_up_args(&bootstrap, &prefix, &history, &group);
    catch_up_args.extend(["--flush-rows".to_owned(), "40".to_owned()]);
    let catch_up_args: Vec<&str> = catch_up_args.iter().map(String::as_str).collect();
    let catch_up = || -> serde_json::Value {
        serde_json::from_str(run_to_end("gpuledger-processor", &catch_up_args).trim())
            .expect("catch-up prints its summary as JSON")
    };

    let first = simulate(
        &bootstrap,
        &prefix,
        &[
            "--nodes",
            "6",
            "--ticks",
            "20",
            "--start",
            "2026-11-03T10:00:00Z",
        ],
    )["samples"]
        .as_u64()
        .unwrap();
    let summary = catch_up();
    assert_eq!(summary["samples"], first, "{summary}");
    assert!(summary["files"].as_u64().unwrap() > 3, "{summary}");
    assert_eq!(count_samples(&samples), (first, first), "every sample once");

    // Nothing new: the group's offsets were committed at the end.
    let again = catch_up();
    assert_eq!(again["samples"], 0, "{again}");
    assert_eq!(again["files"], 0, "{again}");
    assert_eq!(count_samples(&samples), (first, first));

    // The streaming writer of the same group goes on from there.
    let (mut processor, _api) = start_telemetry_processor(&bootstrap, &prefix, work.path());
    let second = simulate(
        &bootstrap,
        &prefix,
        &[
            "--nodes",
            "6",
            "--ticks",
            "10",
            "--start",
            "2026-11-03T11:00:00Z",
        ],
    )["samples"]
        .as_u64()
        .unwrap();
    let total = first + second;
    let counted = eventually("the run's samples written", Duration::from_secs(60), || {
        assert!(processor.is_running(), "the processor exited");
        let counted = count_samples(&samples);
        (counted.0 >= total).then_some(counted)
    });
    assert_eq!(counted, (total, total), "no sample twice across the two");

    // Beside a member of the group, a catch-up would write the same
    // records again: it refuses, and says why.
    let refused = Command::new(binary("gpuledger-processor"))
        .args(&catch_up_args)
        .stdin(Stdio::null())
        .output()
        .expect("run catch-up");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "catch-up ran beside `run`");
    assert!(stderr.contains("active member"), "{stderr}");
    assert_eq!(count_samples(&samples), (total, total));

    // A topic that is not there is named, not waited for.
    let missing = format!("{prefix}missing.");
    let mut args = catch_up_args.to_vec();
    let at = args.iter().position(|a| *a == "--topic-prefix").unwrap() + 1;
    args[at] = &missing;
    let failed = Command::new(binary("gpuledger-processor"))
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("run catch-up");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !failed.status.success(),
        "catch-up of a missing topic succeeded"
    );
    assert!(
        stderr.contains(&format!("{missing}gpuledger.telemetry")),
        "{stderr}"
    );
}
