//! Compaction: the many small files of a closed day become one file per
//! Kafka partition, and every reader sees each row exactly once throughout.
//!
//! For one table and day:
//! 1. The table's lock is taken exclusively, so no writer adds a file to
//!    the day meanwhile (writers hold it shared while they write one).
//! 2. The day's files are merged per partition, in offset order, into a
//!    staging folder beside the history (`<root>/.compaction/…`); the merged
//!    file is named by the range it covers, so a writer's resume point
//!    (the highest last offset) is unchanged. Single files are hard-linked.
//! 3. The staging folder and the day's folder are exchanged in one
//!    `renameat2(RENAME_EXCHANGE)`: a listing sees either every old file or
//!    every new one, never both. The old files are then removed.
//!
//! A query that listed the old files just before the exchange may find
//! them gone when it opens them: it fails and is asked again; it never
//! counts a row twice.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuledger_common::history::HistoryRoot;
use gpuledger_common::shutdown::Shutdown;

use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::ChunkReader;

use super::layout::{FileName, day_dir};
use super::sink::writer_properties;
use crate::metrics;

/// What compacting one day did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayCompaction {
    pub table: String,
    pub date: String,
    pub files_before: usize,
    pub files_after: usize,
    pub rows: u64,
}

pub use gpuledger_common::history::lock_file;

/// The days of `table` strictly before `before` (`YYYY-MM-DD`).
pub fn closed_days(root: &Path, table: &str, before: &str) -> std::io::Result<Vec<String>> {
    let mut days = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join(table)) else {
        return Ok(days);
    };
    for entry in entries {
        let name = entry?.file_name();
        let Some(date) = name.to_str().and_then(|n| n.strip_prefix("date=")) else {
            continue;
        };
        if date < before {
            days.push(date.to_owned());
        }
    }
    days.sort();
    Ok(days)
}

/// Compacts every day of `tables` before `before` (`YYYY-MM-DD`) under
/// `root`: a local day is swapped in one rename; on an object store the
/// merged files cover their parts until these are removed
/// ([`compact_parts`](super::compact_parts)). Days with nothing to merge
/// are reported unchanged.
pub fn compact_closed(
    root: &HistoryRoot,
    tables: &[String],
    before: &str,
) -> std::io::Result<Vec<DayCompaction>> {
    let mut done = Vec::new();
    for table in tables {
        let days = match root.local() {
            Some(local) => closed_days(local, table, before)?,
            None => super::compact_parts::closed_days(root, table, before)?,
        };
        for date in days {
            done.push(match root.local() {
                Some(local) => compact_day(local, table, &date)?,
                None => super::compact_parts::compact_day(root, table, &date)?,
            });
        }
    }
    Ok(done)
}

/// Compacts the closed days of every history table every `interval` (days
/// before today, UTC), until shutdown: `run --compact-interval-s`. A round
/// that fails is logged and counted, and the next round tries again.
pub async fn run_every(root: HistoryRoot, interval: Duration, mut shutdown: Shutdown) {
    let tables: Vec<String> = gpuledger_schemas::tables::all()
        .into_iter()
        .map(|(t, _)| t.to_owned())
        .collect();
    loop {
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let (root, tables) = (root.clone(), tables.clone());
        let before = gpuledger_schemas::Timestamp::now().date_string();
        let round =
            tokio::task::spawn_blocking(move || compact_closed(&root, &tables, &before)).await;
        match round {
            Ok(Ok(days)) => {
                for day in days.iter().filter(|d| d.files_after < d.files_before) {
                    metrics::HISTORY_FILES_COMPACTED
                        .add((day.files_before - day.files_after) as u64);
                    tracing::info!(
                        table = %day.table,
                        date = %day.date,
                        files_before = day.files_before,
                        files_after = day.files_after,
                        rows = day.rows,
                        "compacted a closed day"
                    );
                }
            }
            Ok(Err(e)) => {
                metrics::COMPACTION_FAILURES.inc();
                tracing::error!(error = %e, "history compaction failed; the next round tries again");
            }
            Err(e) => {
                metrics::COMPACTION_FAILURES.inc();
                tracing::error!(error = %e, "history compaction stopped; the next round tries again");
            }
        }
    }
}

/// Compacts one day of one table.
pub fn compact_day(root: &Path, table: &str, date: &str) -> std::io::Result<DayCompaction> {
    let lock = lock_file(root, table)?;
    lock.lock()?;
    let result = compact_locked(root, table, date);
    lock.unlock()?;
    result
}

