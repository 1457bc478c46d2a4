//! `gpuledger-processor catch-up` against a broker started moments before,
//! whose group coordinator is still loading when the catch-up asks where
//! to resume. librdkafka, left to ask on its own, asks once; refused, it
//! never asks again and the partitions are never read (librdkafka issue
//! #5586). The catch-up asks itself, again while refused, and must read
//! every sample.
//!
//! The test starts a broker of its own (`deploy/local/kafka.sh` on other
//! ports, with its own data), so it needs the local Kafka set-up; against
//! a cluster of the user's (`GPULEDGER_KAFKA_BOOTSTRAP`) it is skipped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gpuledger_tests::{
    Service, WorkDir, catch_up_args, create_topics, repo_root, simulate, unique_prefix,
};

/// How long a catch-up of a few hundred samples may take before it counts
/// as stuck (it takes seconds; stuck, it never ends).
const STUCK_AFTER: Duration = Duration::from_secs(120);

/// A broker of the test's own, stopped when dropped.
struct OwnBroker {
    port: u16,
    data: PathBuf,
}

impl OwnBroker {
    fn start(data: &Path) -> Self {
        let broker = Self {
            port: free_port_pair(),
            data: data.to_path_buf(),
        };
        let status = broker.script("start");
        assert!(
            status,
            "deploy/local/kafka.sh start failed on port {}",
            broker.port
        );
        broker
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn script(&self, command: &str) -> bool {
        Command::new(repo_root().join("deploy/local/kafka.sh"))
            .arg(command)
            .env("GPULEDGER_KAFKA_PORT", self.port.to_string())
            .env("GPULEDGER_KAFKA_DATA", &self.data)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.script("stop");
    }
}

/// A free port whose next one is free too (the broker's controller).
fn free_port_pair() -> u16 {
    (19_300..19_500)
        .step_by(2)
        .find(|&port| {
            TcpListener::bind(("127.0.0.1", port)).is_ok()
                && TcpListener::bind(("127.0.0.1", port + 1)).is_ok()
        })
        .expect("two free ports in 19300..19500")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_catch_up_on_a_broker_just_started_reads_every_sample() {
    if std::env::var_os("GPULEDGER_KAFKA_BOOTSTRAP").is_some() {
        eprintln!("skipped: a broker of the user's is in use, and this test starts its own");
        return;
    }
    let work = WorkDir::new("fresh-broker");
    let broker = OwnBroker::start(&work.path().join("kafka"));
    let bootstrap = broker.bootstrap();
    let prefix = unique_prefix("fresh");
    create_topics(&bootstrap, &prefix, 2).await;
    let produced = simulate(
        &bootstrap,
        &prefix,
        &[
            "--nodes",
            "4",
            "--ticks",
            "50",
            "--start",
            "2026-11-03T10:00:00Z",
        ],
    )["samples"]
        .as_u64()
        .unwrap();

    let history = work.path().join("history");
    let group = format!("{prefix}processor");
    let args = catch_up_args(&bootstrap, &prefix, &history, &group);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Killed when dropped: a catch-up that never finishes fails the test
    // and goes with it.
    let mut catch_up = Service::start(
        "gpuledger-processor",
        &args,
        &work.path().join("catch-up.log"),
    );
    // The summary is the one line it prints, once it has read to the end.
    let rest = catch_up.wait_for_line("{", STUCK_AFTER);
    let summary: serde_json::Value =
        serde_json::from_str(&format!("{{{rest}")).expect("catch-up prints its summary as JSON");
    assert_eq!(summary["samples"], produced, "{summary}");
}
