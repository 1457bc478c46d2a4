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

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use gpuledger_schemas::events::{AdmissionOutcome, GpuSample};
use gpuledger_schemas::{Envelope, Event, EventBody, Timestamp};
use serde_json::json;

use crate::history::hourly;
use crate::history::layout::FileName;
use crate::history::ledger::LedgerHistory;
use crate::history::samples::{self, SamplesBuilder};
use crate::history::sink::write_file;
use crate::ledger::{Ledger, LedgerConfig, Outcome, Position};
use crate::progress::Progress;
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
    pub history_root: PathBuf,
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
    let runs = ledger(config, &gpus, &mut summary)?;
    samples_of_fleet(config, &gpus, &runs, &mut summary)?;
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

fn event(value: serde_json::Value) -> Result<Event> {
    Event::from_json_str(&value.to_string()).map_err(|e| Error::Ledger(e.to_string()))
}

fn time_text(micros: i64) -> String {
    Timestamp::from_micros(micros).to_string()
}

/// What happens next on one GPU, in time order across the fleet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// An hourly tick of the ledger's clock for a pool.
    Clock { pool: usize },
    /// The GPU's running job ends.
    End { gpu: usize },
    /// A job asks to start on the GPU.
    Request { gpu: usize, job: u64, attempt: i32 },
}

