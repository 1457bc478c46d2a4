//! Where the Parquet history lives: one flag shared by the services that
//! write it and read it, and the listing, writing and removal of a table's
//! files under a local folder or (feature `object-store`) an `s3://` URL.

#[cfg(feature = "object-store")]
mod covering;
#[cfg(feature = "object-store")]
mod object;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;

#[cfg(feature = "object-store")]
pub use covering::SkipCovered;
#[cfg(feature = "object-store")]
pub use object::ObjectRoot;

/// The parts of a history file name:
/// `<topic>-<partition>-<first offset>-<last offset>.parquet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileName {
    pub topic: String,
    pub partition: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

impl FileName {
    /// The file name.
    pub fn render(&self) -> String {
        format!(
            "{}-{}-{}-{}.parquet",
            self.topic, self.partition, self.first_offset, self.last_offset
        )
    }

    /// Reads a file name back; `None` for anything else (temporary files,
    /// files from other tools).
    pub fn parse(name: &str) -> Option<FileName> {
        let stem = name.strip_suffix(".parquet")?;
        let (rest, last) = stem.rsplit_once('-')?;
        let (rest, first) = rest.rsplit_once('-')?;
        let (topic, partition) = rest.rsplit_once('-')?;
        let name = FileName {
            topic: topic.to_owned(),
            partition: partition.parse().ok()?,
            first_offset: first.parse().ok()?,
            last_offset: last.parse().ok()?,
        };
        (name.first_offset <= name.last_offset && !name.topic.is_empty()).then_some(name)
    }

    /// Whether `other` holds this file's rows: the same topic and
    /// partition, and an offset range around this one's.
    pub fn covered_by(&self, other: &FileName) -> bool {
        self.topic == other.topic
            && self.partition == other.partition
            && other.first_offset <= self.first_offset
            && self.last_offset <= other.last_offset
            && self != other
    }
}

/// Which of one day folder's files another file of the folder covers (see
/// [`FileName::covered_by`]). Compaction on an object store writes a
/// day's merged file before it removes the parts, and nothing else makes
/// files overlap; a reader that skips covered files reads every row once,
/// whenever it lists the folder.
pub fn covered<'a>(names: impl IntoIterator<Item = &'a str>) -> HashSet<&'a str> {
    let mut by_partition: BTreeMap<(String, i32), Vec<(FileName, &'a str)>> = BTreeMap::new();
    for name in names {
        if let Some(parsed) = FileName::parse(name) {
            by_partition
                .entry((parsed.topic.clone(), parsed.partition))
                .or_default()
                .push((parsed, name));
        }
    }
    let mut out = HashSet::new();
    for files in by_partition.values_mut() {
        // By first offset, the widest first: a file is covered when one
        // before it reaches as far.
        files.sort_by_key(|(n, _)| (n.first_offset, std::cmp::Reverse(n.last_offset)));
        let mut reach = i64::MIN;
        for (name, text) in files.iter() {
            if name.last_offset <= reach {
                out.insert(*text);
            }
            reach = reach.max(name.last_offset);
        }
    }
    out
}

/// The history root.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// Root of the Parquet history: a local folder, or `s3://bucket/prefix`
    /// (credentials, region and endpoint from the usual `AWS_*`
    /// environment variables; see docs/history.md).
    #[arg(
        long = "history-root",
        env = "GPULEDGER_HISTORY_ROOT",
        default_value = "var/history"
    )]
    pub root: PathBuf,
}

impl HistoryArgs {
    /// The root the flag names; an object-store URL this build cannot use,
    /// or one that does not parse, is an error naming it.
    pub fn open(&self) -> Result<HistoryRoot, String> {
        HistoryRoot::parse(&self.root.to_string_lossy())
    }
}

/// A history root: a local folder or a prefix in an object store.
#[derive(Debug, Clone)]
pub enum HistoryRoot {
    Local(PathBuf),
    #[cfg(feature = "object-store")]
    Object(std::sync::Arc<ObjectRoot>),
}

