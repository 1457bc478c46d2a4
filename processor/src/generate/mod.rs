//! `generate`: a month (or any span) of history for a large simulated
//! fleet, written straight to Parquet, for benchmarks and for trying the
//! query service on realistic volumes without running Kafka for weeks.
//!
//! Two passes:
//! 1. **The ledger.** Every GPU runs a deterministic stream of one-GPU
//!    jobs (`AdmissionRequest`, then `started` if admitted, then
//!    `completed`, `failed` with a retry, or `cancelled`), with price
//!    books, policies, inventory, reservations and hourly `Clock` events.
//!    The events are folded by the same state machine as the live
//!    processor, and its decisions and billing segments written by the
//!    same ledger-history writer, as partition 0 of the ledger topic.
//! 2. **The samples.** Every GPU reports every `interval` seconds; what it
//!    reports follows the job that holds it (busy, or idle while a job
//!    loads its data or hangs before failing). Rows are written per day
//!    and telemetry partition (nodes spread over partitions as the
//!    collector keys them), each file with its `device_hourly` roll-up,
//!    by the same builders and writer as the live telemetry writer.
//!
//! Everything follows from the seed: the same arguments give the same
//! rows. Times are whole multiples of the sample interval, so each job's
//! samples fill whole device-hours wherever the job does.

mod ledger;
mod samples;

use std::path::PathBuf;

use gpuledger_common::history::HistoryRoot;

use gpuledger_schemas::{Event, Timestamp};

use crate::{Error, Result};

const MICROS: i64 = 1_000_000;
const CLUSTER: &str = "gpu-east-1";
const GPUS_PER_NODE: usize = 8;
const TENANTS: [&str; 4] = ["team-vision", "team-llm", "team-search", "team-speech"];
/// Pools, their GPU model and memory; nodes alternate between them.
const POOLS: [(&str, &str, i64); 2] = [
    ("h100", "NVIDIA H100 80GB HBM3", 80_000_000_000),
    ("h200", "NVIDIA H200", 141_000_000_000),
];

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateConfig {
    pub history_root: HistoryRoot,
    /// GPUs in the fleet (rounded up to whole nodes of 8).
    pub gpus: usize,
    /// Days from `start`.
    pub days: i64,
    /// Seconds between samples.
    pub interval_s: i64,
    /// Midnight UTC of the first day.
    pub start: Timestamp,
    pub seed: u64,
    /// Telemetry topic partitions the nodes are spread over.
    pub partitions: usize,
    /// Names the files as the live writers would for these topics.
    pub ledger_topic: String,
    pub telemetry_topic: String,
    /// Where to write the ledger as NDJSON too, if anywhere.
    pub ledger_ndjson: Option<PathBuf>,
    /// Whether to write the samples (pass 2).
    pub samples: bool,
}

/// What was generated.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GenerateSummary {
    pub gpus: usize,
    pub ledger_events: u64,
    pub jobs: u64,
    pub denied: u64,
    pub samples: u64,
    pub sample_files: u64,
    pub sample_bytes: u64,
    pub seconds: f64,
}

/// A job's run on one GPU: it held the GPU over [start, end).
#[derive(Debug, Clone)]
struct Run {
    start: i64,
    end: i64,
    job_id: String,
    tenant: &'static str,
    /// Idle before it failed (a hung job), microseconds before `end`.
    hung: i64,
}

/// One GPU of the simulated fleet.
#[derive(Debug, Clone)]
struct Gpu {
    node: String,
    pool: &'static str,
    model: &'static str,
    memory: i64,
    uuid: String,
}

/// SplitMix64: a small, fast, well-mixed hash of one number.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A deterministic number in `0..n` for `parts`.
fn pick(seed: u64, parts: &[u64], n: u64) -> u64 {
    let h = parts.iter().fold(mix(seed), |h, p| mix(h ^ p));
    h % n.max(1)
}

fn fleet(config: &GenerateConfig) -> Vec<Gpu> {
    let nodes = config.gpus.div_ceil(GPUS_PER_NODE);
    let mut out = Vec::with_capacity(nodes * GPUS_PER_NODE);
    for n in 0..nodes {
        let (pool, model, memory) = POOLS[n % POOLS.len()];
        for i in 0..GPUS_PER_NODE {
            let id = (n * GPUS_PER_NODE + i) as u64;
            out.push(Gpu {
                node: format!("{pool}-n{n:04}"),
                pool,
                model,
                memory,
                uuid: format!(
                    "GPU-{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                    mix(config.seed ^ id) as u32,
                    id >> 16,
                    id & 0xfff,
                    n & 0xfff,
                    id
                ),
            });
        }
    }
    out
}

/// Writes the history and says what it wrote.
pub fn run(config: &GenerateConfig) -> Result<GenerateSummary> {
    if config.interval_s <= 0 || 600 % config.interval_s != 0 {
        return Err(Error::Ledger(format!(
            "--interval-s must divide 600 (jobs start on whole sample intervals); got {}",
            config.interval_s
        )));
    }
    let started = std::time::Instant::now();
    let gpus = fleet(config);
    let mut summary = GenerateSummary {
        gpus: gpus.len(),
        ..GenerateSummary::default()
    };
    let runs = ledger::ledger(config, &gpus, &mut summary)?;
    if config.samples {
        samples::samples_of_fleet(config, &gpus, &runs, &mut summary)?;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

fn event(value: serde_json::Value) -> Result<Event> {
    Event::from_json_str(&value.to_string()).map_err(|e| Error::Ledger(e.to_string()))
}

fn time_text(micros: i64) -> String {
    Timestamp::from_micros(micros).to_string()
}
