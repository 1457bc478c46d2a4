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

/// `device_hourly`: the samples rolled up per device, hour, holder (the
/// collector's attribution) and MIG share, written beside each `samples`
/// file from the same records, so statements need not scan raw samples.
///
/// `hour` is the hour of the instant a sample's energy is attributed to
/// (its time less 1 µs), so a sample at 13:00:00 belongs to 12:00. The
/// energy delta of a device's first sample in a file is not known when
/// the file is written: that sample's counter is `opening_energy_mj`, and
/// the device's last counter in the file is `closing_energy_mj`; a reader
/// takes the delta between a file's opening and the previous file's
/// closing (a counter that went down restarted from 0).
pub mod device_hourly {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "device_hourly";

    /// The start of the hour (µs) a sample taken at `time` (µs) is booked
    /// in: the hour of `time − 1 µs`.
    pub fn hour_of(time: i64) -> i64 {
        (time - 1).div_euclid(crate::time::MICROS_PER_HOUR) * crate::time::MICROS_PER_HOUR
    }

    /// The energy used between two readings of a GPU's counter; a counter
    /// that went down restarted from 0.
    pub fn energy_delta(before: i64, now: i64) -> i64 {
        if now < before { now } else { now - before }
    }

    /// Columns of `device_hourly`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        Arc::new(Schema::new(vec![
            Field::new("hour", time_type(), false),
            utf8("pool", false),
            utf8("node", false),
            utf8("device_uuid", false),
            utf8("model", false),
            Field::new("slices", DataType::Int32, false),
            Field::new("max_slices", DataType::Int32, false),
            utf8("tenant", true),
            utf8("job_id", true),
            // The earliest start of a sample's interval, and the first and
            // last sample time: every sample covers a part of
            // [span_start, last_time).
            Field::new("span_start", time_type(), false),
            Field::new("first_time", time_type(), false),
            Field::new("last_time", time_type(), false),
            Field::new("samples", DataType::Int64, false),
            Field::new("sampled_ms", DataType::Int64, false),
            Field::new("idle_ms", DataType::Int64, false),
            Field::new("sm_util_avg", DataType::Float64, true),
            Field::new("energy_mj", DataType::Int64, false),
            Field::new("opening_energy_mj", DataType::Int64, true),
            Field::new("closing_energy_mj", DataType::Int64, true),
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

/// The columns every table of one ledger event's facts starts with: the
/// event's position, id and time.
fn ledger_fact() -> Vec<Field> {
    let mut fields = ledger_position().to_vec();
    fields.extend([
        utf8("event_id", false),
        Field::new("event_time", time_type(), false),
    ]);
    fields
}

/// Decimal amounts (rates, quotas, quantities) are kept as the exact
/// decimal text they were written with; `CAST(x AS DECIMAL(38, 12))` makes
/// them numbers where that precision is enough.
fn decimal_text(name: &str, nullable: bool) -> Field {
    utf8(name, nullable)
}

/// `reservations`: every `ReservationDecision` — confirmed, rejected or
/// cancelled — one row each; a reservation's latest row is its state.
pub mod reservations {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "reservations";

    /// Columns of `reservations`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_fact();
        fields.extend([
            utf8("cause_event_id", false),
            utf8("pool", false),
            utf8("tenant", false),
            utf8("reservation_id", false),
            Field::new("slices", DataType::Int32, false),
            Field::new("max_slices", DataType::Int32, false),
            Field::new("start", time_type(), false),
            Field::new("end", time_type(), false),
            utf8("decision", false),
            utf8("reason", false),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `policies`: every applied `TenantPolicy`; a (pool, tenant)'s latest row
/// is in force.
pub mod policies {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "policies";

    /// Columns of `policies`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_fact();
        fields.extend([
            utf8("pool", false),
            utf8("tenant", false),
            decimal_text("nominal_ge", false),
            decimal_text("burst_ge", false),
            decimal_text("monthly_budget", true),
            decimal_text("monthly_gpu_hours", true),
            utf8("enforcement", false),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `price_books`: every applied `PriceBook`, one row per model rate (a
/// book with no rates has one row with `model` null); `raw` is the whole
/// book.
pub mod price_books {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "price_books";

    /// Columns of `price_books`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_fact();
        fields.extend([
            utf8("pool", true),
            Field::new("version", DataType::Int64, false),
            Field::new("effective_from", time_type(), false),
            utf8("currency", false),
            utf8("model", true),
            decimal_text("reserved_per_gpu_hour", true),
            decimal_text("quota_per_gpu_hour", true),
            decimal_text("on_demand_per_gpu_hour", true),
            decimal_text("energy_per_kwh", true),
            decimal_text("storage_per_gb_month", false),
            decimal_text("egress_per_gb", false),
            decimal_text("overhead_pct", false),
            utf8("reservation_charge", false),
            utf8("idle_distribution", false),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `usage_records`: every applied `UsageRecord` (storage GB-hours, egress
/// and ingress bytes).
pub mod usage_records {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "usage_records";

    /// Columns of `usage_records`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_fact();
        fields.extend([
            utf8("pool", false),
            utf8("tenant", false),
            utf8("kind", false),
            decimal_text("quantity", false),
            Field::new("start", time_type(), false),
            Field::new("end", time_type(), false),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// `inventory`: every applied `NodeInventory`, one row per device (a node
/// reported with no devices has one row with `device_uuid` null); `raw` is
/// the whole report.
pub mod inventory {
    use super::*;

    /// Table name.
    pub const TABLE: &str = "inventory";

    /// Columns of `inventory`.
    pub static SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
        let mut fields = ledger_fact();
        fields.extend([
            utf8("pool", false),
            utf8("node", false),
            utf8("device_uuid", true),
            utf8("parent_gpu_uuid", true),
            utf8("model", true),
            utf8("mig_profile", true),
            Field::new("slices", DataType::Int32, true),
            Field::new("max_slices", DataType::Int32, true),
            Field::new("memory_bytes", DataType::Int64, true),
            utf8("raw", false),
        ]);
        Arc::new(Schema::new(fields))
    });
}

/// Every history table this version writes, with its columns.
pub fn all() -> Vec<(&'static str, SchemaRef)> {
    vec![
        (samples::TABLE, samples::SCHEMA.clone()),
        (device_hourly::TABLE, device_hourly::SCHEMA.clone()),
        (ledger_events::TABLE, ledger_events::SCHEMA.clone()),
        (decisions::TABLE, decisions::SCHEMA.clone()),
        (allocations::TABLE, allocations::SCHEMA.clone()),
        (reservations::TABLE, reservations::SCHEMA.clone()),
        (policies::TABLE, policies::SCHEMA.clone()),
        (price_books::TABLE, price_books::SCHEMA.clone()),
        (usage_records::TABLE, usage_records::SCHEMA.clone()),
        (inventory::TABLE, inventory::SCHEMA.clone()),
    ]
}
