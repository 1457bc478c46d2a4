//! What the samples add to statements (DESIGN §5, §6), read from the
//! `device_hourly` roll-up rather than the raw samples.
//!
//! The roll-up's rows of one device, hour and holder (the collector's
//! tenant and job) are summed into one [`DeviceHour`]. Where one ledger
//! segment (or none) and one price book cover its whole span inside one
//! month, the sums price exactly as the samples would
//! ([`Holders::settles_whole`]): a job that starts or ends inside an hour
//! leaves its own part of the hour whole, as the collector saw the same
//! holder. Elsewhere — the collector's holder disagreeing with the
//! ledger's near a boundary, a price-book change, a month boundary, the
//! ledger's `now` — that group's raw samples are read and priced one by
//! one. Either way the figures equal pricing every sample.
//!
//! Energy deltas: within a roll-up row they are already summed; a
//! device's first counter in a file (`opening_energy_mj`) takes its delta
//! from the previous file's last counter (`closing_energy_mj`).

use std::collections::{BTreeMap, HashMap};

use datafusion::arrow::array::{Array, AsArray, RecordBatch, StringViewArray};
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use datafusion::prelude::SessionContext;
use gpuledger_schemas::Timestamp;
use gpuledger_schemas::billing::{DeviceHour, EnergyUse, Facts, IDLE_BELOW_PCT, IdleStretch};
use gpuledger_schemas::tables::device_hourly::{energy_delta, hour_of};

use crate::statements::StatementError;

const MICROS_PER_HOUR: i64 = 3_600_000_000;
/// Devices named in one query of raw samples.
const DEVICES_PER_QUERY: usize = 256;

/// The samples rolled up per device, hour and holder.
const HOURLY: &str = "SELECT pool, device_uuid, \"hour\", slices, max_slices, span_start, \
     first_time, last_time, idle_ms, energy_mj, opening_energy_mj, closing_energy_mj, \
     tenant, job_id FROM device_hourly";

/// Which roll-up rows are summed together: pool, device, hour and holder
/// (the collector's tenant and job, as one name; `None` for none).
type Key = (usize, usize, i64, Option<usize>);

/// One device-hour of one holder, summed over its roll-up rows.
#[derive(Debug, Clone)]
struct Hour {
    pool: usize,
    device: usize,
    hour: i64,
    holder: Option<usize>,
    slices: i32,
    max_slices: i32,
    /// Its rows disagree on the share (a MIG layout changed).
    mixed: bool,
    from: i64,
    first: i64,
    last: i64,
    idle_ms: i64,
    energy_mj: i64,
}

/// A device's first (opening) or last (closing) energy counter in one
/// file, and the roll-up group it was booked in.
#[derive(Debug, Clone, Copy)]
struct Counter {
    device: usize,
    time: i64,
    closing: bool,
    value: i64,
    hour: Key,
}

/// Strings seen, numbered, so that a million rows do not hold a million
/// copies of a few thousand names.
#[derive(Debug, Default)]
struct Names {
    index: HashMap<String, usize>,
    names: Vec<String>,
}

impl Names {
    fn id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), self.names.len() - 1);
        self.names.len() - 1
    }
}

fn row_error(message: impl Into<String>) -> StatementError {
    StatementError::Row {
        table: "device_hourly",
        message: message.into(),
    }
}

/// A text column as string views, whichever string type the table gives it
/// (`samples` reads its text as views, see `catalog`; the other tables as
/// plain strings, turned into views here without copying the text).
fn text(batch: &RecordBatch, column: usize) -> Result<StringViewArray, StatementError> {
    let array = batch.column(column);
    let views = datafusion::arrow::compute::cast(array, &DataType::Utf8View)
        .map_err(|e| row_error(format!("column {column} is not text: {e}")))?;
    Ok(views.as_string_view().clone())
}

fn times(batch: &RecordBatch, column: usize) -> Result<&[i64], StatementError> {
    batch
        .column(column)
        .as_primitive_opt::<TimestampMicrosecondType>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| row_error(format!("column {column} is not a timestamp")))
}

fn longs(
    batch: &RecordBatch,
    column: usize,
) -> Result<&datafusion::arrow::array::Int64Array, StatementError> {
    batch
        .column(column)
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| row_error(format!("column {column} is not a 64-bit integer")))
}

fn ints(batch: &RecordBatch, column: usize) -> Result<&[i32], StatementError> {
    batch
        .column(column)
        .as_primitive_opt::<Int32Type>()
        .map(|a| a.values().as_ref())
        .ok_or_else(|| row_error(format!("column {column} is not a 32-bit integer")))
}

