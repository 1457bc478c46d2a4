//! Writing one Parquet file durably and whole: readers never see a
//! partial file.

use gpuledger_common::history::HistoryRoot;

use arrow::array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::layout::FileName;

/// Rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 100_000;

/// Writer settings for every history table: zstd, dictionary-encoded
/// strings, row groups of about 100k rows.
pub fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build()
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
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(writer_properties()))
        .map_err(std::io::Error::other)?;
    writer.write(batch).map_err(std::io::Error::other)?;
    writer.close().map_err(std::io::Error::other)?;
    root.put(table, date, &name.render(), &bytes)?;
    Ok(bytes.len() as u64)
}
