//! `gpuledger-processor`: the processor's command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;
use gpuledger_processor::telemetry::{self, RollingPolicy, TelemetryWriterConfig};

/// Folds the gpuledger event log into decisions and Parquet history.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-processor", version)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume and write history until stopped.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    kafka: KafkaArgs,

    /// Root folder of the Parquet history.
    #[arg(long, env = "GPULEDGER_HISTORY_ROOT", default_value = "var/history")]
    history_root: PathBuf,

    /// Kafka consumer group of this processor deployment.
    #[arg(
        long,
        env = "GPULEDGER_GROUP_ID",
        default_value = "gpuledger-processor"
    )]
    group_id: String,

    /// Roll a history file once it holds this many rows.
    #[arg(long, default_value_t = 500_000)]
    flush_rows: usize,

    /// Roll a history file once its oldest row is this old (milliseconds).
    #[arg(long, default_value_t = 2_000)]
    flush_interval_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let (trigger, shutdown) = Shutdown::new();
    trigger.on_signals();
    match cli.command {
        Command::Run(args) => {
            let config = TelemetryWriterConfig {
                kafka: args.kafka,
                group_id: args.group_id,
                history_root: args.history_root,
                rolling: RollingPolicy {
                    max_rows: args.flush_rows,
                    max_age: Duration::from_millis(args.flush_interval_ms),
                },
            };
            telemetry::run(&config, shutdown).await?;
        }
    }
    Ok(())
}
