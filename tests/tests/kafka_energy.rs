//! Energy and idle time from the samples, end to end: a simulated node's
//! samples and two jobs on its devices (a whole GPU and a 3/7 MIG
//! instance) go through the broker and processor into the history; the
//! statement's `energy` line and `idle_allocated` breakdown must equal
//! what the raw samples say, worked out here independently with integers.

use std::time::Duration;

use gpuledger_tests::{LedgerStack, eventually, post, simulate, sql, wait_for_month_end};

const ADMIN: &str = "admin-secret-energy";
/// The jobs run from 00:05 to 00:25 of a 30-minute simulation.
const START: &str = "2026-11-02T00:05:00Z";
const END: &str = "2026-11-02T00:25:00Z";
const START_US: i64 = 1_793_577_900_000_000;
const END_US: i64 = 1_793_579_100_000_000;

fn event(json: serde_json::Value) -> String {
    json.to_string()
}

/// One device's samples in time order: (time µs, energy mJ, SM %, interval ms).
fn samples_of(base_url: &str, device: &str) -> Vec<(i64, i64, Option<f64>, i64)> {
    sql(
        base_url,
        &format!(
            "SELECT CAST(to_unixtime(\"time\") * 1000000 AS BIGINT) AS t, energy_mj, \
             CAST(sm_util_pct AS DOUBLE) AS sm, interval_ms \
             FROM samples WHERE device_uuid = '{device}' ORDER BY \"time\""
        ),
    )
    .unwrap()
    .iter()
    .map(|r| {
        (
            r["t"].as_i64().unwrap(),
            r["energy_mj"].as_i64().unwrap(),
            r["sm"].as_f64(),
            r["interval_ms"].as_i64().unwrap(),
        )
    })
    .collect()
}

/// Σ counter deltas of intervals ending inside the job (a decrease is a
/// restart from 0), in mJ.
fn energy_mj(samples: &[(i64, i64, Option<f64>, i64)]) -> i64 {
    samples
        .windows(2)
        .filter(|w| (START_US..END_US).contains(&(w[1].0 - 1)))
        .map(|w| {
            if w[1].1 < w[0].1 {
                w[1].1
            } else {
                w[1].1 - w[0].1
            }
        })
        .sum()
}

/// Microseconds of the job during which the device was known idle.
fn idle_us(samples: &[(i64, i64, Option<f64>, i64)]) -> i64 {
    samples
        .iter()
        .filter(|s| s.2.is_some_and(|sm| sm < 5.0))
        .map(|s| {
            let (a, b) = (s.0 - s.3 * 1_000, s.0);
            (b.min(END_US) - a.max(START_US)).max(0)
        })
        .sum()
}

