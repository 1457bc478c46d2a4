//! The `samples` table: every `GpuSample`, one row each.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, BooleanBufferBuilder, Int32Array, Int64Array, ListArray, PrimitiveArray,
    RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::take_record_batch;
use arrow::datatypes::{
    ArrowNativeType, ArrowPrimitiveType, DataType, Float32Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow::error::ArrowError;
use gpuledger_schemas::SampleRecord;
use rustc_hash::FxHashMap;

pub use gpuledger_schemas::tables::samples::TABLE;

pub use gpuledger_schemas::tables::samples::SCHEMA;

/// Accumulates samples column by column, in plain vectors that become the
/// batch's buffers without a copy. (Arrow's builders cost twice as much per
/// sample on the consumer's thread, which the telemetry writer waits on.)
#[derive(Debug, Default)]
pub struct SamplesBuilder {
    time: Vec<i64>,
    cluster: Text,
    pool: Text,
    node: Text,
    device_uuid: Text,
    parent_gpu_uuid: Text,
    model: Text,
    mig_profile: Text,
    slices: Vec<i32>,
    max_slices: Vec<i32>,
    sm_util_pct: Optional<f32>,
    mem_util_pct: Optional<f32>,
    mem_used_bytes: Vec<i64>,
    mem_total_bytes: Vec<i64>,
    power_mw: Optional<i64>,
    energy_mj: Optional<i64>,
    temp_c: Optional<i32>,
    /// Each row's end in `pid_values`.
    pid_ends: Ends,
    pid_values: Vec<i64>,
    job_id: Text,
    tenant: Text,
    interval_ms: Vec<i32>,
    source: Text,
    seq: Vec<i64>,
}

/// Where each row's values end in a column of variable-length values
/// (text bytes, pid lists), after a leading 0: Arrow's offsets.
#[derive(Debug)]
struct Ends(Vec<i32>);

impl Default for Ends {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl Ends {
    fn with_capacity(rows: usize) -> Self {
        let mut ends = Vec::with_capacity(rows + 1);
        ends.push(0);
        Self(ends)
    }

    fn rows(&self) -> usize {
        self.0.len() - 1
    }

    /// Ends a row at `end`. Past i32::MAX it wraps, which
    /// [`Ends::finish`] refuses.
    #[inline]
    fn push(&mut self, end: usize) {
        self.0.push(end as i32);
    }

    /// The offsets of a column of `len` values (bytes or items).
    fn finish(self, column: &str, len: usize) -> Result<OffsetBuffer<i32>, ArrowError> {
        if i32::try_from(len).is_err() {
            return Err(ArrowError::ComputeError(format!(
                "samples column {column} holds {len} values, past what one batch can"
            )));
        }
        Ok(OffsetBuffer::new(ScalarBuffer::from(self.0)))
    }
}

/// A text column: the bytes of every value, and where each ends.
#[derive(Debug, Default)]
struct Text {
    ends: Ends,
    bytes: Vec<u8>,
    /// Set once a value is missing.
    nulls: Option<BooleanBufferBuilder>,
}

impl Text {
    fn with_capacity_of(other: &Text) -> Self {
        Self {
            ends: Ends::with_capacity(other.ends.rows()),
            bytes: Vec::with_capacity(other.bytes.len()),
            nulls: None,
        }
    }

    #[inline]
    fn push(&mut self, value: &str) {
        self.bytes.extend_from_slice(value.as_bytes());
        self.ends.push(self.bytes.len());
        if let Some(nulls) = &mut self.nulls {
            nulls.append(true);
        }
    }

    #[inline]
    fn push_option(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.push(value),
            None => {
                let rows = self.ends.rows();
                self.ends.push(self.bytes.len());
                self.nulls
                    .get_or_insert_with(|| all_valid(rows, self.ends.0.capacity()))
                    .append(false);
            }
        }
    }

    fn finish(self, name: &str) -> Result<ArrayRef, ArrowError> {
        let offsets = self.ends.finish(name, self.bytes.len())?;
        let nulls = self.nulls.map(|mut n| NullBuffer::new(n.finish()));
        let values = Buffer::from_vec(self.bytes);
        #[cfg(debug_assertions)]
        StringArray::try_new(offsets.clone(), values.clone(), nulls.clone())?;
        // SAFETY: every value was pushed as a `&str` and each row ends
        // where its value does, so the bytes are UTF-8 and every offset
        // falls on a character boundary; the offsets only grow, one per
        // row, and the nulls (when any) have one bit per row. Checking
        // that again reads every byte of the column once more (a third of
        // `finish` on the consumer's thread); debug builds do.
        Ok(Arc::new(unsafe {
            StringArray::new_unchecked(offsets, values, nulls)
        }))
    }
}

/// An optional number column: values (a default where missing) and,
/// once one is missing, which are there.
#[derive(Debug)]
struct Optional<T> {
    values: Vec<T>,
    nulls: Option<BooleanBufferBuilder>,
}

impl<T> Default for Optional<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            nulls: None,
        }
    }
}

