//! `gpuledger-collector`: the node agent's command line.

use std::io::Write;

use clap::{Parser, Subcommand};
use gpuledger_collector::SimulateArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;

/// Collects GPU facts on a node and streams them into Kafka.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-collector", version)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Emit events for a simulated fleet instead of reading NVML.
    Simulate(SimulateArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Simulate(args) => {
            let summary = gpuledger_collector::run_simulation(&args, shutdown).await?;
            if args.summary {
                let mut out = std::io::stdout().lock();
                serde_json::to_writer(&mut out, &summary)?;
                writeln!(out)?;
            }
        }
    }
    Ok(())
}
