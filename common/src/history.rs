//! Where the Parquet history lives: one flag shared by the services that
//! write it and read it.

use std::path::PathBuf;

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