/// Adds what the samples say to `facts`: the span each pool has telemetry
/// for, energy, and idle time. `now` is the ledger's time.
pub(crate) async fn load(
    ctx: &SessionContext,
    facts: &mut Facts,
    now: Option<Timestamp>,
) -> Result<(), StatementError> {
    let mut pools = Names::default();
    let mut devices = Names::default();
    let mut holders = Names::default();
    let mut hours: BTreeMap<Key, Hour> = BTreeMap::new();
    let mut counters: Vec<Counter> = Vec::new();
    for batch in ctx.sql(HOURLY).await?.collect().await? {
        let pool = text(&batch, 0)?;
        let device = text(&batch, 1)?;
        let hour = times(&batch, 2)?;
        let slices = ints(&batch, 3)?;
        let max_slices = ints(&batch, 4)?;
        let span_start = times(&batch, 5)?;
        let first = times(&batch, 6)?;
        let last = times(&batch, 7)?;
        let idle = longs(&batch, 8)?;
        let energy = longs(&batch, 9)?;
        let opening = longs(&batch, 10)?;
        let closing = longs(&batch, 11)?;
        let tenant = text(&batch, 12)?;
        let job = text(&batch, 13)?;
        for i in 0..batch.num_rows() {
            let key = (
                pools.id(pool.value(i)),
                devices.id(device.value(i)),
                hour[i],
                holder_id(&mut holders, tenant_job(&tenant, &job, i)),
            );
            let h = hours.entry(key).or_insert(Hour {
                pool: key.0,
                device: key.1,
                hour: key.2,
                holder: key.3,
                slices: slices[i],
                max_slices: max_slices[i],
                mixed: false,
                from: span_start[i],
                first: first[i],
                last: last[i],
                idle_ms: 0,
                energy_mj: 0,
            });
            h.mixed |= (h.slices, h.max_slices) != (slices[i], max_slices[i]);
            h.from = h.from.min(span_start[i]);
            h.first = h.first.min(first[i]);
            h.last = h.last.max(last[i]);
            h.idle_ms += idle.value(i);
            h.energy_mj += energy.value(i);
            if opening.is_valid(i) {
                counters.push(Counter {
                    device: key.1,
                    time: first[i],
                    closing: false,
                    value: opening.value(i),
                    hour: key,
                });
            }
            if closing.is_valid(i) {
                counters.push(Counter {
                    device: key.1,
                    time: last[i],
                    closing: true,
                    value: closing.value(i),
                    hour: key,
                });
            }
        }
    }
    // A file's opening counter takes its delta from the device's previous
    // closing counter (a closing at the same instant is the file's own).
    counters.sort_by_key(|c| (c.device, c.time, c.closing));
    let mut previous: Option<(usize, i64)> = None;
    for c in counters {
        if c.closing {
            previous = Some((c.device, c.value));
        } else if let Some((device, before)) = previous
            && device == c.device
            && let Some(h) = hours.get_mut(&c.hour)
        {
            h.energy_mj += energy_delta(before, c.value);
        }
    }

    // The span each pool has samples for.
    let mut spans: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
    for h in hours.values() {
        let span = spans.entry(h.pool).or_insert((h.first, h.last));
        *span = (span.0.min(h.first), span.1.max(h.last));
    }
    for (pool, (first, last)) in spans {
        facts.sampled(
            &pools.names[pool],
            Timestamp::from_micros(first),
            Timestamp::from_micros(last),
        );
    }
    let Some(now) = now else {
        // No ledger: nobody held anything to charge for.
        return Ok(());
    };

    // Device-hours priced whole, and those whose samples must be read.
    let mut whole: Vec<(usize, DeviceHour)> = Vec::new();
    let each_sample = std::env::var_os("GPULEDGER_PRICE_EACH_SAMPLE").is_some_and(|v| v == "1");
    let mut single: Vec<Hour> = Vec::new();
    for (pool_id, pool) in pools.names.iter().enumerate() {
        let holders = facts.holders(pool);
        let in_pool = hours.range((pool_id, 0, i64::MIN, None)..(pool_id + 1, 0, i64::MIN, None));
        for h in in_pool.map(|(_, h)| h) {
            let (from, to) = (
                Timestamp::from_micros(h.from),
                Timestamp::from_micros(h.last),
            );
            let device = &devices.names[h.device];
            if !each_sample && !h.mixed && holders.settles_whole(device, from, to, now) {
                whole.push((
                    pool_id,
                    DeviceHour {
                        device_uuid: device.clone(),
                        from,
                        to,
                        first_sample: Timestamp::from_micros(h.first),
                        last_sample: to,
                        idle_micros: h.idle_ms * 1_000,
                        energy_mj: h.energy_mj,
                        slices: i64::from(h.slices),
                        max_slices: i64::from(h.max_slices),
                    },
                ));
            } else {
                single.push(h.clone());
            }
        }
    }
    for (pool, hour) in whole {
        facts.device_hour(&pools.names[pool], hour);
    }
    if !single.is_empty() {
        tracing::debug!(
            device_hours = single.len(),
            "pricing device-hours sample by sample"
        );
    }
    // A device-hour's energy over all its holders: what its first
    // sample's delta is worked out from.
    let mut totals: HashMap<(usize, i64), i64> = HashMap::new();
    for h in hours.values() {
        *totals.entry((h.device, h.hour)).or_default() += h.energy_mj;
    }
    let names = Known {
        pools: &pools,
        devices: &devices,
        holders: &holders,
    };
    samples_one_by_one(ctx, facts, &names, &single, &totals).await
}