/// One history file, as a listing gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryFile {
    /// The day folder's date, `YYYY-MM-DD`.
    pub date: String,
    /// The file name.
    pub name: String,
    pub size: u64,
    pub modified: Option<SystemTime>,
}

impl HistoryRoot {
    /// `s3://bucket/prefix` or a local path.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.contains("://") {
            #[cfg(feature = "object-store")]
            return ObjectRoot::parse(text).map(|r| HistoryRoot::Object(std::sync::Arc::new(r)));
            #[cfg(not(feature = "object-store"))]
            return Err(format!(
                "history root {text}: this build reads local folders only"
            ));
        }
        Ok(HistoryRoot::Local(PathBuf::from(text)))
    }

    /// The local folder, if the history is local.
    pub fn local(&self) -> Option<&Path> {
        match self {
            HistoryRoot::Local(path) => Some(path),
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(_) => None,
        }
    }

    /// Every file in the day folders of `table` (none for a missing table).
    pub fn files(&self, table: &str) -> std::io::Result<Vec<HistoryFile>> {
        match self {
            HistoryRoot::Local(root) => {
                let mut out = Vec::new();
                for (path, name) in day_files(root, table)? {
                    let Some(date) = day_of(&path) else { continue };
                    // A file removed since the folder was read is not listed.
                    let Ok(meta) = std::fs::metadata(&path) else {
                        continue;
                    };
                    out.push(HistoryFile {
                        date,
                        name,
                        size: meta.len(),
                        modified: meta.modified().ok(),
                    });
                }
                Ok(out)
            }
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(root) => root.files(table),
        }
    }

    /// Stores `bytes` as `<table>/date=<date>/<name>`, durably and whole:
    /// a reader sees all of it or nothing. Locally: a temporary name,
    /// fsync, rename, fsync of the folder (and of the table's, for a new
    /// day), under the table's shared lock
    /// (compaction takes it exclusively).
    pub fn put(&self, table: &str, date: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            HistoryRoot::Local(root) => {
                let lock = lock_file(root, table)?;
                lock.lock_shared()?;
                let dir = day_dir(root, table, date);
                if !dir.exists() {
                    std::fs::create_dir_all(&dir)?;
                    // A new day's folder is itself an entry of the table's.
                    if let Some(table_dir) = dir.parent() {
                        std::fs::File::open(table_dir)?.sync_all()?;
                    }
                }
                let tmp = dir.join(format!(".{name}.tmp"));
                let mut file = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut file, bytes)?;
                file.sync_all()?;
                drop(file);
                std::fs::rename(&tmp, dir.join(name))?;
                std::fs::File::open(&dir)?.sync_all()?;
                Ok(())
            }
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(root) => root.put(table, date, name, bytes.to_vec()),
        }
    }

    /// The bytes of `<table>/date=<date>/<name>`.
    pub fn get(&self, table: &str, date: &str, name: &str) -> std::io::Result<Vec<u8>> {
        match self {
            HistoryRoot::Local(root) => std::fs::read(day_dir(root, table, date).join(name)),
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(root) => root.get(table, date, name),
        }
    }

    /// Removes `<table>/date=<date>/<name>`; a file already gone is fine.
    pub fn remove(&self, table: &str, date: &str, name: &str) -> std::io::Result<()> {
        match self {
            HistoryRoot::Local(root) => {
                match std::fs::remove_file(day_dir(root, table, date).join(name)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            }
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(root) => root.remove(table, date, name),
        }
    }
}

impl std::fmt::Display for HistoryRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HistoryRoot::Local(path) => write!(f, "{}", path.display()),
            #[cfg(feature = "object-store")]
            HistoryRoot::Object(root) => write!(f, "{}", root.url()),
        }
    }
}

/// The folder of one day of one table: `<root>/<table>/date=YYYY-MM-DD`.
pub fn day_dir(root: &Path, table: &str, date: &str) -> PathBuf {
    root.join(table).join(format!("date={date}"))
}

