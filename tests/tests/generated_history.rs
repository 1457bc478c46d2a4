//! `gpuledger-processor generate`: a simulated fleet's history written
//! straight to Parquet. The same seed gives the same files; the query
//! service prices it; the `energy` line it gives from the `device_hourly`
//! roll-up equals what DuckDB works out from the raw samples.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use gpuledger_tests::{WorkDir, binary, interop_script, run_python, start_query};

fn generate(root: &Path) -> serde_json::Value {
    let out = Command::new(binary("gpuledger-processor"))
        .args([
            "--log-filter",
            "warn",
            "generate",
            "--gpus",
            "16",
            "--days",
            "2",
        ])
        .args(["--start", "2026-11-29", "--seed", "7", "--partitions", "2"])
        .arg("--history-root")
        .arg(root)
        .output()
        .expect("gpuledger-processor runs");
    assert!(
        out.status.success(),
        "generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON summary")
}

/// Every Parquet file under `root`, with its bytes.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `numerator / denominator` rounded half to even.
fn round_half_even(numerator: i128, denominator: i128) -> i128 {
    let (q, r) = (numerator / denominator, numerator % denominator);
    match (2 * r).cmp(&denominator) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q % 2),
    }
}

#[test]
fn generated_history_is_deterministic_and_prices_as_its_samples() {
    let work = WorkDir::new("generate");
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    let summary = generate(&a);
    generate(&b);
    assert_eq!(summary["gpus"], 16);
    // Two days of 10-second ticks but the span's first instant.
    assert_eq!(summary["samples"], 16 * (2 * 8640 - 1));
    let (first, second) = (files(&a), files(&b));
    assert!(
        first
            .keys()
            .any(|f| f.starts_with("device_hourly/date=2026-11-30/"))
    );
    assert!(first.keys().any(|f| f.starts_with("allocations/")));
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>()
    );
    assert!(first == second, "the same seed wrote different bytes");

    // The two days are November's last: its statement holds all of them.
    let (_query, base_url, _) = start_query(&a, &[], &work.path().join("query.log"));
    let statement: serde_json::Value =
        ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
            .call()
            .expect("a statement")
            .into_json()
            .unwrap();

    let out = run_python([interop_script("generated_energy.py"), a.clone()]);
    let raw: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(raw["samples"], summary["samples"]);
    assert_eq!(raw["rolled_up"], summary["samples"]);

    let tenants = statement["tenants"].as_array().unwrap();
    assert_eq!(tenants.len(), 4, "{statement}");
    for t in tenants {
        let tenant = t["tenant"].as_str().unwrap();
        let mj: i128 = raw["energy_mj"][tenant].as_str().unwrap().parse().unwrap();
        // 0.12 per kWh in both price books: mJ × 12 / 3.6e9 cents.
        let cents = round_half_even(mj * 12, 3_600_000_000);
        let expected = format!("{}.{:02}", cents / 100, cents % 100);
        assert_eq!(t["lines"]["energy"], expected.as_str(), "{tenant}: {mj} mJ");
        assert_ne!(t["breakdown"]["idle_allocated"], "0.00", "{tenant}");
    }

    // Priced sample by sample instead of from the roll-up: the same
    // lines to the cent. `idle_allocated` is left out: the two ways
    // disagree on it today (an open bug, see docs/query.md).
    let (_each, each_url, _) = start_query_with_env(&a, &work.path().join("query-each.log"));
    let mut each: serde_json::Value =
        ureq::get(&format!("{each_url}/v1/statements?period=2026-11"))
            .call()
            .expect("a statement")
            .into_json()
            .unwrap();
    let mut rolled = statement.clone();
    for s in [&mut each, &mut rolled] {
        for t in s["tenants"].as_array_mut().unwrap() {
            t["breakdown"]
                .as_object_mut()
                .unwrap()
                .remove("idle_allocated");
        }
    }
    assert_eq!(each, rolled);
}

/// A query service that prices every sample on its own.
fn start_query_with_env(root: &Path, log: &Path) -> (gpuledger_tests::Service, String, String) {
    // SAFETY: set before the service process is spawned, read only by it.
    unsafe { std::env::set_var("GPULEDGER_PRICE_EACH_SAMPLE", "1") };
    let started = start_query(root, &[], log);
    unsafe { std::env::remove_var("GPULEDGER_PRICE_EACH_SAMPLE") };
    started
}
