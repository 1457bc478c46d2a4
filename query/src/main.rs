//! `gpuledger-query`: the query service's command line.

use std::io::Write;
use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use gpuledger_common::auth::{TokenSpec, Tokens};
use gpuledger_common::history::HistoryArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;
use gpuledger_query::QueryConfig;

/// SQL over the gpuledger Parquet history.
#[derive(Debug, Parser)]
#[command(name = "gpuledger-query", version)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API until stopped.
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    history: HistoryArgs,

    /// Address of the HTTP API; port 0 picks a free one (printed on stdout).
    #[arg(long, env = "GPULEDGER_QUERY_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Memory all running queries may hold together (MiB).
    #[arg(long, env = "GPULEDGER_QUERY_MEMORY_MB", default_value_t = 2048)]
    memory_limit_mb: usize,

    /// How long one query may run (seconds).
    #[arg(long, env = "GPULEDGER_QUERY_TIMEOUT_S", default_value_t = 60)]
    query_timeout_s: u64,

    /// Tokens: `admin:TOKEN`, `finance:TOKEN`, `lead:TENANT:TOKEN`
    /// (repeatable, or comma-separated in the environment). With none, every
    /// caller reads every tenant: for a local set-up only.
    #[arg(
        long = "api-token",
        env = "GPULEDGER_QUERY_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_tokens: Vec<TokenSpec>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Serve(args) => {
            let config = QueryConfig {
                history_root: args.history.root,
                listen: args.listen,
                memory_limit_bytes: args.memory_limit_mb * 1024 * 1024,
                query_timeout: std::time::Duration::from_secs(args.query_timeout_s),
                tokens: Tokens::new(&args.api_tokens),
            };
            gpuledger_query::run(&config, shutdown, |addr| {
                // The first stdout line is the address, for scripts and tests.
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "listening on http://{addr}");
                let _ = out.flush();
            })
            .await?;
        }
    }
    Ok(())
}
