//! The Slurm prolog and epilog scripts, run as slurmd would (environment
//! only), put the job's lifecycle on the real broker.

use std::process::Command;
use std::time::Duration;

use gpuledger_schemas::{Codec, EventBody};
use gpuledger_tests::{
    WorkDir, binary, create_topics, read_committed, require_broker, unique_prefix,
};

fn hook(
    script: &str,
    bootstrap: &str,
    prefix: &str,
    map: &std::path::Path,
    extra: &[(&str, &str)],
) {
    let repo = gpuledger_tests::repo_root();
    let repo = repo.display();
    let status = Command::new("bash")
        .arg(format!("{repo}/deploy/slurm/{script}"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GPULEDGER_COLLECTOR", binary("gpuledger-collector"))
        .env("GPULEDGER_KAFKA_BOOTSTRAP", bootstrap)
        .env("GPULEDGER_TOPIC_PREFIX", prefix)
        .env("GPULEDGER_POOL", "h200")
        .env("GPULEDGER_TENANT_MAP", map)
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_USER", "alice")
        .env("SLURM_JOB_ACCOUNT", "vision")
        .env("SLURMD_NODENAME", "h200-n01")
        .envs(extra.iter().copied())
        .status()
        .expect("bash runs");
    assert!(status.success(), "{script} must always exit 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_slurm_prolog_and_epilog_record_the_attempt() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("slurm");
    create_topics(&bootstrap, &prefix, 1).await;
    let work = WorkDir::new("slurm");
    let map = work.path().join("tenants");
    std::fs::write(&map, "vision=team-vision\n").unwrap();

    hook("prolog.sh", &bootstrap, &prefix, &map, &[]);
    hook(
        "epilog.sh",
        &bootstrap,
        &prefix,
        &map,
        &[("SLURM_JOB_EXIT_CODE2", "1:0")],
    );
    // A retried epilog is the same event: the ledger will ignore it.
    hook(
        "epilog.sh",
        &bootstrap,
        &prefix,
        &map,
        &[("SLURM_JOB_EXIT_CODE2", "1:0")],
    );
    // The restart runs as attempt 2 and is cancelled by scancel.
    hook(
        "prolog.sh",
        &bootstrap,
        &prefix,
        &map,
        &[("SLURM_RESTART_COUNT", "1")],
    );
    hook(
        "epilog.sh",
        &bootstrap,
        &prefix,
        &map,
        &[
            ("SLURM_RESTART_COUNT", "1"),
            ("SLURM_JOB_EXIT_CODE2", "0:15"),
        ],
    );

    let records = read_committed(
        &bootstrap,
        &format!("{prefix}gpuledger.ledger"),
        5,
        Duration::from_secs(30),
    );
    let codec = Codec::builtin();
    let seen: Vec<String> = records
        .iter()
        .map(|(v, _)| {
            let event = codec.decode(v).unwrap();
            let EventBody::JobEvent(j) = &event.body else {
                panic!("{event:?}")
            };
            assert_eq!(
                (j.tenant.as_str(), j.user.as_deref(), j.node.as_deref()),
                ("team-vision", Some("alice"), Some("h200-n01"))
            );
            format!(
                "{} {} {} {:?} {}",
                event.envelope.event_id, j.attempt, j.state, j.exit_code, event.envelope.source
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            "slurm-4242-1-started-h200-n01 1 started None slurm-prolog",
            "slurm-4242-1-failed-h200-n01 1 failed Some(1) slurm-epilog",
            "slurm-4242-1-failed-h200-n01 1 failed Some(1) slurm-epilog",
            "slurm-4242-2-started-h200-n01 2 started None slurm-prolog",
            "slurm-4242-2-cancelled-h200-n01 2 cancelled Some(0) slurm-epilog",
        ]
    );

    // When the collector fails (here it refuses an option that contradicts
    // its own producer settings), the hook logs and still exits 0.
    hook(
        "prolog.sh",
        "127.0.0.1:1",
        &prefix,
        &map,
        &[("GPULEDGER_KAFKA_OPTIONS", "message.timeout.ms=2000")],
    );
}
