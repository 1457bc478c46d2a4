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

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

/// Where a row came from in the ledger: its partition and offset.
fn ledger_position() -> [Field; 2] {
    [
        Field::new("ledger_partition", DataType::Int32, false),
        Field::new("ledger_offset", DataType::Int64, false),
    ]
}

/// `ledger_events`: every applied ledger event — the fields most queries
/// filter on as typed columns, and the whole event in its JSON form as
/// `raw`.
pub mod ledger_events {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "ledger_events";

    /// Columns of `ledger_events`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_position().to_vec();
        fields.extend([
            utf8("event_id", false),
            utf8("type", false),
            Field::new("event_time", time_type(), false),
            utf8("source", false),
            utf8("cluster", false),
            utf8("pool", true),
            utf8("tenant", true),
            utf8("job_id", true),
            Field::new("attempt", DataType::Int32, true),
            utf8("request_id", true),
            utf8("reservation_id", true),
            utf8("node", true),
            utf8("device_uuid", true),
            utf8("state", true),
            Field::new("slices", DataType::Int32, true),
            Field::new("max_slices", DataType::Int32, true),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `decisions`: every decision, with the ledger position that caused it.
pub mod decisions {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "decisions";

    /// Columns of `decisions`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_position().to_vec();
        fields.extend([
            utf8("cause_event_id", false),
            utf8("event_id", false),
            utf8("type", false),
            Field::new("event_time", time_type(), false),
            utf8("pool", true),
            utf8("tenant", true),
            utf8("job_id", true),
            Field::new("attempt", DataType::Int32, true),
            utf8("request_id", true),
            utf8("reservation_id", true),
            utf8("decision", true),
            utf8("kind", true),
            utf8("reason", true),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `allocations`: billing segments. A segment has a row when it opens
/// (`end` null) and another when it closes; the closed row wins.
pub mod allocations {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "allocations";

    /// Columns of `allocations`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_position().to_vec();
        fields.extend([
            utf8("pool", false),
            utf8("tenant", false),
            utf8("job_id", false),
            Field::new("attempt", DataType::Int32, false),
            utf8("kind", false),
            Field::new("slices", DataType::Int64, false),
            Field::new("max_slices", DataType::Int64, false),
            utf8("model", false),
            Field::new(
                "devices",
                DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
                false,
            ),
            Field::new("start", time_type(), false),
            Field::new("end", time_type(), true),
            utf8("final_state", true),
            utf8("work_units", true),
            utf8("work_unit_name", true),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// Every history table this version writes, with its columns.
pub fn all() -> Vec<(&'static str, SchemaRef)> {
    vec![
        (samples::TABLE, samples::SCHEMA.clone()),
        (ledger_events::TABLE, ledger_events::SCHEMA.clone()),
        (decisions::TABLE, decisions::SCHEMA.clone()),
        (allocations::TABLE, allocations::SCHEMA.clone()),
    ]
}
