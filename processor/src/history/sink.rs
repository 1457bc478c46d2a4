//! Writing one Parquet file durably and whole: readers never see a
//! partial file.

use gpuledger_common::history::HistoryRoot;

use arrow::array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::samples;

use super::layout::FileName;

/// Rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 100_000;

/// Columns of `samples` whose values nearly all differ: a dictionary
/// would only overflow into plain pages after hashing every value, so they
/// are written plain (zstd still finds their repeats).
const SAMPLES_PLAIN: [&str; 7] = [
    "time",
    "seq",
    "energy_mj",
    "power_mw",
    "mem_used_bytes",
    "sm_util_pct",
    "mem_util_pct",
];

/// Columns of `samples` with statistics per page as well as per row
/// group: the sort keys, where a page holds a narrow range and a reader's
/// filter can skip pages.
const SAMPLES_PAGE_STATISTICS: [&str; 2] = ["device_uuid", "time"];

/// Writer settings for a history table: zstd, dictionary-encoded strings,
/// row groups of about 100k rows, statistics per row group. `samples`,
/// written by the million, skips dictionaries for its high-cardinality
/// columns and keeps page statistics for its sort keys only.
pub fn writer_properties(table: &str) -> WriterProperties {
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    if table == samples::TABLE {
        builder = builder.set_statistics_enabled(EnabledStatistics::Chunk);
        for column in SAMPLES_PLAIN {
            builder = builder.set_column_dictionary_enabled(column.into(), false);
        }
        for column in SAMPLES_PAGE_STATISTICS {
            builder = builder.set_column_statistics_enabled(column.into(), EnabledStatistics::Page);
        }
    }
    builder.build()
}

/// Writes `batch` as `<root>/<table>/date=<date>/<name>` and makes it
/// durable before returning (see [`HistoryRoot::put`]); returns its size
/// in bytes.
pub fn write_file(
    root: &HistoryRoot,
    table: &str,
    date: &str,
    name: &FileName,
    batch: &RecordBatch,
) -> std::io::Result<u64> {
    let mut bytes = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut bytes, batch.schema(), Some(writer_properties(table)))
            .map_err(std::io::Error::other)?;
    writer.write(batch).map_err(std::io::Error::other)?;
    writer.close().map_err(std::io::Error::other)?;
    root.put(table, date, &name.render(), &bytes)?;
    Ok(bytes.len() as u64)
}
