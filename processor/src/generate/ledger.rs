//! The first pass of `generate`: the ledger, folded by the state machine
//! and written by the ledger-history writer.

use std::io::Write;
use std::sync::Arc;

use gpuledger_schemas::events::AdmissionOutcome;
use gpuledger_schemas::{Event, EventBody};
use serde_json::json;

use super::{
    CLUSTER, GPUS_PER_NODE, GenerateConfig, GenerateSummary, Gpu, MICROS, POOLS, Run, TENANTS,
    event, pick, time_text,
};
use crate::history::ledger::LedgerHistory;
use crate::ledger::{Ledger, LedgerConfig, Outcome, Position, Produced};
use crate::progress::Progress;
use crate::{Error, Result};

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
pub(super) fn ledger(
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
    let mut ndjson = match &config.ledger_ndjson {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Error::Ledger(format!("{}: {e}", path.display())))?,
        )),
        None => None,
    };
    let mut apply = |e: Event, ledger: &mut Ledger| -> Result<Option<Produced<Arc<Event>>>> {
        if let Some(out) = ndjson.as_mut() {
            writeln!(out, "{}", e.to_json_string())?;
        }
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
            let mut policy = json!({"type":"TenantPolicy","event_id":format!("gen-policy-{p}-{t}"),
                "event_time":time_text(start),"source":"gpuledger-admin","cluster":CLUSTER,
                "pool":pool,"tenant":tenant,"nominal_ge":nominal.to_string(),
                "burst_ge":burst.to_string(),"enforcement":"deny"});
            // Budgets, as finance would set them: one team's money runs
            // out late in the month (alerts at 50 and 80 %, then denials),
            // another's GPU hours cover its quota around the clock.
            let hours = nominal * 24 * config.days.min(31);
            match t {
                1 => policy["monthly_gpu_hours"] = json!(hours.to_string()),
                3 => policy["monthly_budget"] = json!((hours * 3 / 2).to_string()),
                _ => {}
            }
            apply(event(policy)?, &mut ledger)?;
        }
        // One reservation per pool, days 10 to 13, for a tenant's big run
        // (one tenant in each pool).
        let res_start = start + 9 * 86_400 * MICROS;
        if res_start + 3 * 86_400 * MICROS <= end {
            apply(
                event(
                    json!({"type":"ReservationRequest","event_id":format!("gen-reservation-{p}"),
                    "event_time":time_text(start),"source":"gpuledger-admin","cluster":CLUSTER,
                    "pool":pool,"reservation_id":format!("gen-r-{pool}"),"tenant":TENANTS[1 + p % 2],
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
                // At midnight, each tenant's storage of the day before.
                if (at - start) % (86_400 * MICROS) == 0 {
                    let day = (at - start) / (86_400 * MICROS);
                    for (t, tenant) in TENANTS.iter().enumerate() {
                        let gb =
                            100 + pick(config.seed, &[5, pool as u64, t as u64, day as u64], 900);
                        apply(
                            event(json!({"type":"UsageRecord",
                                "event_id":format!("gen-usage-{name}-{tenant}-{day}"),
                                "event_time":time_text(at),"source":"storage-meter","cluster":CLUSTER,
                                "pool":name,"tenant":tenant,"kind":"storage_gb_hours",
                                "quantity":(gb * 24).to_string(),
                                "start":time_text(at - 86_400 * MICROS),"end":time_text(at)}))?,
                            &mut ledger,
                        )?;
                    }
                }
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
    if let Some(mut out) = ndjson {
        out.flush()?;
    }
    history.flush_all()?;
    bar.finish((gpus.len() as i64 * config.days) as u64);
    summary.ledger_events = offset as u64;
    Ok(runs)
}
