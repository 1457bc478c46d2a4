//! Snapshots of the ledger state, so a restart replays only the tail of a
//! partition. A snapshot is written after a decision transaction commits
//! and holds the state after every record below `next_offset`; it is used
//! only when that offset is not past the group's committed offset.

use std::fs::File;
use std::io::Write;
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
    let mut file = File::create(&tmp)?;
    serde_json::to_writer(&mut file, snapshot).map_err(std::io::Error::other)?;
    file.flush()?;
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
    let snapshot: Snapshot =
        serde_json::from_reader(std::io::BufReader::new(file)).map_err(std::io::Error::other)?;
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
        };
        save(dir.path(), &snapshot).unwrap();
        let back = load(dir.path(), "t", 0).unwrap().unwrap();
        assert_eq!((back.next_offset, back.ledger), (42, snapshot.ledger));
        assert!(load(dir.path(), "t", 1).unwrap().is_none());
    }
}