/// `numerator / denominator` cents, rounded half to even, as "d.cc".
fn cents_text(numerator: i128, denominator: i128) -> String {
    let (q, r) = (numerator / denominator, numerator % denominator);
    let rounded = match (2 * r).cmp(&denominator) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q % 2),
    };
    format!("{}.{:02}", rounded / 100, rounded % 100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_energy_and_idle_time_from_the_samples() {
    let LedgerStack {
        bootstrap,
        prefix,
        mut processor,
        api,
        mut query,
        base_url,
        work,
        ..
    } = LedgerStack::start("energy", 2, ADMIN).await;

    let summary = simulate(
        &bootstrap,
        &prefix,
        &[
            "--cluster",
            "c",
            "--pool",
            "lab",
            "--nodes",
            "4",
            "--gpus-per-node",
            "2",
            "--ticks",
            "180",
            "--start",
            "2026-11-02T00:00:00Z",
        ],
    );
    let expected_samples = summary["samples"].as_u64().unwrap();
    eventually("every sample in history", Duration::from_secs(90), || {
        let rows = sql(&base_url, "SELECT count(*) AS n FROM samples").ok()?;
        (rows[0]["n"].as_u64() == Some(expected_samples)).then_some(())
    });

    // The whole GPU that idled most, and a 3g MIG instance.
    let gpu = sql(
        &base_url,
        "SELECT device_uuid, sum(CASE WHEN sm_util_pct < 5 THEN 1 ELSE 0 END) AS idle \
         FROM samples WHERE parent_gpu_uuid IS NULL GROUP BY device_uuid \
         ORDER BY idle DESC, device_uuid LIMIT 1",
    )
    .unwrap()[0]["device_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let mig = sql(
        &base_url,
        "SELECT device_uuid FROM samples WHERE slices = 3 AND max_slices = 7 \
         ORDER BY device_uuid LIMIT 1",
    )
    .unwrap()[0]["device_uuid"]
        .as_str()
        .unwrap()
        .to_owned();

    let book = serde_json::json!({
        "type": "PriceBook", "event_id": "energy-book", "event_time": "2026-10-01T00:00:00Z",
        "source": "t", "cluster": "c", "version": 1, "effective_from": "2026-10-01T00:00:00Z",
        "currency": "USD",
        "rates": [{"model": "NVIDIA H200", "reserved_per_gpu_hour": "2.00",
                   "quota_per_gpu_hour": "3.00", "on_demand_per_gpu_hour": "5.00"}],
        "energy_per_kwh": "0.30", "storage_per_gb_month": "0", "egress_per_gb": "0",
        "overhead_pct": "0", "reservation_charge": "usage", "idle_distribution": "central"
    });
    let job = |id: &str, state: &str, at: &str, device: &str| {
        let mut e = serde_json::json!({
            "type": "JobEvent", "event_id": format!("{id}-{state}"), "event_time": at,
            "source": "t", "cluster": "c", "pool": "lab", "job_id": id, "attempt": 1,
            "tenant": "team-a", "state": state,
        });
        if state == "started" {
            e["devices"] = serde_json::json!([device]);
        }
        event(e)
    };
    let clock = event(serde_json::json!({
        "type": "Clock", "event_id": "energy-tick", "event_time": "2026-12-01T00:00:00Z",
        "source": "gpuledger-processor", "cluster": "c", "pool": "lab",
        "now": "2026-12-01T00:00:00Z"
    }));
    let ledger = [
        event(book),
        job("whole", "started", START, &gpu),
        job("slice", "started", START, &mig),
        job("whole", "completed", END, &gpu),
        job("slice", "completed", END, &mig),
        clock,
    ]
    .join("\n");
    let (status, body) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &ledger,
    );
    assert_eq!(status, 200, "{body}");
    wait_for_month_end(&base_url, 1);

    // Worked out from the raw samples: energy at 0.30 per kWh, the MIG
    // instance's 3/7 of its GPU's counter; idle time of the whole GPU at
    // the on-demand rate (the jobs were not admitted: burst pricing), MIG
    // instances report no SM activity, so are never idle.
    let whole = samples_of(&base_url, &gpu);
    let slice = samples_of(&base_url, &mig);
    let whole_mj = energy_mj(&whole);
    let slice_mj = energy_mj(&slice);
    assert!(whole_mj > 0 && slice_mj > 0);
    // mJ × 0.30 $/kWh in cents: mJ × 30 / 3.6e9; the slice's × 3/7.
    let energy = cents_text(
        (i128::from(whole_mj) * 7 + i128::from(slice_mj) * 3) * 30,
        3_600_000_000 * 7,
    );
    // µs × 5.00 $/h in cents: µs × 500 / 3.6e9.
    let idle = cents_text(i128::from(idle_us(&whole)) * 500, 3_600_000_000);

    let statement: serde_json::Value =
        ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
    let tenant = &statement["tenants"][0];
    assert_eq!(tenant["tenant"], "team-a", "{statement}");
    assert_eq!(tenant["lines"]["energy"], energy.as_str(), "{statement}");
    assert_eq!(
        tenant["breakdown"]["idle_allocated"],
        idle.as_str(),
        "{statement}"
    );
    // Compute: 20 min of 1 GPU and of 3/7 GPU at 5.00: 1.6666… + 0.7142…
    assert_eq!(tenant["lines"]["compute_burst"], "2.38", "{statement}");

    // The energy charge in the FOCUS export, in kWh.
    let focus = gpuledger_tests::focus_export(&base_url, "2026-11", work.path());
    assert_eq!(
        focus["billed_by_subaccount"]["team-a"],
        tenant["lines"]["total"]
    );
    assert!(
        focus["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "energy"),
        "{focus}"
    );
    processor.kill();
    query.kill();
}