/// Pass 1: the ledger, folded and written as history. Returns each GPU's
/// runs in time order.
fn ledger(
    config: &GenerateConfig,
    gpus: &[Gpu],
    summary: &mut GenerateSummary,
) -> Result<Vec<Vec<Run>>> {
    let start = config.start.as_micros();
    let end = start + config.days * 86_400 * MICROS;
    let step = config.interval_s * MICROS;
    let mut history = LedgerHistory::open(&config.history_root, &config.ledger_topic)?;
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut offset: i64 = 0;
    let mut apply = |e: Event, ledger: &mut Ledger| -> Result<Option<Vec<Event>>> {
        let position = Position {
            partition: 0,
            offset,
        };
        let outcome = ledger.apply(position, &e);
        let decided = match outcome {
            Outcome::Applied {
                decisions,
                segments,
                ..
            } => {
                history.push(0, offset, &e, &decisions, &segments)?;
                Some(decisions)
            }
            Outcome::Duplicate => None,
            Outcome::Rejected { reason } => {
                return Err(Error::Ledger(format!(
                    "generated event {} rejected: {reason}",
                    e.envelope.event_id
                )));
            }
        };
        offset += 1;
        Ok(decided)
    };

    // The set-up: books, inventory, policies, reservations.
    let book = |version: i64, from: i64, quota: [&str; 2]| {
        json!({"type":"PriceBook","event_id":format!("gen-book-{version}"),
            "event_time":time_text(from),"source":"gpuledger-generate","cluster":CLUSTER,
            "version":version,"effective_from":time_text(from),"currency":"USD",
            "rates":[
                {"model":POOLS[0].1,"reserved_per_gpu_hour":"1.75","quota_per_gpu_hour":quota[0],"on_demand_per_gpu_hour":"3.50"},
                {"model":POOLS[1].1,"reserved_per_gpu_hour":"2.45","quota_per_gpu_hour":quota[1],"on_demand_per_gpu_hour":"4.90"}],
            "energy_per_kwh":"0.12","storage_per_gb_month":"0.08","egress_per_gb":"0.05",
            "overhead_pct":"8","reservation_charge":"window","idle_distribution":"proportional"})
    };
    apply(event(book(1, start, ["2.10", "2.80"]))?, &mut ledger)?;
    for (n, node) in gpus.chunks(GPUS_PER_NODE).enumerate() {
        let devices: Vec<_> = node
            .iter()
            .map(|g| json!({"device_uuid":g.uuid,"model":g.model,"slices":7,"max_slices":7,"memory_bytes":g.memory}))
            .collect();
        apply(
            event(
                json!({"type":"NodeInventory","event_id":format!("gen-inventory-{n}"),
                "event_time":time_text(start),"source":"gpuledger-collector","cluster":CLUSTER,
                "pool":node[0].pool,"node":node[0].node,"devices":devices}),
            )?,
            &mut ledger,
        )?;
    }
    for (p, (pool, _, _)) in POOLS.iter().enumerate() {
        let capacity = gpus.iter().filter(|g| g.pool == *pool).count() as i64;
        for (t, tenant) in TENANTS.iter().enumerate() {
            // Nominal quotas cover 84 % of the pool; each may burst by 10 %.
            let nominal = capacity * 21 / 100;
            let burst = (capacity / 10).max(1);
            apply(
                event(
                    json!({"type":"TenantPolicy","event_id":format!("gen-policy-{p}-{t}"),
                    "event_time":time_text(start),"source":"gpuledger-admin","cluster":CLUSTER,
                    "pool":pool,"tenant":tenant,"nominal_ge":nominal.to_string(),
                    "burst_ge":burst.to_string(),"enforcement":"deny"}),
                )?,
                &mut ledger,
            )?;
        }
        // One reservation per pool, days 10 to 13, for a tenant's big run.
        let res_start = start + 9 * 86_400 * MICROS;
        if res_start + 3 * 86_400 * MICROS <= end {
            apply(
                event(
                    json!({"type":"ReservationRequest","event_id":format!("gen-reservation-{p}"),
                    "event_time":time_text(start),"source":"gpuledger-admin","cluster":CLUSTER,
                    "pool":pool,"reservation_id":format!("gen-r-{pool}"),"tenant":TENANTS[1],
                    "slices":(capacity / 8).max(1),"max_slices":1,
                    "start":time_text(res_start),"end":time_text(res_start + 3 * 86_400 * MICROS)}),
                )?,
                &mut ledger,
            )?;
        }
    }

    // Steps in time order: (time, step).
    let mut queue = std::collections::BinaryHeap::new();
    let push = |queue: &mut std::collections::BinaryHeap<std::cmp::Reverse<(i64, Step)>>,
                at: i64,
                s: Step| {
        queue.push(std::cmp::Reverse((at, s)));
    };
    for pool in 0..POOLS.len() {
        push(&mut queue, start + 3600 * MICROS, Step::Clock { pool });
    }
    let mut next_job: u64 = 0;
    for gpu in 0..gpus.len() {
        // The fleet starts busy over the first hour.
        let at = start + pick(config.seed, &[1, gpu as u64], 360) as i64 * step % (3600 * MICROS);
        push(
            &mut queue,
            at,
            Step::Request {
                gpu,
                job: next_job,
                attempt: 1,
            },
        );
        next_job += 1;
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); gpus.len()];
    // What ends each GPU's current run: (job, attempt, tenant, state).
    let mut ending: Vec<Option<(u64, i32, &'static str, &'static str)>> = vec![None; gpus.len()];
    // A second price book at midnight of the 15th, if the span has one.
    let second_book = start + 14 * 86_400 * MICROS;
    let mut second_book_done = second_book >= end;
    let bar = Progress::new(
        "generating the ledger",
        "GPU-days",
        (gpus.len() as i64 * config.days) as u64,
    );
    let mut last_shown = start;
    while let Some(std::cmp::Reverse((at, s))) = queue.pop() {
        if at >= end {
            break;
        }
        if !second_book_done && at >= second_book {
            apply(event(book(2, second_book, ["2.20", "2.95"]))?, &mut ledger)?;
            second_book_done = true;
        }
        if at - last_shown >= 86_400 * MICROS {
            last_shown = at;
            bar.show(((at - start) / (86_400 * MICROS)) as u64 * gpus.len() as u64);
        }
        match s {
            Step::Clock { pool } => {
                let name = POOLS[pool].0;
                apply(
                    event(
                        json!({"type":"Clock","event_id":format!("gen-tick-{name}-{at}"),
                        "event_time":time_text(at),"source":"gpuledger-processor","cluster":CLUSTER,
                        "pool":name,"now":time_text(at)}),
                    )?,
                    &mut ledger,
                )?;
                push(&mut queue, at + 3600 * MICROS, Step::Clock { pool });
            }
            Step::Request { gpu, job, attempt } => {
                let g = &gpus[gpu];
                let tenant = TENANTS[pick(config.seed, &[2, job], TENANTS.len() as u64) as usize];
                let job_id = format!("{tenant}-job-{job}");
                let request_id = format!("{job_id}-{attempt}");
                let decisions = apply(
                    event(json!({"type":"AdmissionRequest","event_id":format!("gen-req-{request_id}"),
                        "event_time":time_text(at),"source":"k8s-admission-webhook","cluster":CLUSTER,
                        "pool":g.pool,"request_id":request_id,"job_id":job_id,"attempt":attempt,
                        "tenant":tenant,"slices":1,"max_slices":1}))?,
                    &mut ledger,
                )?
                .unwrap_or_default();
                let admitted = decisions.iter().any(|d| {
                    matches!(&d.body, EventBody::AdmissionDecision(a)
                        if a.request_id == request_id && a.decision == AdmissionOutcome::Admit)
                });
                summary.jobs += 1;
                if !admitted {
                    // The scheduler tries another job after a while.
                    summary.denied += 1;
                    let wait = (1 + pick(config.seed, &[3, job], 6) as i64) * 600 * MICROS;
                    push(
                        &mut queue,
                        at + wait,
                        Step::Request {
                            gpu,
                            job: next_job,
                            attempt: 1,
                        },
                    );
                    next_job += 1;
                    continue;
                }
                apply(
                    event(
                        json!({"type":"JobEvent","event_id":format!("gen-start-{request_id}"),
                        "event_time":time_text(at),"source":"slurm-prolog","cluster":CLUSTER,
                        "pool":g.pool,"job_id":job_id,"attempt":attempt,"tenant":tenant,
                        "state":"started","devices":[g.uuid]}),
                    )?,
                    &mut ledger,
                )?;
                // 2 to 10 hours, in whole sample intervals.
                let ticks = (2 * 3600
                    + pick(config.seed, &[4, job, attempt as u64], 8 * 3600) as i64)
                    / config.interval_s;
                let stop = (at + ticks * step).min(end);
                let fate = pick(config.seed, &[5, job, attempt as u64], 100);
                let state = match fate {
                    0..=9 if attempt == 1 => "failed",
                    10..=13 => "cancelled",
                    _ => "completed",
                };
                let hung = if state == "failed" {
                    (stop - at) / 4
                } else {
                    0
                };
                runs[gpu].push(Run {
                    start: at,
                    end: stop,
                    job_id: job_id.clone(),
                    tenant,
                    hung,
                });
                ending[gpu] = Some((job, attempt, tenant, state));
                push(&mut queue, stop, Step::End { gpu });
            }
            Step::End { gpu } => {
                let Some((job, attempt, tenant, state)) = ending[gpu].take() else {
                    continue;
                };
                let g = &gpus[gpu];
                let job_id = format!("{tenant}-job-{job}");
                let mut end_event = json!({"type":"JobEvent",
                    "event_id":format!("gen-end-{job_id}-{attempt}"),"event_time":time_text(at),
                    "source":"slurm-epilog","cluster":CLUSTER,"pool":g.pool,"job_id":job_id,
                    "attempt":attempt,"tenant":tenant,"state":state});
                if state == "completed" {
                    end_event["work_units"] = json!((1 + job % 97).to_string());
                    end_event["work_unit_name"] = json!("steps");
                }
                apply(event(end_event)?, &mut ledger)?;
                // Failed jobs are retried at once; otherwise a gap of up
                // to 90 minutes before the next job.
                if state == "failed" {
                    push(
                        &mut queue,
                        at,
                        Step::Request {
                            gpu,
                            job,
                            attempt: attempt + 1,
                        },
                    );
                } else {
                    let gap = pick(config.seed, &[6, job], 10) as i64 * 600 * MICROS;
                    push(
                        &mut queue,
                        at + gap,
                        Step::Request {
                            gpu,
                            job: next_job,
                            attempt: 1,
                        },
                    );
                    next_job += 1;
                }
            }
        }
    }
    // Close the span: the ledger's clock at its end.
    for (name, _, _) in POOLS {
        apply(
            event(
                json!({"type":"Clock","event_id":format!("gen-tick-{name}-{end}"),
                "event_time":time_text(end),"source":"gpuledger-processor","cluster":CLUSTER,
                "pool":name,"now":time_text(end)}),
            )?,
            &mut ledger,
        )?;
    }
    history.flush_all()?;
    bar.finish((gpus.len() as i64 * config.days) as u64);
    summary.ledger_events = offset as u64;
    Ok(runs)
}

