//! `gpuledger-collector`: the node agent's command line.

use std::io::Write;

use clap::{Parser, Subcommand};
use gpuledger_collector::{SimulateArgs, job};
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
    /// Read this node's GPUs through NVML and deliver what they report.
    Run(Box<gpuledger_collector::agent::RunArgs>),
    /// Emit events for a simulated fleet instead of reading NVML.
    Simulate(Box<SimulateArgs>),
    /// Job lifecycle events from scheduler hooks (Slurm prolog/epilog).
    #[command(subcommand)]
    Job(JobCommand),
}

#[derive(Debug, Subcommand)]
enum JobCommand {
    /// An attempt started (prolog).
    Start(Box<job::StartArgs>),
    /// An attempt ended (epilog): `--exit CODE[:SIGNAL]` or `--state`.
    End(Box<job::EndArgs>),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Run(args) => {
            if let Err(e) = gpuledger_collector::agent::run(&args, shutdown).await {
                // One line that says what failed and what to do about it.
                let _ = writeln!(std::io::stderr().lock(), "gpuledger-collector: {e}");
                std::process::exit(e.exit_code());
            }
        }
        Command::Simulate(args) => {
            let summary = match gpuledger_collector::run_simulation(&args, shutdown).await {
                Ok(summary) => summary,
                Err(e @ gpuledger_collector::Error::Config(_)) => {
                    // Settings that do not work: one line, exit code 2.
                    let _ = writeln!(std::io::stderr().lock(), "gpuledger-collector: {e}");
                    std::process::exit(2);
                }
                Err(e) => return Err(e.into()),
            };
            if args.summary {
                let mut out = std::io::stdout().lock();
                serde_json::to_writer(&mut out, &summary)?;
                writeln!(out)?;
            }
        }
        Command::Job(JobCommand::Start(args)) => {
            let event = job::start_event(&args.job, &args.start);
            gpuledger_collector::send_one(&args.kafka, &event).await?;
            writeln!(std::io::stdout().lock(), "{}", event.to_json_string())?;
        }
        Command::Job(JobCommand::End(args)) => {
            let event = job::end_event(&args.job, &args.end).map_err(anyhow::Error::msg)?;
            gpuledger_collector::send_one(&args.kafka, &event).await?;
            writeln!(std::io::stdout().lock(), "{}", event.to_json_string())?;
        }
    }
    Ok(())
}
