//! Exact numbers and times as Arrow column values.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::error::ArrowError;
use gpuledger_schemas::Rational;

/// `value` rounded half-even to `scale` digits, as the unscaled `i128` of
/// a `DECIMAL(38, scale)`.
pub(crate) fn unscaled(value: &Rational, scale: u32) -> Result<i128, ArrowError> {
    let text = value.round_half_even(scale).to_string();
    text.replace('.', "")
        .parse()
        .map_err(|e| ArrowError::ComputeError(format!("{text} is not a decimal: {e}")))
}

/// Timestamps in microseconds, UTC (`timestamptz` over PostgreSQL).
pub(crate) fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The GE an allocation holds, as text: `2` (whole GPUs) or `3/7` (MIG
/// slices of one).
pub(crate) fn ge_text(slices: i64, max_slices: i64) -> String {
    if max_slices == 1 {
        slices.to_string()
    } else {
        format!("{slices}/{max_slices}")
    }
}
