//! The `device_hourly` roll-up (DESIGN §6): one row per device, hour,
//! holder (the collector's tenant and job) and MIG share of one `samples`
//! file, written from the same batch just before it. Statements read these
//! rows instead of the raw samples.
//!
//! A sample covers [time − interval, time); it counts toward `idle_ms`
//! when its SM activity is known and below [`IDLE_BELOW_PCT`]. Energy is
//! the delta of the GPU's counter between a device's consecutive samples
//! that report it (a decrease means the counter restarted from 0), booked
//! on the later sample's row. The first such sample of a device in the
//! batch has no predecessor here: its counter is the row's
//! `opening_energy_mj`, and the reader supplies the delta from the
//! previous file's `closing_energy_mj`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{Float32Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow::error::ArrowError;

pub use gpuledger_schemas::billing::IDLE_BELOW_PCT;
pub use gpuledger_schemas::tables::device_hourly::{SCHEMA, TABLE, energy_delta, hour_of};

/// What identifies a roll-up row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key<'a> {
    device_uuid: &'a str,
    hour: i64,
    tenant: Option<&'a str>,
    job_id: Option<&'a str>,
    slices: i32,
    max_slices: i32,
}

/// The sums of one roll-up row.
#[derive(Debug, Clone)]
struct Sums<'a> {
    pool: &'a str,
    node: &'a str,
    model: &'a str,
    span_start: i64,
    first_time: i64,
    last_time: i64,
    samples: i64,
    sampled_ms: i64,
    idle_ms: i64,
    sm_sum: f64,
    sm_known: i64,
    energy_mj: i64,
    opening_energy_mj: Option<i64>,
    closing_energy_mj: Option<i64>,
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("samples batch has no column {name}")))
}

/// Rolls a `samples` batch up into `device_hourly` rows.
pub fn roll_up(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let time = column(batch, "time")?.as_primitive::<TimestampMicrosecondType>();
    let pool = column(batch, "pool")?.as_string::<i32>();
    let node = column(batch, "node")?.as_string::<i32>();
    let device = column(batch, "device_uuid")?.as_string::<i32>();
    let model = column(batch, "model")?.as_string::<i32>();
    let slices = column(batch, "slices")?.as_primitive::<Int32Type>();
    let max_slices = column(batch, "max_slices")?.as_primitive::<Int32Type>();
    let sm = column(batch, "sm_util_pct")?.as_primitive::<Float32Type>();
    let energy = column(batch, "energy_mj")?.as_primitive::<Int64Type>();
    let tenant = column(batch, "tenant")?.as_string::<i32>();
    let job = column(batch, "job_id")?.as_string::<i32>();
    let interval = column(batch, "interval_ms")?.as_primitive::<Int32Type>();

    // Each device's samples in time order.
    let mut order: Vec<usize> = (0..batch.num_rows()).collect();
    order.sort_by(|&a, &b| {
        device
            .value(a)
            .cmp(device.value(b))
            .then(time.value(a).cmp(&time.value(b)))
    });

    // Rows in order of first sight, found by key; consecutive samples
    // nearly always share a row, so the row of the sample before is tried
    // first.
    let mut rows: Vec<(Key<'_>, Sums<'_>)> = Vec::new();
    let mut index: BTreeMap<Key<'_>, usize> = BTreeMap::new();
    let mut current: Option<usize> = None;
    // The current device's last energy counter, and the row it went to.
    let mut previous: Option<i64> = None;
    let mut last_energy_row: Option<usize> = None;
    let mut current_device: Option<&str> = None;
    let new_sums = |i: usize, t: i64| Sums {
        pool: pool.value(i),
        node: node.value(i),
        model: model.value(i),
        span_start: i64::MAX,
        first_time: t,
        last_time: t,
        samples: 0,
        sampled_ms: 0,
        idle_ms: 0,
        sm_sum: 0.0,
        sm_known: 0,
        energy_mj: 0,
        opening_energy_mj: None,
        closing_energy_mj: None,
    };
    for i in order {
        let device_uuid = device.value(i);
        if current_device != Some(device_uuid) {
            // Close the previous device: its last counter is the closing.
            if let (Some(row), Some(counter)) = (last_energy_row.take(), previous.take()) {
                rows[row].1.closing_energy_mj = Some(counter);
            }
            current_device = Some(device_uuid);
        }
        let t = time.value(i);
        let interval_ms = i64::from(interval.value(i));
        let key = Key {
            device_uuid,
            hour: hour_of(t),
            tenant: tenant.is_valid(i).then(|| tenant.value(i)),
            job_id: job.is_valid(i).then(|| job.value(i)),
            slices: slices.value(i),
            max_slices: max_slices.value(i),
        };
        let row = match current {
            Some(row) if rows[row].0 == key => row,
            _ => *index.entry(key.clone()).or_insert_with(|| {
                rows.push((key, new_sums(i, t)));
                rows.len() - 1
            }),
        };
        current = Some(row);
        let sums = &mut rows[row].1;
        sums.span_start = sums.span_start.min(t - interval_ms * 1_000);
        sums.first_time = sums.first_time.min(t);
        sums.last_time = sums.last_time.max(t);
        sums.samples += 1;
        sums.sampled_ms += interval_ms;
        if sm.is_valid(i) {
            let pct = sm.value(i);
            sums.sm_sum += f64::from(pct);
            sums.sm_known += 1;
            if pct < IDLE_BELOW_PCT {
                sums.idle_ms += interval_ms;
            }
        }
        if energy.is_valid(i) {
            let counter = energy.value(i);
            match previous {
                Some(before) => sums.energy_mj += energy_delta(before, counter),
                None => sums.opening_energy_mj = Some(counter),
            }
            previous = Some(counter);
            last_energy_row = Some(row);
        }
    }
    if let (Some(row), Some(counter)) = (last_energy_row, previous) {
        rows[row].1.closing_energy_mj = Some(counter);
    }
    // In key order, as the roll-up has always been written.
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    build(rows)
}

