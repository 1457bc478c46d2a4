//! `gpuledger-query`: the query service's command line.

use std::io::Write;
use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use gpuledger_common::auth::{TokenArg, Tokens};
use gpuledger_common::history::HistoryArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;
use gpuledger_common::tls::TlsArgs;
use gpuledger_query::QueryConfig;
use gpuledger_query::limits::Limits;
use gpuledger_query::pg::PgAuth;

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

    /// Address of the PostgreSQL wire protocol (the password is a token);
    /// port 0 picks a free one (printed on stdout). `off` serves none.
    #[arg(
        long,
        env = "GPULEDGER_QUERY_PG_LISTEN",
        default_value = "127.0.0.1:5433"
    )]
    pg_listen: PgListen,

    /// Memory all running queries may hold together (MiB).
    #[arg(long, env = "GPULEDGER_QUERY_MEMORY_MB", default_value_t = 2048)]
    memory_limit_mb: usize,

    /// How long one query may run (seconds).
    #[arg(long, env = "GPULEDGER_QUERY_TIMEOUT_S", default_value_t = 60)]
    query_timeout_s: u64,

    /// Memory one query may hold (MiB), within --memory-limit-mb; default
    /// a quarter of it.
    #[arg(long, env = "GPULEDGER_QUERY_MEMORY_MB")]
    query_memory_mb: Option<usize>,

    /// Queries of all team leads together that run at once.
    #[arg(long, env = "GPULEDGER_LEAD_QUERIES", default_value_t = 4)]
    lead_queries: usize,

    /// Queries of admin and finance tokens together that run at once.
    #[arg(long, env = "GPULEDGER_READER_QUERIES", default_value_t = 8)]
    reader_queries: usize,

    /// The largest value `repeat`, `lpad`, `rpad` or `array_repeat` may
    /// make (MiB).
    #[arg(long, env = "GPULEDGER_MAX_VALUE_MB", default_value_t = 16)]
    max_value_mb: usize,

    /// The largest answer one query may send (MiB).
    #[arg(long, env = "GPULEDGER_MAX_RESULT_MB", default_value_t = 1024)]
    max_result_mb: usize,

    #[command(flatten)]
    tls: TlsArgs,

    /// How a PostgreSQL login proves its token: `scram` (SCRAM-SHA-256;
    /// the token never crosses the wire) or `cleartext`.
    #[arg(long, env = "GPULEDGER_PG_AUTH", value_enum, default_value_t = PgAuth::Scram)]
    pg_auth: PgAuth,

    /// With TLS, still let PostgreSQL clients connect without it.
    #[arg(long, env = "GPULEDGER_PG_ALLOW_PLAINTEXT")]
    pg_allow_plaintext: bool,

    /// Tokens: `admin:TOKEN`, `finance:TOKEN`, `lead:TENANT:TOKEN`
    /// (repeatable, or comma-separated in the environment). With none, every
    /// caller reads every tenant: for a local set-up only.
    #[arg(
        long = "api-token",
        env = "GPULEDGER_QUERY_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_tokens: Vec<TokenArg>,
}

impl ServeArgs {
    fn limits(&self) -> Limits {
        let memory = self.memory_limit_mb * 1024 * 1024;
        let defaults = Limits::for_memory(memory);
        Limits {
            query_memory_bytes: self
                .query_memory_mb
                .map_or(defaults.query_memory_bytes, |mb| (mb << 20).min(memory)),
            lead_queries: self.lead_queries,
            reader_queries: self.reader_queries,
            max_value_bytes: self.max_value_mb << 20,
            max_result_bytes: self.max_result_mb << 20,
        }
    }
}

/// `--pg-listen`: an address, or `off`.
#[derive(Debug, Clone)]
struct PgListen(Option<SocketAddr>);

impl std::str::FromStr for PgListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "off" {
            return Ok(PgListen(None));
        }
        s.parse()
            .map(|addr| PgListen(Some(addr)))
            .map_err(|e| format!("{s:?} is neither an address (127.0.0.1:5433) nor `off`: {e}"))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Serve(args) => {
            let config = QueryConfig {
                history_root: args.history.open().map_err(anyhow::Error::msg)?,
                listen: args.listen,
                pg_listen: args.pg_listen.0,
                memory_limit_bytes: args.memory_limit_mb * 1024 * 1024,
                query_timeout: std::time::Duration::from_secs(args.query_timeout_s),
                tokens: Tokens::parse(&args.api_tokens).map_err(anyhow::Error::msg)?,
                limits: args.limits(),
                tls: args.tls.server().map_err(anyhow::Error::msg)?,
                pg_auth: args.pg_auth,
                pg_allow_plaintext: args.pg_allow_plaintext,
            };
            let scheme = if config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            gpuledger_query::run(&config, shutdown, |bound| {
                // The first stdout line is the HTTP address, the second the
                // PostgreSQL one, for scripts and tests.
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "listening on {scheme}://{}", bound.http);
                if let Some(postgres) = bound.postgres {
                    let _ = writeln!(out, "postgres listening on {postgres}");
                }
                let _ = out.flush();
            })
            .await?;
        }
    }
    Ok(())
}
