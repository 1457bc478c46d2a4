//! The second pass of `generate`: every sample of every GPU, with its
//! roll-up, by the telemetry writer's builders.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use gpuledger_schemas::events::GpuSample;
use gpuledger_schemas::{Envelope, SampleRecord, Timestamp};

use super::{CLUSTER, GPUS_PER_NODE, GenerateConfig, GenerateSummary, Gpu, MICROS, Run, pick};
use crate::history::hourly;
use crate::history::layout::FileName;
use crate::history::samples::{self, SamplesBuilder};
use crate::history::sink::write_file;
use crate::progress::Progress;
use crate::{Error, Result};

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
pub(super) fn samples_of_fleet(
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
    // Each GPU's samples name its node's collector.
    let sources: Vec<gpuledger_schemas::Text> = gpus
        .iter()
        .map(|g| format!("gpuledger-collector/{}", g.node).into())
        .collect();
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
                            event_id: "".into(),
                            event_time: Timestamp::from_micros(0),
                            source: "".into(),
                            cluster: CLUSTER.into(),
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
                                envelope.source = sources[g].clone();
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
                                builder.push(&SampleRecord::of(&envelope, &sample));
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
                        let bytes =
                            write_file(&config.history_root, samples::TABLE, &date, &name, &batch)?;
                        written_bytes.fetch_add(bytes, Ordering::Relaxed);
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
