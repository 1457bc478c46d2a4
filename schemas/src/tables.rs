//! The Arrow schemas of the history tables (DESIGN §6), shared by the
//! processor that writes them and the query service that reads them.
//! The `date` partition column lives in the path, not in the files.

use std::sync::{Arc, LazyLock};

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// Name of the Hive partition column every table carries.
pub const DATE_PARTITION: &str = "date";

/// The event-time column type: microseconds, UTC.
pub fn time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// `samples`: every `GpuSample`, one row each.
pub mod samples {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "samples";

    /// Columns of `samples`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let utf8 = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
        Arc::new(Schema::new(vec![
            Field::new("time", time_type(), false),
            utf8("cluster", false),
            utf8("pool", false),
            utf8("node", false),
            utf8("device_uuid", false),
            utf8("parent_gpu_uuid", true),
            utf8("model", false),
            utf8("mig_profile", true),
            Field::new("slices", DataType::Int32, false),
            Field::new("max_slices", DataType::Int32, false),
            Field::new("sm_util_pct", DataType::Float32, true),
            Field::new("mem_util_pct", DataType::Float32, true),
            Field::new("mem_used_bytes", DataType::Int64, false),
            Field::new("mem_total_bytes", DataType::Int64, false),
            Field::new("power_mw", DataType::Int64, true),
            Field::new("energy_mj", DataType::Int64, true),
            Field::new("temp_c", DataType::Int32, true),
            Field::new(
                "pids",
                DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
                false,
            ),
            utf8("job_id", true),
            utf8("tenant", true),
            Field::new("interval_ms", DataType::Int32, false),
            utf8("source", false),
            Field::new("seq", DataType::Int64, false),
        ]))
    });
}

/// Every history table this version writes, with its columns.
pub fn all() -> Vec<(&'static str, SchemaRef)> {
    vec![(samples::TABLE, samples::SCHEMA.clone())]
}