impl<T: ArrowNativeType> Optional<T> {
    fn with_capacity(rows: usize) -> Self {
        Self {
            values: Vec::with_capacity(rows),
            nulls: None,
        }
    }

    #[inline]
    fn push(&mut self, value: Option<T>) {
        let rows = self.values.len();
        self.values.push(value.unwrap_or_default());
        match (&mut self.nulls, value.is_some()) {
            (Some(nulls), valid) => nulls.append(valid),
            (None, true) => {}
            (None, false) => {
                let mut nulls = all_valid(rows, self.values.capacity());
                nulls.append(false);
                self.nulls = Some(nulls);
            }
        }
    }

    /// The column as an Arrow array of `P`, whose values are `T`s.
    fn finish<P: ArrowPrimitiveType<Native = T>>(self) -> ArrayRef {
        let nulls = self.nulls.map(|mut n| NullBuffer::new(n.finish()));
        Arc::new(PrimitiveArray::<P>::new(
            ScalarBuffer::from(self.values),
            nulls,
        ))
    }
}

/// Validity bits for `rows` values, all there, with room for `capacity`.
fn all_valid(rows: usize, capacity: usize) -> BooleanBufferBuilder {
    let mut nulls = BooleanBufferBuilder::new(capacity.max(rows + 1));
    nulls.append_n(rows, true);
    nulls
}

impl SamplesBuilder {
    /// Rows so far.
    pub fn len(&self) -> usize {
        self.time.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.time.is_empty()
    }

    /// Appends one sample.
    pub fn push(&mut self, s: &SampleRecord<'_>) {
        self.time.push(s.event_time.as_micros());
        self.cluster.push(s.cluster);
        self.pool.push(s.pool);
        self.node.push(s.node);
        self.device_uuid.push(s.device_uuid);
        self.parent_gpu_uuid.push_option(s.parent_gpu_uuid);
        self.model.push(s.model);
        self.mig_profile.push_option(s.mig_profile);
        self.slices.push(s.slices);
        self.max_slices.push(s.max_slices);
        self.sm_util_pct.push(s.sm_util_pct);
        self.mem_util_pct.push(s.mem_util_pct);
        self.mem_used_bytes.push(s.mem_used_bytes);
        self.mem_total_bytes.push(s.mem_total_bytes);
        self.power_mw.push(s.power_mw);
        self.energy_mj.push(s.energy_mj);
        self.temp_c.push(s.temp_c);
        self.pid_values.extend(s.pids.iter());
        self.pid_ends.push(self.pid_values.len());
        self.job_id.push_option(s.job_id);
        self.tenant.push_option(s.tenant);
        self.interval_ms.push(s.interval_ms);
        self.source.push(s.source);
        self.seq.push(s.seq);
    }

