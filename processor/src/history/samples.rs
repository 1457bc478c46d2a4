//! The `samples` table: every `GpuSample`, one row each.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Builder, Int32Builder, Int64Builder, ListBuilder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::array::{AsArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
use arrow::error::ArrowError;
use gpuledger_schemas::SampleRecord;
use rustc_hash::FxHashMap;

pub use gpuledger_schemas::tables::samples::TABLE;

pub use gpuledger_schemas::tables::samples::SCHEMA;

/// Accumulates samples column by column.
#[derive(Debug, Default)]
pub struct SamplesBuilder {
    time: TimestampMicrosecondBuilder,
    cluster: StringBuilder,
    pool: StringBuilder,
    node: StringBuilder,
    device_uuid: StringBuilder,
    parent_gpu_uuid: StringBuilder,
    model: StringBuilder,
    mig_profile: StringBuilder,
    slices: Int32Builder,
    max_slices: Int32Builder,
    sm_util_pct: Float32Builder,
    mem_util_pct: Float32Builder,
    mem_used_bytes: Int64Builder,
    mem_total_bytes: Int64Builder,
    power_mw: Int64Builder,
    energy_mj: Int64Builder,
    temp_c: Int32Builder,
    pids: ListBuilder<Int64Builder>,
    job_id: StringBuilder,
    tenant: StringBuilder,
    interval_ms: Int32Builder,
    source: StringBuilder,
    seq: Int64Builder,
    rows: usize,
}

impl SamplesBuilder {
    /// Rows so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends one sample.
    pub fn push(&mut self, s: &SampleRecord<'_>) {
        self.time.append_value(s.event_time.as_micros());
        self.cluster.append_value(s.cluster);
        self.pool.append_value(s.pool);
        self.node.append_value(s.node);
        self.device_uuid.append_value(s.device_uuid);
        self.parent_gpu_uuid.append_option(s.parent_gpu_uuid);
        self.model.append_value(s.model);
        self.mig_profile.append_option(s.mig_profile);
        self.slices.append_value(s.slices);
        self.max_slices.append_value(s.max_slices);
        self.sm_util_pct.append_option(s.sm_util_pct);
        self.mem_util_pct.append_option(s.mem_util_pct);
        self.mem_used_bytes.append_value(s.mem_used_bytes);
        self.mem_total_bytes.append_value(s.mem_total_bytes);
        self.power_mw.append_option(s.power_mw);
        self.energy_mj.append_option(s.energy_mj);
        self.temp_c.append_option(s.temp_c);
        self.pids.values().extend(s.pids.iter().map(Some));
        self.pids.append(true);
        self.job_id.append_option(s.job_id);
        self.tenant.append_option(s.tenant);
        self.interval_ms.append_value(s.interval_ms);
        self.source.append_value(s.source);
        self.seq.append_value(s.seq);
        self.rows += 1;
    }

    /// Takes the rows so far as a batch and starts empty again, with room
    /// for as many rows and bytes as the batch has: a partition's files are
    /// alike, and columns that grow by doubling copy themselves over and
    /// over.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.rows;
        let text = |b: &StringBuilder| StringBuilder::with_capacity(rows, b.values_slice().len());
        let pids = self.pids.values_ref().values_slice().len();
        let next = SamplesBuilder {
            time: TimestampMicrosecondBuilder::with_capacity(rows),
            cluster: text(&self.cluster),
            pool: text(&self.pool),
            node: text(&self.node),
            device_uuid: text(&self.device_uuid),
            parent_gpu_uuid: text(&self.parent_gpu_uuid),
            model: text(&self.model),
            mig_profile: text(&self.mig_profile),
            slices: Int32Builder::with_capacity(rows),
            max_slices: Int32Builder::with_capacity(rows),
            sm_util_pct: Float32Builder::with_capacity(rows),
            mem_util_pct: Float32Builder::with_capacity(rows),
            mem_used_bytes: Int64Builder::with_capacity(rows),
            mem_total_bytes: Int64Builder::with_capacity(rows),
            power_mw: Int64Builder::with_capacity(rows),
            energy_mj: Int64Builder::with_capacity(rows),
            temp_c: Int32Builder::with_capacity(rows),
            pids: ListBuilder::with_capacity(Int64Builder::with_capacity(pids), rows),
            job_id: text(&self.job_id),
            tenant: text(&self.tenant),
            interval_ms: Int32Builder::with_capacity(rows),
            source: text(&self.source),
            seq: Int64Builder::with_capacity(rows),
            rows: 0,
        };
        let mut this = std::mem::replace(self, next);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(this.time.finish().with_timezone("UTC")),
            Arc::new(this.cluster.finish()),
            Arc::new(this.pool.finish()),
            Arc::new(this.node.finish()),
            Arc::new(this.device_uuid.finish()),
            Arc::new(this.parent_gpu_uuid.finish()),
            Arc::new(this.model.finish()),
            Arc::new(this.mig_profile.finish()),
            Arc::new(this.slices.finish()),
            Arc::new(this.max_slices.finish()),
            Arc::new(this.sm_util_pct.finish()),
            Arc::new(this.mem_util_pct.finish()),
            Arc::new(this.mem_used_bytes.finish()),
            Arc::new(this.mem_total_bytes.finish()),
            Arc::new(this.power_mw.finish()),
            Arc::new(this.energy_mj.finish()),
            Arc::new(this.temp_c.finish()),
            Arc::new(this.pids.finish()),
            Arc::new(this.job_id.finish()),
            Arc::new(this.tenant.finish()),
            Arc::new(this.interval_ms.finish()),
            Arc::new(this.source.finish()),
            Arc::new(this.seq.finish()),
        ];
        RecordBatch::try_new(SCHEMA.clone(), columns)
    }
}