/// The names the roll-up rows were numbered by.
struct Known<'a> {
    pools: &'a Names,
    devices: &'a Names,
    holders: &'a Names,
}

/// A row's tenant and job as one name, `None` when it has neither.
fn tenant_job<'a>(
    tenant: &'a StringViewArray,
    job: &'a StringViewArray,
    i: usize,
) -> Option<(&'a str, &'a str)> {
    let t = tenant.is_valid(i).then(|| tenant.value(i));
    let j = job.is_valid(i).then(|| job.value(i));
    (t.is_some() || j.is_some()).then(|| (t.unwrap_or(""), j.unwrap_or("")))
}

fn holder_name((tenant, job): (&str, &str)) -> String {
    format!("{tenant}\u{0}{job}")
}

fn holder_id(holders: &mut Names, holder: Option<(&str, &str)>) -> Option<usize> {
    holder.map(|h| holders.id(&holder_name(h)))
}

/// `ctx` with Parquet filter pushdown on: filters are applied while pages
/// are decoded, and the other columns are decoded for the rows that pass
/// only. The raw-sample reads below keep a few device-hours of a day out
/// of hundreds of devices named in an `IN` list (too long for page
/// statistics to skip pages by), so late decoding pays for itself there
/// (cold statement of a 1,000-GPU month: 11.9 s with it, 15.9 s without);
/// for ad-hoc SQL, which mostly keeps most of the rows it reads, it costs
/// more than it saves, and the service leaves it off.
fn filtering_while_decoding(ctx: &SessionContext) -> SessionContext {
    let mut state = ctx.state();
    let parquet = &mut state.config_mut().options_mut().execution.parquet;
    parquet.pushdown_filters = true;
    parquet.reorder_filters = true;
    SessionContext::new_with_state(state)
}

/// A raw sample, as pricing one by one needs it.
#[derive(Debug, Clone, Copy)]
struct Raw {
    time: i64,
    interval_ms: i64,
    slices: i64,
    max_slices: i64,
    holder: Option<usize>,
    idle: bool,
    energy_mj: Option<i64>,
}

