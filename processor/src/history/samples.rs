//! The `samples` table: every `GpuSample`, one row each.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Builder, Int32Builder, Int64Builder, ListBuilder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::compute::{SortColumn, lexsort_to_indices, take_record_batch};
use arrow::error::ArrowError;
use gpuledger_schemas::Envelope;
use gpuledger_schemas::events::GpuSample;

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
    pub fn push(&mut self, env: &Envelope, s: &GpuSample) {
        self.time.append_value(env.event_time.as_micros());
        self.cluster.append_value(&env.cluster);
        self.pool.append_value(&s.pool);
        self.node.append_value(&s.node);
        self.device_uuid.append_value(&s.device_uuid);
        self.parent_gpu_uuid
            .append_option(s.parent_gpu_uuid.as_deref());
        self.model.append_value(&s.model);
        self.mig_profile.append_option(s.mig_profile.as_deref());
        self.slices.append_value(s.slices);
        self.max_slices.append_value(s.max_slices);
        self.sm_util_pct.append_option(s.sm_util_pct);
        self.mem_util_pct.append_option(s.mem_util_pct);
        self.mem_used_bytes.append_value(s.mem_used_bytes);
        self.mem_total_bytes.append_value(s.mem_total_bytes);
        self.power_mw.append_option(s.power_mw);
        self.energy_mj.append_option(s.energy_mj);
        self.temp_c.append_option(s.temp_c);
        self.pids.values().append_slice(&s.pids);
        self.pids.append(true);
        self.job_id.append_option(s.job_id.as_deref());
        self.tenant.append_option(s.tenant.as_deref());
        self.interval_ms.append_value(s.interval_ms);
        self.source.append_value(&env.source);
        self.seq.append_value(s.seq);
        self.rows += 1;
    }

    /// Takes the rows so far as a batch and starts empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.time.finish().with_timezone("UTC")),
            Arc::new(self.cluster.finish()),
            Arc::new(self.pool.finish()),
            Arc::new(self.node.finish()),
            Arc::new(self.device_uuid.finish()),
            Arc::new(self.parent_gpu_uuid.finish()),
            Arc::new(self.model.finish()),
            Arc::new(self.mig_profile.finish()),
            Arc::new(self.slices.finish()),
            Arc::new(self.max_slices.finish()),
            Arc::new(self.sm_util_pct.finish()),
            Arc::new(self.mem_util_pct.finish()),
            Arc::new(self.mem_used_bytes.finish()),
            Arc::new(self.mem_total_bytes.finish()),
            Arc::new(self.power_mw.finish()),
            Arc::new(self.energy_mj.finish()),
            Arc::new(self.temp_c.finish()),
            Arc::new(self.pids.finish()),
            Arc::new(self.job_id.finish()),
            Arc::new(self.tenant.finish()),
            Arc::new(self.interval_ms.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.seq.finish()),
        ];
        RecordBatch::try_new(SCHEMA.clone(), columns)
    }
}

/// The rows of a `samples` batch ordered by device, then time (then
/// `seq`): each
/// column's neighbouring values then differ little (one device's clock,
/// counters and holder), which is what dictionary, delta and zstd
/// encodings compress best.
pub fn sorted(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| ArrowError::SchemaError(format!("samples batch has no column {name}")))
    };
    let keys = [
        SortColumn {
            values: column("device_uuid")?,
            options: None,
        },
        SortColumn {
            values: column("time")?,
            options: None,
        },
        // Ties (none from an honest collector) in the order they were made.
        SortColumn {
            values: column("seq")?,
            options: None,
        },
    ];
    let order = lexsort_to_indices(&keys, None)?;
    take_record_batch(batch, &order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_schemas::EventBody;
    use gpuledger_schemas::samples::one_of_each;

    #[test]
    fn a_batch_matches_the_schema() {
        let event = one_of_each()
            .into_iter()
            .find(|e| matches!(e.body, EventBody::GpuSample(_)))
            .unwrap();
        let EventBody::GpuSample(s) = &event.body else {
            unreachable!()
        };
        let mut builder = SamplesBuilder::default();
        builder.push(&event.envelope, s);
        builder.push(&event.envelope, s);
        let batch = builder.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), *SCHEMA);
        assert!(builder.is_empty());
    }
}
