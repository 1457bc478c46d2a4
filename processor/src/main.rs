//! `gpuledger-processor`: the processor's command line.

use std::time::Duration;

use clap::{Parser, Subcommand};
use gpuledger_common::history::HistoryArgs;
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;
use gpuledger_processor::ledger::LedgerConfig;
use gpuledger_processor::ledger_worker::{self, LedgerWorkerConfig};
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

    #[command(flatten)]
    history: HistoryArgs,

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

    /// How long an admission holds its GE if the attempt never starts (minutes).
    #[arg(long, env = "GPULEDGER_HOLD_TTL_MINUTES", default_value_t = 15)]
    hold_ttl_minutes: i64,

    /// Ledger events per decision transaction at most.
    #[arg(long, default_value_t = 500)]
    ledger_batch: usize,

    /// How long a decision transaction waits to fill (milliseconds).
    #[arg(long, default_value_t = 50)]
    ledger_linger_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Run(args) => {
            let ledger = LedgerWorkerConfig {
                kafka: args.kafka.clone(),
                group_id: format!("{}-ledger", args.group_id),
                ledger: LedgerConfig {
                    hold_ttl_micros: args.hold_ttl_minutes * 60 * 1_000_000,
                },
                max_batch: args.ledger_batch,
                linger: Duration::from_millis(args.ledger_linger_ms),
            };
            let config = TelemetryWriterConfig {
                kafka: args.kafka,
                group_id: args.group_id,
                history_root: args.history.root,
                rolling: RollingPolicy {
                    max_rows: args.flush_rows,
                    max_age: Duration::from_millis(args.flush_interval_ms),
                },
            };
            // Two tasks; the first to fail stops the process (a restart
            // resumes both from their durable progress).
            let telemetry_shutdown = shutdown.clone();
            let mut telemetry =
                tokio::spawn(async move { telemetry::run(&config, telemetry_shutdown).await });
            let mut ledger =
                tokio::spawn(async move { ledger_worker::run(&ledger, shutdown).await });
            tokio::select! {
                done = &mut telemetry => {
                    done??;
                    ledger.await??;
                }
                done = &mut ledger => {
                    done??;
                    telemetry.await??;
                }
            }
        }
    }
    Ok(())
}