    /// Takes the rows so far as a batch and starts empty again, with room
    /// for as many rows and bytes as the batch has: a partition's files are
    /// alike, and columns that grow by doubling copy themselves over and
    /// over.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.len();
        let next = SamplesBuilder {
            time: Vec::with_capacity(rows),
            cluster: Text::with_capacity_of(&self.cluster),
            pool: Text::with_capacity_of(&self.pool),
            node: Text::with_capacity_of(&self.node),
            device_uuid: Text::with_capacity_of(&self.device_uuid),
            parent_gpu_uuid: Text::with_capacity_of(&self.parent_gpu_uuid),
            model: Text::with_capacity_of(&self.model),
            mig_profile: Text::with_capacity_of(&self.mig_profile),
            slices: Vec::with_capacity(rows),
            max_slices: Vec::with_capacity(rows),
            sm_util_pct: Optional::with_capacity(rows),
            mem_util_pct: Optional::with_capacity(rows),
            mem_used_bytes: Vec::with_capacity(rows),
            mem_total_bytes: Vec::with_capacity(rows),
            power_mw: Optional::with_capacity(rows),
            energy_mj: Optional::with_capacity(rows),
            temp_c: Optional::with_capacity(rows),
            pid_ends: Ends::with_capacity(rows),
            pid_values: Vec::with_capacity(self.pid_values.len()),
            job_id: Text::with_capacity_of(&self.job_id),
            tenant: Text::with_capacity_of(&self.tenant),
            interval_ms: Vec::with_capacity(rows),
            source: Text::with_capacity_of(&self.source),
            seq: Vec::with_capacity(rows),
        };
        let this = std::mem::replace(self, next);
        let ints = |values: Vec<i32>| -> ArrayRef { Arc::new(Int32Array::from(values)) };
        let longs = |values: Vec<i64>| -> ArrayRef { Arc::new(Int64Array::from(values)) };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMicrosecondArray::from(this.time).with_timezone("UTC")),
            this.cluster.finish("cluster")?,
            this.pool.finish("pool")?,
            this.node.finish("node")?,
            this.device_uuid.finish("device_uuid")?,
            this.parent_gpu_uuid.finish("parent_gpu_uuid")?,
            this.model.finish("model")?,
            this.mig_profile.finish("mig_profile")?,
            ints(this.slices),
            ints(this.max_slices),
            this.sm_util_pct.finish::<Float32Type>(),
            this.mem_util_pct.finish::<Float32Type>(),
            longs(this.mem_used_bytes),
            longs(this.mem_total_bytes),
            this.power_mw.finish::<Int64Type>(),
            this.energy_mj.finish::<Int64Type>(),
            this.temp_c.finish::<Int32Type>(),
            pids(this.pid_ends, this.pid_values)?,
            this.job_id.finish("job_id")?,
            this.tenant.finish("tenant")?,
            ints(this.interval_ms),
            this.source.finish("source")?,
            longs(this.seq),
        ];
        RecordBatch::try_new(SCHEMA.clone(), columns)
    }
}