/// What a GPU reports at one tick.
#[derive(Debug, Clone, Copy)]
struct Reading {
    sm: f32,
    power_mw: i64,
}

/// The GPU's state at sample time `t`: held by a run (busy, or idle while
/// loading for ten minutes or hung before failing), or free.
fn reading(seed: u64, gpu: usize, tick: i64, run: Option<&Run>, t: i64) -> Reading {
    let noise = pick(seed, &[7, gpu as u64, tick as u64], 1_000) as i64;
    match run {
        None => Reading {
            sm: 0.0,
            power_mw: 60_000 + noise * 5,
        },
        Some(r) if t - r.start <= 600 * MICROS || (r.hung > 0 && t > r.end - r.hung) => Reading {
            sm: (noise % 49) as f32 / 10.0,
            power_mw: 90_000 + noise * 10,
        },
        Some(_) => Reading {
            sm: 55.0 + (noise % 440) as f32 / 10.0,
            power_mw: 450_000 + noise * 250,
        },
    }
}

/// The run holding `runs` at sample time `t` (held over [start, end), a
/// sample at `t` covers the instant just before it), moving `cursor` on.
fn holder<'a>(runs: &'a [Run], cursor: &mut usize, t: i64) -> Option<&'a Run> {
    while *cursor < runs.len() && runs[*cursor].end < t {
        *cursor += 1;
    }
    runs.get(*cursor).filter(|r| r.start < t && t <= r.end)
}

