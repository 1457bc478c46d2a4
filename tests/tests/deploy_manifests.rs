//! The deployment files validate offline: Kubernetes manifests and every
//! rendering of the Helm chart against the Kubernetes schemas (strict),
//! the chart's refusals of bad values, the Prometheus rules and scrape
//! configuration, the systemd units, the webhook's TLS proxy, and every
//! flag they pass against the binaries' own `--help`. The checks live in
//! `tests/deploy/validate.sh`, which installs what it needs.

use std::process::Command;

#[test]
fn deploy_manifests_chart_units_and_rules_validate() {
    let bins = gpuledger_tests::binary("gpuledger-processor");
    let bins = bins.parent().unwrap();
    let script = gpuledger_tests::tests_dir().join("deploy/validate.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("GPULEDGER_BIN_DIR", bins)
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(report.contains(" passed, 0 failed"), "{report}");
}