/// The table's lock file in a local history; writers take it shared,
/// compaction exclusive.
pub fn lock_file(root: &Path, table: &str) -> std::io::Result<std::fs::File> {
    let dir = root.join(table);
    std::fs::create_dir_all(&dir)?;
    std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))
}

/// The date of the day folder a file sits in.
fn day_of(path: &Path) -> Option<String> {
    let folder = path.parent()?.file_name()?.to_str()?;
    folder.strip_prefix("date=").map(str::to_owned)
}

/// Every file in the day folders of `table` in a local history: its path
/// and file name. A missing table has none.
pub fn day_files(root: &Path, table: &str) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let days = match std::fs::read_dir(root.join(table)) {
        Ok(days) => days,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for day in days {
        let day = day?;
        if !day.file_type()?.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(day.path())? {
            let file = file?;
            let name = file.file_name().to_string_lossy().into_owned();
            out.push((file.path(), name));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_root_puts_lists_and_removes_whole_files() {
        let dir = std::env::temp_dir().join(format!("gpuledger-history-{}", std::process::id()));
        let root = HistoryRoot::parse(dir.to_str().unwrap()).unwrap();
        assert_eq!(root.local(), Some(dir.as_path()));
        assert!(root.files("t").unwrap().is_empty());
        root.put("t", "2026-11-01", "a.parquet", b"abc").unwrap();
        let files = root.files("t").unwrap();
        assert_eq!(files.len(), 1, "no temporary file is left: {files:?}");
        assert_eq!(
            (
                files[0].date.as_str(),
                files[0].name.as_str(),
                files[0].size
            ),
            ("2026-11-01", "a.parquet", 3)
        );
        root.remove("t", "2026-11-01", "a.parquet").unwrap();
        root.remove("t", "2026-11-01", "a.parquet").unwrap();
        assert!(root.files("t").unwrap().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn names_round_trip_even_with_dashes_in_the_topic() {
        let name = FileName {
            topic: "e2e-7.gpuledger.telemetry".into(),
            partition: 3,
            first_offset: 100,
            last_offset: 199,
        };
        assert_eq!(name.render(), "e2e-7.gpuledger.telemetry-3-100-199.parquet");
        assert_eq!(FileName::parse(&name.render()), Some(name));
        assert_eq!(FileName::parse(".tmp-x.parquet"), None);
        assert_eq!(FileName::parse("t-1-9-3.parquet"), None);
        assert_eq!(FileName::parse("t-1-2-3.parquet.tmp"), None);
    }

    #[test]
    fn a_merged_file_covers_its_parts_and_nothing_else() {
        let names = [
            "t-0-0-9.parquet",
            "t-0-10-19.parquet",
            "t-0-0-19.parquet", // merged, its parts not yet removed
            "t-0-20-29.parquet",
            "t-1-0-9.parquet", // another partition
            "u-0-5-5.parquet", // another topic
            "notes.txt",
        ];
        let mut got: Vec<&str> = covered(names).into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, ["t-0-0-9.parquet", "t-0-10-19.parquet"]);
        assert!(covered(["t-0-0-9.parquet", "t-0-10-19.parquet"]).is_empty());
        // A merge of merges covers both generations.
        let mut got: Vec<&str> = covered([
            "t-0-0-19.parquet",
            "t-0-20-29.parquet",
            "t-0-0-29.parquet",
            "t-0-0-9.parquet",
        ])
        .into_iter()
        .collect();
        got.sort_unstable();
        assert_eq!(
            got,
            ["t-0-0-19.parquet", "t-0-0-9.parquet", "t-0-20-29.parquet"]
        );
    }

    #[cfg(not(feature = "object-store"))]
    #[test]
    fn an_object_store_url_needs_the_feature() {
        let e = HistoryRoot::parse("s3://bucket/history").unwrap_err();
        assert!(e.contains("local folders only"), "{e}");
    }
}