/// Reads the raw samples of the device-hours of `groups` and prices the
/// samples of those groups one by one. `totals` is each device-hour's
/// energy over all its holders.
async fn samples_one_by_one(
    ctx: &SessionContext,
    facts: &mut Facts,
    names: &Known<'_>,
    groups: &[Hour],
    totals: &HashMap<(usize, i64), i64>,
) -> Result<(), StatementError> {
    let ctx = &filtering_while_decoding(ctx);
    let wanted: HashMap<(usize, i64, Option<usize>), &Hour> = groups
        .iter()
        .map(|h| ((h.device, h.hour, h.holder), h))
        .collect();
    // One query per day and group of devices; samples at time t belong
    // to the hour of t − 1 µs, so an hour's samples lie in (hour, hour + 1h].
    let mut by_day: BTreeMap<i64, Vec<(usize, i64)>> = BTreeMap::new();
    for h in groups {
        by_day
            .entry(h.hour.div_euclid(24 * MICROS_PER_HOUR))
            .or_default()
            .push((h.device, h.hour));
    }
    let mut read: HashMap<(usize, i64), Vec<Raw>> = HashMap::new();
    for mut day_hours in by_day.into_values() {
        day_hours.sort_unstable();
        day_hours.dedup();
        for chunk in day_hours.chunks(DEVICES_PER_QUERY) {
            // Only this chunk's device-hours: another chunk's may come back
            // too (same device, hour in range) and are read by that chunk.
            let fetch: std::collections::HashSet<(usize, i64)> = chunk.iter().copied().collect();
            let from = chunk.iter().map(|h| h.1).min().unwrap_or_default();
            let to = chunk.iter().map(|h| h.1).max().unwrap_or_default() + MICROS_PER_HOUR;
            let mut list: Vec<&str> = chunk
                .iter()
                .map(|h| names.devices.names[h.0].as_str())
                .collect();
            list.sort_unstable();
            list.dedup();
            let list = list
                .iter()
                .map(|n| format!("'{}'", n.replace('\'', "''")))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "SELECT device_uuid, \"time\", interval_ms, slices, max_slices, sm_util_pct, \
                 energy_mj, tenant, job_id \
                 FROM samples \
                 WHERE \"date\" >= DATE '{}' AND \"date\" <= DATE '{}' \
                 AND \"time\" > to_timestamp_micros({from}) AT TIME ZONE 'UTC' \
                 AND \"time\" <= to_timestamp_micros({to}) AT TIME ZONE 'UTC' \
                 AND device_uuid IN ({list})",
                Timestamp::from_micros(from).date_string(),
                Timestamp::from_micros(to).date_string(),
            );
            for batch in ctx.sql(&sql).await?.collect().await? {
                let device = text(&batch, 0)?;
                let time = batch.column(1).as_primitive::<TimestampMicrosecondType>();
                let interval = batch.column(2).as_primitive::<Int32Type>();
                let slices = batch.column(3).as_primitive::<Int32Type>();
                let max_slices = batch.column(4).as_primitive::<Int32Type>();
                let sm = batch.column(5).as_primitive::<Float32Type>();
                let energy = batch.column(6).as_primitive::<Int64Type>();
                let tenant = text(&batch, 7)?;
                let job = text(&batch, 8)?;
                for i in 0..batch.num_rows() {
                    let Some(&device_id) = names.devices.index.get(device.value(i)) else {
                        continue;
                    };
                    let key = (device_id, hour_of(time.value(i)));
                    if !fetch.contains(&key) {
                        continue;
                    }
                    let holder = tenant_job(&tenant, &job, i)
                        .and_then(|h| names.holders.index.get(&holder_name(h)).copied());
                    read.entry(key).or_default().push(Raw {
                        time: time.value(i),
                        interval_ms: i64::from(interval.value(i)),
                        slices: i64::from(slices.value(i)),
                        max_slices: i64::from(max_slices.value(i)),
                        holder,
                        idle: sm.is_valid(i) && sm.value(i) < IDLE_BELOW_PCT,
                        energy_mj: energy.is_valid(i).then(|| energy.value(i)),
                    });
                }
            }
        }
    }
    for ((device_id, hour), mut samples) in read {
        samples.sort_by_key(|s| s.time);
        // Deltas between the hour's own readings; the first reading's
        // delta is what the roll-up summed for the hour less the rest.
        let mut deltas: Vec<(usize, i64)> = Vec::new();
        let mut before: Option<i64> = None;
        for (i, s) in samples.iter().enumerate() {
            if let Some(counter) = s.energy_mj {
                deltas.push((i, before.map_or(0, |b| energy_delta(b, counter))));
                before = Some(counter);
            }
        }
        let rest: i64 = deltas.iter().skip(1).map(|(_, d)| d).sum();
        let total = totals.get(&(device_id, hour)).copied().unwrap_or_default();
        if let Some(first) = deltas.first_mut() {
            first.1 = total - rest;
        }
        let mut energy_of = vec![None; samples.len()];
        for (i, delta) in deltas {
            energy_of[i] = Some(delta);
        }
        let device = &names.devices.names[device_id];
        for (s, delta_mj) in samples.iter().zip(energy_of) {
            // Only the samples of the groups asked for; the others were
            // priced whole.
            let Some(group) = wanted.get(&(device_id, hour, s.holder)) else {
                continue;
            };
            let pool = &names.pools.names[group.pool];
            if let Some(delta_mj) = delta_mj {
                facts.energy(
                    pool,
                    EnergyUse {
                        device_uuid: device.clone(),
                        at: Timestamp::from_micros(s.time),
                        delta_mj,
                        slices: s.slices,
                        max_slices: s.max_slices,
                    },
                );
            }
            if s.idle {
                facts.idle(
                    pool,
                    IdleStretch {
                        device_uuid: device.clone(),
                        from: Timestamp::from_micros(s.time - s.interval_ms * 1_000),
                        to: Timestamp::from_micros(s.time),
                        slices: s.slices,
                        max_slices: s.max_slices,
                    },
                );
            }
        }
    }
    Ok(())
}