fn build(rows: Vec<(Key<'_>, Sums<'_>)>) -> Result<RecordBatch, ArrowError> {
    let n = rows.len();
    let mut hour = TimestampMicrosecondBuilder::with_capacity(n);
    let mut pool = StringBuilder::new();
    let mut node = StringBuilder::new();
    let mut device = StringBuilder::new();
    let mut model = StringBuilder::new();
    let mut slices = Int32Builder::with_capacity(n);
    let mut max_slices = Int32Builder::with_capacity(n);
    let mut tenant = StringBuilder::new();
    let mut job = StringBuilder::new();
    let mut span_start = TimestampMicrosecondBuilder::with_capacity(n);
    let mut first_time = TimestampMicrosecondBuilder::with_capacity(n);
    let mut last_time = TimestampMicrosecondBuilder::with_capacity(n);
    let mut samples = Int64Builder::with_capacity(n);
    let mut sampled_ms = Int64Builder::with_capacity(n);
    let mut idle_ms = Int64Builder::with_capacity(n);
    let mut sm_avg = Float64Builder::with_capacity(n);
    let mut energy = Int64Builder::with_capacity(n);
    let mut opening = Int64Builder::with_capacity(n);
    let mut closing = Int64Builder::with_capacity(n);
    for (key, sums) in rows {
        hour.append_value(key.hour);
        pool.append_value(sums.pool);
        node.append_value(sums.node);
        device.append_value(key.device_uuid);
        model.append_value(sums.model);
        slices.append_value(key.slices);
        max_slices.append_value(key.max_slices);
        tenant.append_option(key.tenant);
        job.append_option(key.job_id);
        span_start.append_value(sums.span_start);
        first_time.append_value(sums.first_time);
        last_time.append_value(sums.last_time);
        samples.append_value(sums.samples);
        sampled_ms.append_value(sums.sampled_ms);
        idle_ms.append_value(sums.idle_ms);
        sm_avg.append_option((sums.sm_known > 0).then(|| sums.sm_sum / sums.sm_known as f64));
        energy.append_value(sums.energy_mj);
        opening.append_option(sums.opening_energy_mj);
        closing.append_option(sums.closing_energy_mj);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(hour.finish().with_timezone("UTC")),
        Arc::new(pool.finish()),
        Arc::new(node.finish()),
        Arc::new(device.finish()),
        Arc::new(model.finish()),
        Arc::new(slices.finish()),
        Arc::new(max_slices.finish()),
        Arc::new(tenant.finish()),
        Arc::new(job.finish()),
        Arc::new(span_start.finish().with_timezone("UTC")),
        Arc::new(first_time.finish().with_timezone("UTC")),
        Arc::new(last_time.finish().with_timezone("UTC")),
        Arc::new(samples.finish()),
        Arc::new(sampled_ms.finish()),
        Arc::new(idle_ms.finish()),
        Arc::new(sm_avg.finish()),
        Arc::new(energy.finish()),
        Arc::new(opening.finish()),
        Arc::new(closing.finish()),
    ];
    RecordBatch::try_new(SCHEMA.clone(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::samples::SamplesBuilder;
    use gpuledger_schemas::Timestamp;
    use gpuledger_schemas::events::GpuSample;

    fn sample(
        device: &str,
        time: &str,
        sm: Option<f32>,
        energy: Option<i64>,
        job: &str,
    ) -> (gpuledger_schemas::Envelope, GpuSample) {
        let (mut env, mut s) = crate::history::samples::fixture_sample();
        env.event_time = time.parse::<Timestamp>().unwrap();
        s.device_uuid = device.into();
        s.sm_util_pct = sm;
        s.energy_mj = energy;
        s.interval_ms = 10_000;
        s.job_id = (!job.is_empty()).then(|| job.to_owned());
        s.tenant = (!job.is_empty()).then(|| "t".to_owned());
        (env, s)
    }

    fn rolled(input: &[(gpuledger_schemas::Envelope, GpuSample)]) -> RecordBatch {
        let mut builder = SamplesBuilder::default();
        for (env, s) in input {
            builder.push(&gpuledger_schemas::SampleRecord::of(env, s));
        }
        roll_up(&builder.finish().unwrap()).unwrap()
    }

    fn ints(batch: &RecordBatch, name: &str) -> Vec<Option<i64>> {
        let c = batch
            .column_by_name(name)
            .unwrap()
            .as_primitive::<Int64Type>();
        (0..c.len())
            .map(|i| c.is_valid(i).then(|| c.value(i)))
            .collect()
    }

    #[test]
    fn a_sample_on_the_hour_belongs_to_the_hour_before() {
        assert_eq!(hour_of(3_600_000_000), 0);
        assert_eq!(hour_of(3_600_000_001), 3_600_000_000);
    }

    #[test]
    fn rows_split_by_hour_and_job_and_carry_the_energy_of_their_samples() {
        // Out of order on purpose: the roll-up sorts by device and time.
        let batch = rolled(&[
            sample("g", "2026-11-01T01:00:10Z", Some(50.0), Some(1_500), "j2"),
            sample("g", "2026-11-01T00:59:50Z", Some(2.0), Some(1_000), "j1"),
            sample("g", "2026-11-01T01:00:00Z", None, Some(1_200), "j1"),
            sample("g", "2026-11-01T01:00:20Z", Some(1.0), Some(100), "j2"),
            sample("h", "2026-11-01T00:30:00Z", Some(99.0), None, ""),
        ]);
        assert_eq!(batch.num_rows(), 3);
        // g/00:00/j1: two samples, one idle, the first counter opens.
        // g/01:00/j2: 300 mJ, then a restart counts the counter (100).
        // h: no energy at all.
        assert_eq!(ints(&batch, "samples"), vec![Some(2), Some(2), Some(1)]);
        assert_eq!(
            ints(&batch, "idle_ms"),
            vec![Some(10_000), Some(10_000), Some(0)]
        );
        assert_eq!(
            ints(&batch, "energy_mj"),
            vec![Some(200), Some(400), Some(0)]
        );
        assert_eq!(
            ints(&batch, "opening_energy_mj"),
            vec![Some(1_000), None, None]
        );
        assert_eq!(
            ints(&batch, "closing_energy_mj"),
            vec![None, Some(100), None]
        );
        let span = batch
            .column_by_name("span_start")
            .unwrap()
            .as_primitive::<TimestampMicrosecondType>();
        assert_eq!(
            Timestamp::from_micros(span.value(0)),
            "2026-11-01T00:59:40Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(batch.schema(), *SCHEMA);
    }
}
