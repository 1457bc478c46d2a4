//! Where history files live and what their names say.

use std::collections::HashMap;

use gpuledger_common::history::HistoryRoot;

pub use gpuledger_common::history::FileName;
pub use gpuledger_common::history::day_dir;

/// The highest offset already durable per partition of `topic` in `table`.
pub fn durable_offsets(
    root: &HistoryRoot,
    table: &str,
    topic: &str,
) -> std::io::Result<HashMap<i32, i64>> {
    let mut out = HashMap::new();
    for file in root.files(table)? {
        let Some(name) = FileName::parse(&file.name) else {
            continue;
        };
        if name.topic == topic {
            let entry = out.entry(name.partition).or_insert(name.last_offset);
            *entry = (*entry).max(name.last_offset);
        }
    }
    Ok(out)
}

/// Removes the files of `topic` in `table` that start beyond `frontier`
/// (the highest durable offset per partition of the table whose file is
/// written last): the first half of a write a crash cut short. The records
/// are read again and the files written anew. Only partition `only`'s
/// files are looked at, if given (another instance may be writing the
/// others). Returns how many were removed.
pub fn remove_beyond(
    root: &HistoryRoot,
    table: &str,
    topic: &str,
    frontier: &HashMap<i32, i64>,
    only: Option<i32>,
) -> std::io::Result<usize> {
    let mut removed = 0;
    for file in root.files(table)? {
        let Some(name) = FileName::parse(&file.name) else {
            continue;
        };
        let beyond = frontier
            .get(&name.partition)
            .is_none_or(|f| name.first_offset > *f);
        let mine = only.is_none_or(|p| p == name.partition);
        if name.topic == topic && beyond && mine {
            tracing::warn!(%table, date = %file.date, file = %file.name, "removing a file of an unfinished write");
            root.remove(table, &file.date, &file.name)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes temporary files a crash left behind in `table` (a local write
/// that never reached its rename; object stores have none), of partition
/// `only` if given. Returns how many were removed.
pub fn remove_leftovers(
    root: &HistoryRoot,
    table: &str,
    only: Option<i32>,
) -> std::io::Result<usize> {
    let mut removed = 0;
    for file in root.files(table)? {
        let Some(inner) = file
            .name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
        else {
            continue;
        };
        let mine = only.is_none_or(|p| FileName::parse(inner).is_some_and(|n| n.partition == p));
        if inner.ends_with(".parquet") && mine {
            root.remove(table, &file.date, &file.name)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_offsets_take_the_highest_per_partition() {
        let dir = tempfile::tempdir().unwrap();
        let root = HistoryRoot::Local(dir.path().to_owned());
        for (date, file) in [
            ("2026-11-01", "t-0-0-9.parquet"),
            ("2026-11-02", "t-0-10-19.parquet"),
            ("2026-11-01", "t-1-0-4.parquet"),
            ("2026-11-02", "other-0-0-99.parquet"),
            ("2026-11-02", ".t-0-20-29.parquet.tmp"),
        ] {
            let day = day_dir(dir.path(), "samples", date);
            std::fs::create_dir_all(&day).unwrap();
            std::fs::write(day.join(file), b"").unwrap();
        }
        let offsets = durable_offsets(&root, "samples", "t").unwrap();
        assert_eq!(offsets, HashMap::from([(0, 19), (1, 4)]));
        assert_eq!(remove_leftovers(&root, "samples", Some(1)).unwrap(), 0);
        assert_eq!(remove_leftovers(&root, "samples", Some(0)).unwrap(), 1);
        assert_eq!(remove_leftovers(&root, "samples", None).unwrap(), 0);
        assert!(durable_offsets(&root, "nothing", "t").unwrap().is_empty());
    }
}