/// The rows of a `samples` batch ordered by device, then time (then
/// `seq`): each column's neighbouring values then differ little (one
/// device's clock, counters and holder), which is what dictionary, delta
/// and zstd encodings compress best.
///
/// A partition brings each device's samples in time order, interleaved
/// with other devices': rows are grouped by device (a few hundred per
/// batch, ordered by name) keeping their arrival order, and only a device
/// whose samples did not arrive in order is sorted again.
pub fn sorted(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| ArrowError::SchemaError(format!("samples batch has no column {name}")))
    };
    let device = column("device_uuid")?.as_string::<i32>();
    let time = column("time")?.as_primitive::<TimestampMicrosecondType>();
    let seq = column("seq")?.as_primitive::<Int64Type>();
    let rows = batch.num_rows();
    let row_index = |i: usize| {
        u32::try_from(i)
            .map_err(|_| ArrowError::ComputeError(format!("a samples batch of {rows} rows")))
    };

    // Each row's device as a small number, in order of first sight.
    let mut ids: FxHashMap<&str, u32> = FxHashMap::default();
    let mut names: Vec<&str> = Vec::new();
    let mut device_of: Vec<u32> = Vec::with_capacity(rows);
    for i in 0..rows {
        let name = device.value(i);
        let id = *ids.entry(name).or_insert_with(|| {
            names.push(name);
            (names.len() - 1) as u32
        });
        device_of.push(id);
    }
    // Devices by name; each device's rows start where the ones before end.
    let mut by_name: Vec<u32> = (0..names.len() as u32).collect();
    by_name.sort_unstable_by(|&a, &b| names[a as usize].cmp(names[b as usize]));
    let mut counts = vec![0usize; names.len()];
    for &id in &device_of {
        counts[id as usize] += 1;
    }
    let mut starts = vec![0usize; names.len()];
    let mut next = 0;
    for &id in &by_name {
        starts[id as usize] = next;
        next += counts[id as usize];
    }
    let mut order = vec![0u32; rows];
    let mut fill = starts.clone();
    for (i, &id) in device_of.iter().enumerate() {
        order[fill[id as usize]] = row_index(i)?;
        fill[id as usize] += 1;
    }
    // Within a device: time, then seq (ties, none from an honest
    // collector, in the order they were made).
    let key = |i: u32| (time.value(i as usize), seq.value(i as usize));
    for &id in &by_name {
        let run = &mut order[starts[id as usize]..fill[id as usize]];
        if !run.is_sorted_by_key(|&i| key(i)) {
            run.sort_by_key(|&i| key(i));
        }
    }
    take_record_batch(batch, &UInt32Array::from(order))
}

/// A builder holding `rows` copies of the fixtures' `GpuSample`, for tests.
#[cfg(test)]
pub(crate) fn fixture_rows(rows: usize) -> SamplesBuilder {
    use gpuledger_schemas::EventBody;
    let event = gpuledger_schemas::samples::one_of_each()
        .into_iter()
        .find(|e| matches!(e.body, EventBody::GpuSample(_)))
        .expect("the fixtures hold a GpuSample");
    let EventBody::GpuSample(s) = &event.body else {
        unreachable!()
    };
    let mut builder = SamplesBuilder::default();
    for _ in 0..rows {
        builder.push(&SampleRecord::of(&event.envelope, s));
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_schemas::EventBody;
    use gpuledger_schemas::samples::one_of_each;

    #[test]
    fn a_batch_matches_the_schema() {
        let mut builder = fixture_rows(2);
        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), *SCHEMA);
        assert!(builder.is_empty());
    }

    /// Rows of several devices, interleaved, some arriving out of time
    /// order and some with equal times: sorted by device, time and seq,
    /// whole rows kept together.
    #[test]
    fn sorting_orders_by_device_then_time_then_seq() {
        let event = one_of_each()
            .into_iter()
            .find(|e| matches!(e.body, EventBody::GpuSample(_)))
            .unwrap();
        let EventBody::GpuSample(template) = &event.body else {
            unreachable!()
        };
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) % n
        };
        let mut expected = Vec::new();
        let mut builder = SamplesBuilder::default();
        for i in 0..2_000i64 {
            let mut envelope = event.envelope.clone();
            let mut sample = template.clone();
            let device = next(9);
            sample.device_uuid = format!("GPU-{device}");
            // Mostly in time order per device, sometimes late or tied.
            let late = if next(10) == 0 { next(50) as i64 } else { 0 };
            envelope.event_time = gpuledger_schemas::Timestamp::from_micros((i - late) / 3);
            sample.seq = 5_000 - i;
            sample.mem_used_bytes = i;
            builder.push(&SampleRecord::of(&envelope, &sample));
            expected.push((
                sample.device_uuid.clone(),
                envelope.event_time.as_micros(),
                sample.seq,
                i,
            ));
        }
        expected.sort();
        let batch = sorted(&builder.finish().unwrap()).unwrap();
        let device = batch
            .column_by_name("device_uuid")
            .unwrap()
            .as_string::<i32>();
        let time = batch
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampMicrosecondType>();
        let seq = batch
            .column_by_name("seq")
            .unwrap()
            .as_primitive::<Int64Type>();
        let used = batch
            .column_by_name("mem_used_bytes")
            .unwrap()
            .as_primitive::<Int64Type>();
        let got: Vec<(String, i64, i64, i64)> = (0..batch.num_rows())
            .map(|r| {
                (
                    device.value(r).to_owned(),
                    time.value(r),
                    seq.value(r),
                    used.value(r),
                )
            })
            .collect();
        assert_eq!(got, expected);
    }
}
