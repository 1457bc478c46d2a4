//! Writing one Parquet file durably: temporary name, fsync, rename, fsync
//! of the folder. Readers never see a partial file.

use std::fs::File;
use std::path::Path;

use arrow::array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::layout::{FileName, day_dir};

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
/// durable before returning.
pub fn write_file(
    root: &Path,
    table: &str,
    date: &str,
    name: &FileName,
    batch: &RecordBatch,
) -> std::io::Result<()> {
    // Shared with other writers; compaction takes it exclusively.
    let lock = super::compact::lock_file(root, table)?;
    lock.lock_shared()?;
    let dir = day_dir(root, table, date);
    std::fs::create_dir_all(&dir)?;
    let final_name = name.render();
    let tmp = dir.join(format!(".{final_name}.tmp"));
    let file = File::create(&tmp)?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(writer_properties()))
        .map_err(std::io::Error::other)?;
    writer.write(batch).map_err(std::io::Error::other)?;
    let file = writer.into_inner().map_err(std::io::Error::other)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(&final_name))?;
    File::open(&dir)?.sync_all()?;
    Ok(())
}
