//! Logging through `tracing`: human-readable by default, JSON on request.

use std::io::IsTerminal;

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Logging flags shared by every binary.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log filter in `RUST_LOG` syntax, e.g. `info,gpuledger_processor=debug`.
    #[arg(long = "log-filter", env = "GPULEDGER_LOG", default_value = "info")]
    pub filter: String,

    /// Log line format.
    #[arg(
        long = "log-format",
        env = "GPULEDGER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub format: LogFormat,
}

impl LogArgs {
    /// Installs the global subscriber; logs go to stderr so stdout stays
    /// free for command output. Calling it twice is harmless.
    pub fn init(&self) {
        let filter = EnvFilter::try_new(&self.filter).unwrap_or_else(|_| EnvFilter::new("info"));
        // Colours only on a terminal, never in files or log collectors.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal());
        let _ = match self.format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
    }
}
