//! Compaction where nothing can swap a day's files at once: history on an
//! object store. For one table and day, per Kafka partition:
//!
//! 1. parts that a merged file already covers (an earlier compaction
//!    stopped before removing them) are removed;
//! 2. the other files are merged, in offset order, into one file named by
//!    the range it covers, stored with one PUT (atomic: all or nothing);
//! 3. only then are its parts removed.
//!
//! Between 2 and 3 the merged file covers its parts. The query service
//! leaves covered files out of every listing
//! ([`SkipCovered`](gpuledger_common::history::SkipCovered)), so a query
//! reads each row once throughout; an engine that lists the bucket itself
//! may count the day twice for that moment (docs/history.md). Writers keep
//! their resume point: the merged file ends where its last part did.

use std::collections::BTreeMap;

use super::compact::{DayCompaction, merge_into};
use gpuledger_common::history::{FileName, HistoryRoot, covered};

/// The days of `table` strictly before `before` (`YYYY-MM-DD`).
pub fn closed_days(root: &HistoryRoot, table: &str, before: &str) -> std::io::Result<Vec<String>> {
    let mut days: Vec<String> = root
        .files(table)?
        .into_iter()
        .map(|f| f.date)
        .filter(|d| d.as_str() < before)
        .collect();
    days.sort();
    days.dedup();
    Ok(days)
}

/// Compacts one day of one table through `root`'s get, put and remove.
pub fn compact_day(root: &HistoryRoot, table: &str, date: &str) -> std::io::Result<DayCompaction> {
    let names: Vec<String> = root
        .files(table)?
        .into_iter()
        .filter(|f| f.date == date)
        .map(|f| f.name)
        .collect();
    let stale = covered(names.iter().map(String::as_str));
    for name in &stale {
        tracing::info!(%table, %date, file = %name, "removing a part a merged file covers");
        root.remove(table, date, name)?;
    }
    let mut groups: BTreeMap<(String, i32), Vec<FileName>> = BTreeMap::new();
    for name in names.iter().filter(|n| !stale.contains(n.as_str())) {
        if let Some(parsed) = FileName::parse(name) {
            groups
                .entry((parsed.topic.clone(), parsed.partition))
                .or_default()
                .push(parsed);
        }
    }
    let mut report = DayCompaction {
        table: table.to_owned(),
        date: date.to_owned(),
        files_before: groups.values().map(Vec::len).sum(),
        files_after: groups.len(),
        rows: 0,
    };
    for (_, mut parts) in groups {
        if parts.len() < 2 {
            continue;
        }
        parts.sort_by_key(|n| n.first_offset);
        let merged = FileName {
            topic: parts[0].topic.clone(),
            partition: parts[0].partition,
            first_offset: parts[0].first_offset,
            last_offset: parts.iter().map(|n| n.last_offset).max().unwrap_or(0),
        };
        let (Some(bytes), rows) = merge(root, table, date, &parts)? else {
            // Parts without a row: nothing to merge them into.
            continue;
        };
        root.put(table, date, &merged.render(), &bytes)?;
        report.rows += rows;
        for part in &parts {
            root.remove(table, date, &part.render())?;
        }
    }
    Ok(report)
}

/// The rows of `parts`, in order, as one Parquet file in memory (none if
/// they hold no row), and how many there are.
fn merge(
    root: &HistoryRoot,
    table: &str,
    date: &str,
    parts: &[FileName],
) -> std::io::Result<(Option<Vec<u8>>, u64)> {
    let bytes = parts.iter().map(|part| {
        root.get(table, date, &part.render())
            .map(bytes::Bytes::from)
    });
    merge_into(table, bytes, || Ok(Vec::new()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn part(root: &HistoryRoot, first: i64, last: i64) {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "offset",
            DataType::Int64,
            false,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(first..=last))],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        w.write(&batch).unwrap();
        let name = FileName {
            topic: "t".into(),
            partition: 0,
            first_offset: first,
            last_offset: last,
        };
        root.put(
            "ledger_events",
            "2026-11-01",
            &name.render(),
            &w.into_inner().unwrap(),
        )
        .unwrap();
    }

    fn names(root: &HistoryRoot) -> Vec<String> {
        let mut out: Vec<String> = root
            .files("ledger_events")
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        out.sort();
        out
    }

    fn offsets(root: &HistoryRoot, name: &str) -> Vec<i64> {
        let bytes = bytes::Bytes::from(root.get("ledger_events", "2026-11-01", name).unwrap());
        ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let column = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                column.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn parts_become_one_file_and_an_interrupted_merge_is_finished() {
        let dir = tempfile::tempdir().unwrap();
        let root = HistoryRoot::parse(dir.path().to_str().unwrap()).unwrap();
        part(&root, 0, 9);
        part(&root, 10, 19);
        part(&root, 20, 24);
        let done = compact_day(&root, "ledger_events", "2026-11-01").unwrap();
        assert_eq!((done.files_before, done.files_after, done.rows), (3, 1, 25));
        assert_eq!(names(&root), ["t-0-0-24.parquet"]);
        assert_eq!(
            offsets(&root, "t-0-0-24.parquet"),
            (0..=24).collect::<Vec<_>>()
        );

        // A compaction that stored its merged file and stopped: the parts
        // it covers are removed first, and the rest merged with it.
        part(&root, 25, 29);
        part(&root, 30, 39);
        part(&root, 0, 9); // a part the merged file covers, left behind
        let done = compact_day(&root, "ledger_events", "2026-11-01").unwrap();
        assert_eq!((done.files_before, done.files_after), (3, 1));
        assert_eq!(names(&root), ["t-0-0-39.parquet"]);
        assert_eq!(
            offsets(&root, "t-0-0-39.parquet"),
            (0..=39).collect::<Vec<_>>()
        );
        assert_eq!(
            closed_days(&root, "ledger_events", "2026-11-02").unwrap(),
            ["2026-11-01"]
        );
        assert!(
            closed_days(&root, "ledger_events", "2026-11-01")
                .unwrap()
                .is_empty()
        );
    }
}