/// The `pids` column: each row's list of process ids.
fn pids(ends: Ends, values: Vec<i64>) -> Result<ArrayRef, ArrowError> {
    let offsets = ends.finish("pids", values.len())?;
    let DataType::List(item) = SCHEMA.field_with_name("pids")?.data_type() else {
        return Err(ArrowError::SchemaError(
            "the samples schema's pids is not a list".into(),
        ));
    };
    Ok(Arc::new(ListArray::try_new(
        item.clone(),
        offsets,
        Arc::new(Int64Array::from(values)),
        None,
    )?))
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

/// The fixtures' `GpuSample` and its envelope, for tests.
#[cfg(test)]
pub(crate) fn fixture_sample() -> (
    gpuledger_schemas::Envelope,
    gpuledger_schemas::events::GpuSample,
) {
    use gpuledger_schemas::EventBody;
    let event = gpuledger_schemas::samples::one_of_each()
        .into_iter()
        .find(|e| matches!(e.body, EventBody::GpuSample(_)))
        .expect("the fixtures hold a GpuSample");
    let EventBody::GpuSample(sample) = event.body else {
        unreachable!()
    };
    (event.envelope, sample)
}

/// A builder holding `rows` copies of the fixtures' `GpuSample`, for tests.
#[cfg(test)]
pub(crate) fn fixture_rows(rows: usize) -> SamplesBuilder {
    let (envelope, sample) = fixture_sample();
    let mut builder = SamplesBuilder::default();
    for _ in 0..rows {
        builder.push(&SampleRecord::of(&envelope, &sample));
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    #[test]
    fn a_batch_matches_the_schema() {
        let mut builder = fixture_rows(2);
        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), *SCHEMA);
        assert!(builder.is_empty());
    }

    /// Optional values missing at the start, in the middle and at the end
    /// of a batch, pid lists of every length, over two batches (the second
    /// starts from the first's capacities): each row reads back as pushed.
    #[test]
    fn every_value_reads_back_as_pushed() {
        let (envelope, template) = fixture_sample();
        let mut builder = SamplesBuilder::default();
        for batch_rows in [37usize, 101] {
            let mut expected = Vec::new();
            for i in 0..batch_rows {
                let on = |modulus: usize| i % modulus != 0;
                let mut sample = template.clone();
                sample.device_uuid = format!("GPU-{i}");
                sample.parent_gpu_uuid = on(2).then(|| format!("GPU-p{i}"));
                sample.mig_profile = on(3).then(|| "1g.10gb".to_owned());
                sample.sm_util_pct = on(4).then_some(i as f32);
                sample.mem_util_pct = (i % 5 == 1).then_some(1.5);
                sample.power_mw = on(6).then_some(i as i64);
                sample.energy_mj = on(7).then_some(-(i as i64));
                sample.temp_c = (i + 1 != batch_rows).then_some(40);
                sample.job_id = on(2).then(|| format!("job-{i}"));
                sample.tenant = (i % 2 == 0).then(|| "t".to_owned());
                sample.pids = (0..(i % 4) as i64).collect();
                builder.push(&SampleRecord::of(&envelope, &sample));
                expected.push(sample);
            }
            let batch = builder.finish().unwrap();
            assert_eq!(batch.num_rows(), batch_rows);
            assert!(builder.is_empty());
            let text = |name: &str| batch.column_by_name(name).unwrap().as_string::<i32>();
            let optional_text = |name: &str, row: usize| {
                let column = text(name);
                column.is_valid(row).then(|| column.value(row).to_owned())
            };
            let primitive = |name: &str| batch.column_by_name(name).unwrap().clone();
            let pids = batch.column_by_name("pids").unwrap().as_list::<i32>();
            for (row, sample) in expected.iter().enumerate() {
                assert_eq!(text("device_uuid").value(row), sample.device_uuid);
                assert_eq!(
                    optional_text("parent_gpu_uuid", row),
                    sample.parent_gpu_uuid
                );
                assert_eq!(optional_text("mig_profile", row), sample.mig_profile);
                assert_eq!(optional_text("job_id", row), sample.job_id);
                assert_eq!(optional_text("tenant", row), sample.tenant);
                let sm = primitive("sm_util_pct");
                let sm = sm.as_primitive::<arrow::datatypes::Float32Type>();
                assert_eq!(sm.is_valid(row).then(|| sm.value(row)), sample.sm_util_pct);
                let mem = primitive("mem_util_pct");
                let mem = mem.as_primitive::<arrow::datatypes::Float32Type>();
                assert_eq!(
                    mem.is_valid(row).then(|| mem.value(row)),
                    sample.mem_util_pct
                );
                for (name, want) in [
                    ("power_mw", sample.power_mw),
                    ("energy_mj", sample.energy_mj),
                ] {
                    let column = primitive(name);
                    let column = column.as_primitive::<Int64Type>();
                    assert_eq!(
                        column.is_valid(row).then(|| column.value(row)),
                        want,
                        "{name}"
                    );
                }
                let temp = primitive("temp_c");
                let temp = temp.as_primitive::<arrow::datatypes::Int32Type>();
                assert_eq!(temp.is_valid(row).then(|| temp.value(row)), sample.temp_c);
                let ids = pids.value(row);
                assert_eq!(
                    ids.as_primitive::<Int64Type>().values().to_vec(),
                    sample.pids
                );
            }
        }
    }

    /// Rows of several devices, interleaved, some arriving out of time
    /// order and some with equal times: sorted by device, time and seq,
    /// whole rows kept together.
    #[test]
    fn sorting_orders_by_device_then_time_then_seq() {
        let (envelope, template) = fixture_sample();
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
            let mut envelope = envelope.clone();
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
