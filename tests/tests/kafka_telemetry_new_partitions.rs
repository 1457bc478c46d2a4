//! The telemetry writer reads the partitions it knows at start in batches
//! from a queue of its own, and a partition added later from the
//! consumer's queue until it is routed there too; the rebalance that adding
//! partitions causes must not leave the first ones unread. Against the
//! real broker: partitions added to the telemetry topic while the processor
//! runs are written like the first ones, and every sample before and after
//! the rebalance is written once.

use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, eventually, require_broker, run_python, simulate,
    start_telemetry_processor, unique_prefix,
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_telemetry_partitions_added_while_running_are_written_once() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("newparts");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("newparts");
    let (mut processor, _api) = start_telemetry_processor(&bootstrap, &prefix, work.path());

    // Eight nodes' samples for 20 ticks from `start`, keyed by node.
    let fleet = |start: &str| {
        simulate(
            &bootstrap,
            &prefix,
            &["--nodes", "8", "--ticks", "20", "--start", start],
        )
    };
    // Samples on the two partitions the writer knew at start.
    let first = fleet("2026-11-03T10:00:00Z");

    let topic = format!("{prefix}gpuledger.telemetry");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("Kafka admin client");
    let added = admin
        .create_partitions(
            &[NewPartitions::new(&topic, 6)],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("add partitions");
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    // The collector's producer and the writer's consumer notice new
    // partitions on their next metadata refresh (5 s for the writer).
    tokio::time::sleep(Duration::from_secs(8)).await;

    // Samples keyed by node now spread over six partitions.
    let second = fleet("2026-11-03T11:00:00Z");
    let produced = first["samples"].as_u64().unwrap() + second["samples"].as_u64().unwrap();

    let root = work.path().join("history").join("samples");
    let count = format!(
        "import duckdb, sys\n\
         rows = duckdb.sql(\"SELECT count(*), count(DISTINCT concat(source, ':', CAST(seq AS VARCHAR), ':', CAST(time AS VARCHAR))), \
         count(DISTINCT regexp_extract(filename, '-([0-9]+)-[0-9]+-[0-9]+\\.parquet$', 1)) \
         FROM read_parquet('{}/**/*.parquet', hive_partitioning=true, filename=true)\").fetchall()[0]\n\
         print(*rows)",
        root.display()
    );
    let (rows, distinct, partitions) =
        eventually("every sample written", Duration::from_secs(90), || {
            assert!(
                processor.is_running(),
                "the processor exited; see {}",
                work.path().display()
            );
            if !root.exists() {
                return None;
            }
            let out = String::from_utf8(run_python(["-c", &count])).unwrap();
            let v: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
            (v[0] >= produced).then(|| (v[0], v[1], v[2]))
        });
    assert_eq!(rows, produced, "every sample once");
    assert_eq!(distinct, produced, "no sample twice");
    assert!(
        partitions > 2,
        "samples of the added partitions were written ({partitions} partitions in the file names)"
    );
}