/// Sets an optional text field, reusing its buffer.
fn set(field: &mut Option<String>, value: Option<&str>) {
    match (field.as_mut(), value) {
        (Some(text), Some(v)) => {
            text.clear();
            text.push_str(v);
        }
        (_, v) => *field = v.map(str::to_owned),
    }
}

/// Pass 2: every sample of every GPU, one file (and roll-up) per day and
/// telemetry partition, written by two threads.
fn samples_of_fleet(
    config: &GenerateConfig,
    gpus: &[Gpu],
    runs: &[Vec<Run>],
    summary: &mut GenerateSummary,
) -> Result<()> {
    let start = config.start.as_micros();
    let step = config.interval_s * MICROS;
    let ticks_per_day = 86_400 / config.interval_s;
    // Sample ticks 1 .. days × ticks_per_day − 1: times strictly inside the
    // span, so every file lies in one of its days.
    let last_tick = config.days * ticks_per_day - 1;
    let ticks_of_day = |d: i64| {
        let first = (d * ticks_per_day).max(1);
        let last = ((d + 1) * ticks_per_day - 1).min(last_tick);
        first..=last
    };
    let nodes = gpus.len() / GPUS_PER_NODE;
    let partitions = config.partitions.clamp(1, nodes.max(1));
    let members: Vec<Vec<usize>> = (0..partitions)
        .map(|p| {
            (0..gpus.len())
                .filter(|g| (g / GPUS_PER_NODE) % partitions == p)
                .collect()
        })
        .collect();

    // Each GPU's energy counter at the start of each day.
    let mut counters = vec![vec![0i64; config.days as usize + 1]; gpus.len()];
    for (gpu, counter) in counters.iter_mut().enumerate() {
        let mut total = 1_000_000_000 + pick(config.seed, &[8, gpu as u64], 1 << 30) as i64;
        let mut cursor = 0;
        for d in 0..config.days {
            counter[d as usize] = total;
            for tick in ticks_of_day(d) {
                let t = start + tick * step;
                let r = reading(
                    config.seed,
                    gpu,
                    tick,
                    holder(&runs[gpu], &mut cursor, t),
                    t,
                );
                total += r.power_mw * config.interval_s;
            }
        }
    }

    let items: Vec<(i64, usize)> = (0..config.days)
        .flat_map(|d| (0..partitions).map(move |p| (d, p)))
        .collect();
    let total_rows: u64 = (0..config.days)
        .map(|d| ticks_of_day(d).count() as u64 * gpus.len() as u64)
        .sum();
    let bar = Progress::new("generating samples", "samples", total_rows);
    let next = AtomicUsize::new(0);
    let done_rows = AtomicU64::new(0);
    let written_bytes = AtomicU64::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4);
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    while let Some(&(day, p)) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let ticks = ticks_of_day(day);
                        // Offsets run on per partition across days.
                        let before: i64 = (0..day).map(|d| ticks_of_day(d).count() as i64).sum();
                        let first_offset = before * members[p].len() as i64;
                        let rows = ticks.clone().count() * members[p].len();
                        let mut builder = SamplesBuilder::default();
                        let mut cursors = vec![0usize; members[p].len()];
                        let mut energy: Vec<i64> = members[p]
                            .iter()
                            .map(|&g| counters[g][day as usize])
                            .collect();
                        let mut sample = GpuSample {
                            node: String::new(),
                            pool: String::new(),
                            device_uuid: String::new(),
                            parent_gpu_uuid: None,
                            model: String::new(),
                            mig_profile: None,
                            slices: 7,
                            max_slices: 7,
                            sm_util_pct: None,
                            mem_util_pct: None,
                            mem_used_bytes: 0,
                            mem_total_bytes: 0,
                            power_mw: None,
                            energy_mj: None,
                            temp_c: None,
                            pids: Vec::new(),
                            job_id: None,
                            tenant: None,
                            interval_ms: (config.interval_s * 1000) as i32,
                            seq: 0,
                        };
                        let mut envelope = Envelope {
                            event_id: String::new(),
                            event_time: Timestamp::from_micros(0),
                            source: String::new(),
                            cluster: CLUSTER.to_owned(),
                        };
                        for tick in ticks {
                            let t = start + tick * step;
                            envelope.event_time = Timestamp::from_micros(t);
                            for (i, &g) in members[p].iter().enumerate() {
                                let gpu = &gpus[g];
                                let run = holder(&runs[g], &mut cursors[i], t);
                                let r = reading(config.seed, g, tick, run, t);
                                energy[i] += r.power_mw * config.interval_s;
                                sample.device_uuid.clone_from(&gpu.uuid);
                                sample.node.clone_from(&gpu.node);
                                sample.pool.clear();
                                sample.pool.push_str(gpu.pool);
                                sample.model.clear();
                                sample.model.push_str(gpu.model);
                                envelope.source.clear();
                                envelope.source.push_str("gpuledger-collector/");
                                envelope.source.push_str(&gpu.node);
                                sample.mem_total_bytes = gpu.memory;
                                sample.sm_util_pct = Some(r.sm);
                                sample.mem_util_pct = Some(r.sm * 0.6);
                                sample.mem_used_bytes = if run.is_some() {
                                    gpu.memory / 10 * 7
                                } else {
                                    0
                                };
                                sample.power_mw = Some(r.power_mw);
                                sample.energy_mj = Some(energy[i]);
                                sample.temp_c = Some(30 + (r.power_mw / 20_000) as i32);
                                sample.pids.clear();
                                if let Some(run) = run {
                                    sample.pids.push(1000 + (run.start / MICROS) % 30_000);
                                }
                                set(&mut sample.job_id, run.map(|r| r.job_id.as_str()));
                                set(&mut sample.tenant, run.map(|r| r.tenant));
                                sample.seq =
                                    tick * GPUS_PER_NODE as i64 + (g % GPUS_PER_NODE) as i64;
                                builder.push(&envelope, &sample);
                            }
                        }
                        let batch = builder
                            .finish()
                            .map_err(|e| Error::History(e.to_string()))?;
                        let rolled =
                            hourly::roll_up(&batch).map_err(|e| Error::History(e.to_string()))?;
                        let batch =
                            samples::sorted(&batch).map_err(|e| Error::History(e.to_string()))?;
                        let name = FileName {
                            topic: config.telemetry_topic.clone(),
                            partition: p as i32,
                            first_offset,
                            last_offset: first_offset + rows as i64 - 1,
                        };
                        let date =
                            Timestamp::from_micros(start + day * 86_400 * MICROS).date_string();
                        write_file(&config.history_root, hourly::TABLE, &date, &name, &rolled)?;
                        write_file(&config.history_root, samples::TABLE, &date, &name, &batch)?;
                        let path = crate::history::layout::day_dir(
                            &config.history_root,
                            samples::TABLE,
                            &date,
                        )
                        .join(name.render());
                        written_bytes.fetch_add(std::fs::metadata(path)?.len(), Ordering::Relaxed);
                        let done =
                            done_rows.fetch_add(rows as u64, Ordering::Relaxed) + rows as u64;
                        bar.show(done);
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::History("a writer thread panicked".into())))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    bar.finish(done_rows.load(Ordering::Relaxed));
    summary.samples = done_rows.load(Ordering::Relaxed);
    summary.sample_files = items.len() as u64;
    summary.sample_bytes = written_bytes.load(Ordering::Relaxed);
    Ok(())
}
