//! Where the Parquet history lives: one flag shared by the services that
//! write it and read it, and the listing of a table's files.

use std::path::{Path, PathBuf};

use clap::Args;

/// The history root.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// Root folder of the Parquet history.
    #[arg(
        long = "history-root",
        env = "GPULEDGER_HISTORY_ROOT",
        default_value = "var/history"
    )]
    pub root: PathBuf,
}

/// Every file in the day folders of `table`: its path and file name. A
/// missing table has none.
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
