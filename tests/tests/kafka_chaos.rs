//! Chaos: the demo's month (`deploy/local/demo_month.py month`: the
//! company's events and the simulated collectors' ledger) goes in while the processor is killed (SIGKILL)
//! twice and the broker is stopped and started once; the final statement
//! must equal the offline recomputation of the same ledger, to the cent.
//!
//! Posting a chunk again after a failure is safe: events carry their ids
//! and the ledger drops duplicates. The broker is restarted only when it is
//! the local one (`deploy/local/kafka.sh`); against a broker of your own
//! (`GPULEDGER_KAFKA_BOOTSTRAP`) only the processor is killed.

use std::process::Command;
use std::time::{Duration, Instant};

use gpuledger_tests::{
    Service, WorkDir, create_topics, demo_month, eventually, offline_statement, require_broker,
    sql, start_ledger_processor, start_query, unique_prefix, wait_for_month_end,
};

const ADMIN: &str = "admin-secret-chaos";

fn processor(bootstrap: &str, prefix: &str, work: &std::path::Path, run: u32) -> (Service, String) {
    let log = format!("processor-{run}.log");
    start_ledger_processor(bootstrap, prefix, work, ADMIN, &log)
}

/// Posts `body` until the processor accepts it (the broker may be down).
fn post_until_accepted(api: &str, body: &str) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let sent = ureq::post(&format!("{api}/v1/events?mode=import"))
            .set("Authorization", &format!("Bearer {ADMIN}"))
            .timeout(Duration::from_secs(150))
            .send_string(body);
        match sent {
            Ok(r) if r.status() == 200 => return,
            Ok(r) => eprintln!("events answered {}; again", r.status()),
            Err(e) => eprintln!("events not accepted ({e}); again"),
        }
        assert!(
            Instant::now() < deadline,
            "the processor never took the chunk"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn broker(action: &str) {
    let script = gpuledger_tests::repo_root().join("deploy/local/kafka.sh");
    let status = Command::new(script)
        .arg(action)
        .current_dir(gpuledger_tests::repo_root())
        .status()
        .unwrap();
    assert!(status.success(), "kafka.sh {action} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_chaos_processor_kills_and_a_broker_restart_leave_the_statement_unchanged() {
    let bootstrap = require_broker();
    let local_broker = std::env::var_os("GPULEDGER_KAFKA_BOOTSTRAP").is_none();
    let prefix = unique_prefix("chaos");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("chaos");
    let ledger = demo_month("month", "chaos");
    let ledger_path = work.path().join("ledger.ndjson");
    std::fs::write(&ledger_path, &ledger).unwrap();
    let offline = offline_statement(&ledger_path, "2026-11");

    let mut run = 1;
    let (mut live, mut api) = processor(&bootstrap, &prefix, work.path(), run);
    let (mut query, base_url, _postgres) = start_query(
        work.path().join("history"),
        &[],
        &work.path().join("query.log"),
    );
    let lines: Vec<&str> = ledger.lines().collect();
    let chunks: Vec<String> = lines.chunks(500).map(|c| c.join("\n")).collect();
    let n = chunks.len();
    for (i, chunk) in chunks.iter().enumerate() {
        if i == n / 3 || i == 2 * n / 3 {
            // SIGKILL mid-stream, then a new process on the same state.
            live.kill();
            run += 1;
            (live, api) = processor(&bootstrap, &prefix, work.path(), run);
        }
        if i == n / 2 && local_broker {
            broker("stop");
            std::thread::sleep(Duration::from_secs(2));
            broker("start");
        }
        post_until_accepted(&api, chunk);
        assert!(live.is_running(), "the processor exited (run {run})");
    }
    wait_for_month_end(&base_url, 2);
    let statement = eventually("the statement to settle", Duration::from_secs(60), || {
        let got: serde_json::Value = ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
            .call()
            .ok()?
            .into_json()
            .ok()?;
        (got == offline).then_some(got)
    });
    assert_eq!(statement, offline);
    // Every ledger event is in the history, once per partition it went
    // to (a price book goes to every partition).
    let events = sql(
        &base_url,
        "SELECT count(*) AS n, count(DISTINCT event_id) AS ids, \
                count(DISTINCT concat(CAST(ledger_partition AS VARCHAR), '/', event_id)) AS placed \
         FROM ledger_events",
    )
    .unwrap();
    // (The simulator's inventory is in the setup too, with the same ids.)
    let ids: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event_id"].to_string())
        .collect();
    assert_eq!(events[0]["ids"], ids.len(), "{events:?}");
    assert_eq!(events[0]["n"], events[0]["placed"], "{events:?}");
    live.kill();
    query.kill();
}
