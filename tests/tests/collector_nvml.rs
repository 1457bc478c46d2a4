//! The collector's NVML source from the outside: without a driver it says
//! which library it tried and how to point elsewhere, with its own exit
//! code; with the fake backend one round is a valid inventory and a sample
//! per MIG device.

use std::process::Command;

use gpuledger_schemas::{Event, EventBody};
use gpuledger_tests::binary;

#[test]
fn without_nvml_the_collector_says_so_and_exits_3() {
    let out = Command::new(binary("gpuledger-collector"))
        .args([
            "run",
            "--source",
            "nvml",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so.1",
            "--once",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("/nonexistent/libnvidia-ml.so.1"),
        "{stderr}"
    );
    assert!(lines[0].contains("--nvml-lib"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn one_round_of_the_fake_backend_is_valid_events() {
    let out = Command::new(binary("gpuledger-collector"))
        .args([
            "run",
            "--source",
            "fake",
            "--fake-gpus",
            "8",
            "--fake-migs",
            "7",
            "--node",
            "n1",
            "--pool",
            "h200",
            "--once",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Event> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| Event::from_json_str(l).unwrap())
        .collect();
    let inventories = events
        .iter()
        .filter(|e| matches!(&e.body, EventBody::NodeInventory(i) if i.devices.len() == 56))
        .count();
    assert_eq!(inventories, 1);
    let seqs: Vec<i64> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::GpuSample(s) => Some(s.seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs.len(), 56);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    for event in &events {
        event.validate().unwrap();
    }
}
