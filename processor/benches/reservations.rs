//! The reservation checks with many reservations in a pool (docs/security.md):
//! how long the ledger takes to decide one more `ReservationRequest`
//! (the conflict check over every booked window) and to find the
//! earliest window a reservation would fit, with 10,000 confirmed
//! reservations in the pool. Prints the median and the slowest of each.
//!
//!   cargo bench -p gpuledger-processor --bench reservations [-- RESERVATIONS]

use std::io::Write;
use std::time::{Duration, Instant};

use gpuledger_processor::ledger::{Ge, Ledger, LedgerConfig, Position, ReservationLimits};
use gpuledger_schemas::{Event, Timestamp};

const T0: &str = "2027-01-01T00:00:00Z";
const DAY: i64 = 86_400_000_000;

fn envelope(id: &str) -> String {
    format!(r#""event_id":"{id}","event_time":"{T0}","source":"bench","cluster":"c""#)
}

/// A pool of `nodes` nodes of 8 whole GPUs, and one tenant with no quota.
fn setup(nodes: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for n in 0..nodes {
        let devices: Vec<String> = (0..8)
            .map(|i| format!(r#"{{"device_uuid":"GPU-{n}-{i}","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}"#))
            .collect();
        lines.push(format!(
            r#"{{"type":"NodeInventory",{},"pool":"p","node":"n{n}","devices":[{}]}}"#,
            envelope(&format!("inv-{n}")),
            devices.join(",")
        ));
    }
    lines.push(format!(
        r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"team-a","nominal_ge":"0","burst_ge":"0","enforcement":"deny"}}"#,
        envelope("pol")
    ));
    lines
}

/// A reservation of one slice over days [start, start + days).
fn reservation(id: &str, start_day: i64, days: i64) -> String {
    let at =
        |day: i64| Timestamp::from_micros(T0.parse::<Timestamp>().unwrap().as_micros() + day * DAY);
    format!(
        r#"{{"type":"ReservationRequest",{},"pool":"p","reservation_id":"{id}","tenant":"team-a","slices":1,"max_slices":7,"start":"{}","end":"{}"}}"#,
        envelope(id),
        at(start_day),
        at(start_day + days)
    )
}

fn apply(ledger: &mut Ledger, offset: &mut i64, line: &str) -> Duration {
    let event = Event::from_json_str(line).expect("a valid event");
    let position = Position {
        partition: 0,
        offset: *offset,
    };
    *offset += 1;
    let started = Instant::now();
    std::hint::black_box(ledger.apply(position, &event));
    started.elapsed()
}

fn summary(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let median = times[times.len() / 2];
    let slowest = times[times.len() - 1];
    let _ = writeln!(
        std::io::stdout(),
        "{what}: median {:.3} ms, slowest {:.3} ms over {} runs",
        median.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3,
        times.len()
    );
}

fn main() {
    let count: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(10_000, |a| a.parse().expect("a count of reservations"));
    let config = LedgerConfig {
        reservations: ReservationLimits {
            max_open_per_tenant: usize::MAX,
            ..ReservationLimits::default()
        },
        ..LedgerConfig::default()
    };
    let mut ledger = Ledger::new(config);
    let mut offset = 0;
    // Windows of 1 to 90 days over a year: about 1,250 overlap at a time,
    // so 400 GPUs (2,800 slices) hold them all.
    for line in setup(50) {
        apply(&mut ledger, &mut offset, &line);
    }
    let mut seed = 1_u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let loading = Instant::now();
    for i in 0..count {
        let line = reservation(&format!("r-{i}"), next(275) as i64, 1 + next(90) as i64);
        apply(&mut ledger, &mut offset, &line);
    }
    let open = ledger.open_reservations("p", "team-a");
    let _ = writeln!(
        std::io::stdout(),
        "{count} reservations requested in {:.2} s, {open} confirmed",
        loading.elapsed().as_secs_f64()
    );
    let mut checks = Vec::new();
    for i in 0..50 {
        let line = reservation(&format!("probe-{i}"), next(275) as i64, 1 + next(90) as i64);
        checks.push(apply(&mut ledger, &mut offset, &line));
    }
    summary("reservation check", checks);
    let now: Timestamp = T0.parse().unwrap();
    let horizon = Timestamp::from_micros(now.as_micros() + 365 * DAY);
    let mut searches = Vec::new();
    for i in 0..50 {
        let ge = Ge::of(1 + (i % 7), 7);
        let started = Instant::now();
        std::hint::black_box(ledger.earliest_window("p", &ge, 14 * DAY, now, horizon));
        searches.push(started.elapsed());
    }
    summary("earliest window", searches);
}
