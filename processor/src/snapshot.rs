//! Snapshots of the ledger state, so a restart replays only the tail of a
//! partition. A snapshot is written after a decision transaction commits
//! and holds the state after every record below `next_offset`; it is used
//! only when that offset is not past the group's committed offset.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;

/// What a snapshot file holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub topic: String,
    pub partition: i32,
    /// The state is that after applying every record below this offset.
    pub next_offset: i64,
    pub ledger: Ledger,
    /// Set when every history row caused below `next_offset` was durable as
    /// the snapshot was written (the ledger worker flushes first); `None`
    /// when the writer kept no history (`replay`).
    #[serde(default)]
    pub history: Option<HistoryMark>,
}

/// The ledger history as a snapshot saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryMark {
    /// The highest offset `ledger_events` held then (`None`: no row yet).
    pub frontier: Option<i64>,
}

impl Snapshot {
    /// Whether the state may start from this snapshot given the history's
    /// frontier now: every row the snapshot skips must still be on disk.
    pub fn fits_history(&self, frontier_now: Option<i64>) -> bool {
        match self.history {
            // Rows below the snapshot were durable then; the history must
            // not have lost files since.
            Some(mark) => frontier_now >= mark.frontier,
            // No promise: the history must reach the snapshot's offset.
            None => frontier_now.map_or(0, |f| f + 1) >= self.next_offset,
        }
    }
}

/// The layout of the ledger state in a snapshot file. Raise it whenever
/// the serialized state changes meaning or shape: a file of another
/// version is passed over and the partition replayed from its start, so no
/// build ever needs to read an older state.
///
/// 2: the ledger as `state`, `records` and `applied`; alerts as records.
pub const FORMAT_VERSION: u32 = 2;

/// A snapshot file: its format, then the snapshot.
#[derive(Serialize)]
struct FileOut<'a> {
    format_version: u32,
    snapshot: &'a Snapshot,
}

#[derive(Deserialize)]
struct FileIn {
    format_version: u32,
    snapshot: Snapshot,
}

/// The snapshot file of one partition.
pub fn path(dir: &Path, topic: &str, partition: i32) -> PathBuf {
    dir.join(format!("{topic}-{partition}.snapshot.json"))
}

/// Writes a snapshot durably: temporary file, fsync, rename, fsync of the folder.
pub fn save(dir: &Path, snapshot: &Snapshot) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = path(dir, &snapshot.topic, snapshot.partition);
    let tmp = target.with_extension("json.tmp");
    let mut file = std::io::BufWriter::new(File::create(&tmp)?);
    let out = FileOut {
        format_version: FORMAT_VERSION,
        snapshot,
    };
    serde_json::to_writer(&mut file, &out).map_err(std::io::Error::other)?;
    let file = file
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &target)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Reads a partition's snapshot; `Ok(None)` when there is none.
pub fn load(dir: &Path, topic: &str, partition: i32) -> std::io::Result<Option<Snapshot>> {
    let file = match File::open(path(dir, topic, partition)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // A snapshot only saves time: one this build cannot read (another
    // version's state, a damaged file) is passed over, and the partition
    // is replayed from its start.
    let snapshot = match serde_json::from_reader::<_, FileIn>(std::io::BufReader::new(file)) {
        Ok(read) if read.format_version == FORMAT_VERSION => read.snapshot,
        Ok(read) => {
            tracing::warn!(
                topic,
                partition,
                found = read.format_version,
                expected = FORMAT_VERSION,
                "ledger snapshot of another format; replaying from the start"
            );
            return Ok(None);
        }
        Err(e) => {
            tracing::warn!(topic, partition, error = %e, "ledger snapshot does not read; replaying from the start");
            return Ok(None);
        }
    };
    Ok((snapshot.topic == topic && snapshot.partition == partition).then_some(snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LedgerConfig;

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path(), "t", 0).unwrap().is_none());
        let snapshot = Snapshot {
            topic: "t".into(),
            partition: 0,
            next_offset: 42,
            ledger: Ledger::new(LedgerConfig::default()),
            history: Some(HistoryMark { frontier: Some(40) }),
        };
        save(dir.path(), &snapshot).unwrap();
        let back = load(dir.path(), "t", 0).unwrap().unwrap();
        assert_eq!((back.next_offset, &back.ledger), (42, &snapshot.ledger));
        assert!(load(dir.path(), "t", 1).unwrap().is_none());
        // A file this build cannot read is passed over, not an error.
        std::fs::write(path(dir.path(), "t", 0), "{\"topic\":\"t\",\"ledger\":[]}").unwrap();
        assert!(load(dir.path(), "t", 0).unwrap().is_none());
        // Nor is one of another format, even when its state would read.
        save(dir.path(), &snapshot).unwrap();
        let written = std::fs::read_to_string(path(dir.path(), "t", 0)).unwrap();
        let other = written.replacen(
            &format!("\"format_version\":{FORMAT_VERSION}"),
            &format!("\"format_version\":{}", FORMAT_VERSION + 1),
            1,
        );
        assert_ne!(other, written);
        std::fs::write(path(dir.path(), "t", 0), other).unwrap();
        assert!(load(dir.path(), "t", 0).unwrap().is_none());
    }

    #[test]
    fn a_snapshot_fits_the_history_it_was_written_with() {
        let at = |history| Snapshot {
            topic: "t".into(),
            partition: 0,
            next_offset: 100,
            ledger: Ledger::new(LedgerConfig::default()),
            history,
        };
        // Written by the worker after a flush: rows up to 40 were all there
        // were (offsets 41..99 caused none).
        let flushed = at(Some(HistoryMark { frontier: Some(40) }));
        assert!(flushed.fits_history(Some(40)));
        assert!(flushed.fits_history(Some(120)));
        assert!(!flushed.fits_history(Some(39)), "the history lost files");
        assert!(!flushed.fits_history(None));
        // Written by `replay`, which keeps no history.
        let replayed = at(None);
        assert!(replayed.fits_history(Some(99)));
        assert!(!replayed.fits_history(Some(98)));
    }
}