fn compact_locked(root: &Path, table: &str, date: &str) -> std::io::Result<DayCompaction> {
    let day = day_dir(root, table, date);
    let mut groups: std::collections::BTreeMap<(String, i32), Vec<(FileName, PathBuf)>> =
        std::collections::BTreeMap::new();
    let mut files_before = 0;
    for entry in std::fs::read_dir(&day)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().and_then(FileName::parse) else {
            continue;
        };
        files_before += 1;
        groups
            .entry((name.topic.clone(), name.partition))
            .or_default()
            .push((name, entry.path()));
    }
    let mut report = DayCompaction {
        table: table.to_owned(),
        date: date.to_owned(),
        files_before,
        files_after: groups.len(),
        rows: 0,
    };
    if groups.values().all(|files| files.len() < 2) {
        report.files_after = files_before;
        return Ok(report);
    }
    let staging = root
        .join(".compaction")
        .join(table)
        .join(format!("date={date}"));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::create_dir_all(&staging)?;
    for ((topic, partition), mut files) in groups {
        files.sort_by_key(|(name, _)| name.first_offset);
        let merged = FileName {
            topic,
            partition,
            first_offset: files.first().map_or(0, |(n, _)| n.first_offset),
            last_offset: files.iter().map(|(n, _)| n.last_offset).max().unwrap_or(0),
        };
        let target = staging.join(merged.render());
        if let [(_, only)] = files.as_slice() {
            std::fs::hard_link(only, &target)?;
            report.rows += rows_of(only)?;
            continue;
        }
        report.rows += merge(table, &files, &target)?;
    }
    File::open(&staging)?.sync_all()?;
    exchange(&staging, &day)?;
    File::open(root.join(table))?.sync_all()?;
    // `staging` now holds the old files.
    std::fs::remove_dir_all(&staging)?;
    Ok(report)
}

fn rows_of(path: &Path) -> std::io::Result<u64> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)
        .map_err(std::io::Error::other)?;
    Ok(builder.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Writes the rows of `files`, in order, as one durable file.
fn merge(table: &str, files: &[(FileName, PathBuf)], target: &Path) -> std::io::Result<u64> {
    let parts = files.iter().map(|(_, path)| File::open(path));
    let (file, rows) = merge_into(table, parts, || File::create(target))?;
    if let Some(file) = file {
        file.sync_all()?;
    }
    Ok(rows)
}

/// Copies the rows of `parts`, in order, into one Parquet file written to
/// the sink `open` makes when the first rows arrive (none for no rows);
/// returns the sink and how many rows it holds.
pub(super) fn merge_into<R, W>(
    table: &str,
    parts: impl IntoIterator<Item = std::io::Result<R>>,
    open: impl FnOnce() -> std::io::Result<W>,
) -> std::io::Result<(Option<W>, u64)>
where
    R: ChunkReader + 'static,
    W: std::io::Write + Send,
{
    let mut open = Some(open);
    let mut writer: Option<ArrowWriter<W>> = None;
    let mut rows = 0u64;
    for part in parts {
        let reader = ParquetRecordBatchReaderBuilder::try_new(part?)
            .map_err(std::io::Error::other)?
            .with_batch_size(65_536)
            .build()
            .map_err(std::io::Error::other)?;
        for batch in reader {
            let batch = batch.map_err(std::io::Error::other)?;
            let w = match (writer.as_mut(), open.take()) {
                (Some(w), _) => w,
                (None, Some(open)) => writer.insert(
                    ArrowWriter::try_new(open()?, batch.schema(), Some(writer_properties(table)))
                        .map_err(std::io::Error::other)?,
                ),
                (None, None) => unreachable!("the sink is opened with the first rows"),
            };
            rows += batch.num_rows() as u64;
            w.write(&batch).map_err(std::io::Error::other)?;
        }
    }
    let sink = match writer {
        Some(w) => Some(w.into_inner().map_err(std::io::Error::other)?),
        None => None,
    };
    Ok((sink, rows))
}

/// Swaps two folders atomically (Linux `renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|e| std::io::Error::other(e.to_string()))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both paths are valid NUL-terminated strings that outlive the
    // call; `renameat2` reads them and touches no other memory.
    let code = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if code == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
