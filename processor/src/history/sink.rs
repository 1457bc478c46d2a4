//! Writing one Parquet file durably and whole: readers never see a
//! partial file.

use gpuledger_common::history::HistoryRoot;

use arrow::array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
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

/// Integer columns of `samples` that climb steadily along a device's rows
/// (the sort order): the time and sequence number at each interval and the
/// energy counter. Written as deltas (`DELTA_BINARY_PACKED`), a row group's
/// `time` takes about a kilobyte instead of 14–145 KB of zstd output, and
/// a reader filtering on time has almost nothing to decompress. (Memory in
/// use, which rarely moves, compresses better plain: zstd finds its runs.)
const SAMPLES_DELTA: [&str; 3] = ["time", "seq", "energy_mj"];

/// Columns of `samples` without statistics: nothing filters on them, and
/// a file holds every device of its partition, so their ranges would prune
/// nothing; each value would cost two comparisons to keep them.
const SAMPLES_NO_STATISTICS: [&str; 4] = ["cluster", "source", "parent_gpu_uuid", "mig_profile"];

/// Columns of `samples` with statistics per page as well as per row
/// group: the sort keys, where a page holds a narrow range and a reader's
/// filter can skip pages.
const SAMPLES_PAGE_STATISTICS: [&str; 2] = ["device_uuid", "time"];

/// Writer settings for a history table: zstd, dictionary-encoded strings,
/// row groups of about 100k rows, statistics per row group. `samples`,
/// written by the million, skips dictionaries for its high-cardinality
/// columns, writes its steadily climbing integers as deltas and keeps page
/// statistics for its sort keys only.
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
        for column in SAMPLES_DELTA {
            builder = builder.set_column_encoding(column.into(), Encoding::DELTA_BINARY_PACKED);
        }
        for column in SAMPLES_NO_STATISTICS {
            builder = builder.set_column_statistics_enabled(column.into(), EnabledStatistics::None);
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
    let bytes = encode(table, batch)?;
    root.put(table, date, &name.render(), &bytes)?;
    Ok(bytes.len() as u64)
}

/// `batch` as the bytes of a Parquet file of `table`, with the table's
/// writer settings.
fn encode(table: &str, batch: &RecordBatch) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut bytes, batch.schema(), Some(writer_properties(table)))
            .map_err(std::io::Error::other)?;
    writer.write(batch).map_err(std::io::Error::other)?;
    writer.close().map_err(std::io::Error::other)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use parquet::basic::Encoding;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// A `samples` file as the writers leave it: the climbing integers as
    /// deltas, the text dictionary-encoded, zstd throughout.
    #[test]
    fn samples_are_written_with_their_encodings() {
        let batch = samples::fixture_rows(3).finish().unwrap();
        let bytes = encode(samples::TABLE, &batch).unwrap();

        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let group = reader.metadata().row_group(0);
        let encodings = |name: &str| {
            let column = group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no column {name}"));
            assert!(matches!(column.compression(), Compression::ZSTD(_)));
            column.encodings().collect::<Vec<Encoding>>()
        };
        for column in SAMPLES_DELTA {
            assert!(
                encodings(column).contains(&Encoding::DELTA_BINARY_PACKED),
                "{column}: {:?}",
                encodings(column)
            );
        }
        assert!(encodings("device_uuid").contains(&Encoding::RLE_DICTIONARY));
        assert!(!encodings("sm_util_pct").contains(&Encoding::RLE_DICTIONARY));
    }
}
