//! `gpuledger-processor`: the processor's command line.

use std::time::Duration;

use clap::{Parser, Subcommand};
use gpuledger_common::history::HistoryArgs;
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_common::log::LogArgs;
use gpuledger_common::shutdown::Shutdown;
use std::io::Write;

use gpuledger_processor::api::auth::{TokenArg, Tokens};
use gpuledger_processor::api::k8s::K8sMapping;
use gpuledger_processor::api::{self, ApiState, waiters};
use gpuledger_processor::burst_hook::{BurstHook, BurstHookConfig};
use gpuledger_processor::generate;
use gpuledger_processor::history::compact;
use gpuledger_processor::ledger_worker::{self, AnswerAt, LedgerWorkerConfig};
use gpuledger_processor::replay::{self, ReplayConfig};
use gpuledger_processor::rules::LedgerRulesArgs;
use gpuledger_processor::telemetry::{self, RollingPolicy, TelemetryWriterConfig, Until};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_decommits` in mimalloc's `mi_option_t` (the sixth
/// option in both its v2 and v3 headers; the build uses v3).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (the sixteenth in both
/// its v2 and v3 headers, just before `mi_option_use_numa_nodes`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How memory is handed out and back, for the telemetry writer, which
/// allocates every sample's columns on the consumer's thread (and
/// librdkafka every message's, through the same allocator) and frees them
/// on others':
///
/// - by default mimalloc hands freed memory back to the OS by
///   decommitting it, and the next batch faults it in again, zeroed page
///   by page; it resets it instead (`MADV_FREE`: the pages stay mapped
///   until the kernel needs them, and are reused at no cost meanwhile);
///   `MIMALLOC_PURGE_DECOMMITS` in the environment still wins;
/// - mimalloc asks for transparent huge pages, and where the kernel has
///   free ones (right after another large process exits, say) every first
///   touch of a fresh page zeroed 2 MiB: the writer spent a second of
///   system time per 10 M samples doing so, half its system time. The
///   process opts out of them (`PR_SET_THP_DISABLE`, which covers memory
///   mapped before `main` too) unless `MIMALLOC_ALLOW_THP` is set, or
///   `ledger_only` says the command only folds the ledger: the ledger's
///   tables are large and read at random, one miss of the address cache
///   (TLB) per lookup with 4 KiB pages, and 2 MiB pages made `fold` of the
///   benchmark month 5–10 % faster (docs/bench-journal/ledger-replay.md);
/// - a command that only folds the ledger never hands memory back
///   (`MIMALLOC_PURGE_DELAY` still wins): it exits when the fold is done,
///   and the memory an applied event frees (its decisions, once written)
///   is what the next events allocate, so handing it back 10 ms later
///   only to fault it in again is wasted work (72 MiB over the first
///   20,000 events of the benchmark month); `fold` of the month was 4–6 %
///   faster by the median in some rounds, no faster in others
///   (docs/bench-journal/ledger-replay.md, "2026-12-07, later").
fn tune_allocator(ledger_only: bool) {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: sets one of mimalloc's options; any value is allowed.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
    }
    if ledger_only && std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: as above; -1 is mimalloc's "never".
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    if !ledger_only && std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a flag of this process's memory map; no memory changes.
        // A kernel without it refuses, and huge pages stay as they were.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

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
    Run(Box<RunArgs>),
    /// Write the telemetry topic's samples to history up to the end each
    /// partition has when reached, then exit: a batch load (a CronJob, or
    /// a topic's retention into a new history root). Resumes from the
    /// group's committed offsets as `run` does, and refuses to start while
    /// the group has members.
    CatchUp(CatchUpArgs),
    /// Rebuild the ledger state from offset 0 (no output to Kafka) and write
    /// the snapshots a later `run` resumes from.
    Replay(ReplayArgs),
    /// Merge the small history files of closed days, one file per day and
    /// Kafka partition, atomically for readers.
    Compact(CompactArgs),
    /// Compute a period's statement straight from an NDJSON ledger file
    /// (no Kafka, no history): an independent recomputation.
    Statement(StatementArgs),
    /// Write a simulated fleet's history (ledger and samples) straight to
    /// Parquet, for benchmarks and trials at scale.
    Generate(GenerateArgs),
    /// Fold an NDJSON ledger through the state machine in memory, once the
    /// whole file is parsed, and report the events per second (the pure
    /// replay throughput) and a digest of the decisions.
    Fold(FoldArgs),
}

impl Command {
    /// Whether the command folds the ledger and writes no telemetry.
    fn folds_ledger_only(&self) -> bool {
        matches!(
            self,
            Command::Fold(_) | Command::Statement(_) | Command::Replay(_)
        )
    }
}

#[derive(Debug, clap::Args)]
struct GenerateArgs {
    #[command(flatten)]
    history: HistoryArgs,

    /// GPUs in the fleet (whole nodes of 8).
    #[arg(long, default_value_t = 1000)]
    gpus: usize,

    /// Days of history.
    #[arg(long, default_value_t = 30)]
    days: i64,

    /// Seconds between samples (a divisor of 600).
    #[arg(long, default_value_t = 10)]
    interval_s: i64,

    /// The first day, `YYYY-MM-DD` (UTC).
    #[arg(long, default_value = "2026-11-01")]
    start: String,

    /// Everything generated follows from this.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Telemetry partitions the nodes are spread over (one file per day
    /// and partition).
    #[arg(long, default_value_t = 8)]
    partitions: usize,

    /// Topic prefix the file names carry, as the live writers' would.
    #[arg(long, default_value = "")]
    topic_prefix: String,

    /// Also write every ledger event, in order, to this file as NDJSON
    /// (the input of `fold`).
    #[arg(long)]
    ledger_ndjson: Option<std::path::PathBuf>,

    /// Stop after the ledger: no samples.
    #[arg(long)]
    ledger_only: bool,
}

/// Where a writer reads and writes: the broker, the history, and the
/// consumer group whose committed offsets it resumes from.
#[derive(Debug, clap::Args)]
struct WriterArgs {
    #[command(flatten)]
    kafka: KafkaArgs,

    #[command(flatten)]
    history: HistoryArgs,

    /// Kafka consumer group of this processor deployment (`catch-up`:
    /// that of the `run` writing the same history).
    #[arg(
        long,
        env = "GPULEDGER_GROUP_ID",
        default_value = "gpuledger-processor"
    )]
    group_id: String,
}

#[derive(Debug, clap::Args)]
struct CatchUpArgs {
    #[command(flatten)]
    writer: WriterArgs,

    /// Roll a history file once it holds this many rows.
    #[arg(long, default_value_t = 500_000)]
    flush_rows: usize,
}

#[derive(Debug, clap::Args)]
struct FoldArgs {
    /// The ledger, one event per line in the JSON form.
    #[arg(long)]
    ledger: std::path::PathBuf,

    #[command(flatten)]
    rules: LedgerRulesArgs,
}

#[derive(Debug, clap::Args)]
struct StatementArgs {
    /// The ledger, one event per line in the JSON form.
    #[arg(long)]
    ledger: std::path::PathBuf,

    /// The month, `YYYY-MM`.
    #[arg(long)]
    period: String,

    #[command(flatten)]
    rules: LedgerRulesArgs,
}

#[derive(Debug, clap::Args)]
struct CompactArgs {
    #[command(flatten)]
    history: HistoryArgs,

    /// Tables to compact (repeatable; default: every history table).
    #[arg(long = "table")]
    tables: Vec<String>,

    /// Compact the days before this one (`YYYY-MM-DD`, default: today, UTC).
    #[arg(long)]
    before: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    #[command(flatten)]
    kafka: KafkaArgs,

    /// Folder for the ledger snapshots this writes.
    #[arg(long, env = "GPULEDGER_STATE_DIR", default_value = "var/state")]
    state_dir: std::path::PathBuf,

    #[command(flatten)]
    rules: LedgerRulesArgs,

    /// Also write every decision the replay makes here, as NDJSON.
    #[arg(long)]
    decisions_out: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    writer: WriterArgs,

    /// This instance's stable name in the ledger's consumer group (Kafka
    /// static membership; in Kubernetes the StatefulSet pod's name): a
    /// restart within the session timeout (10 s) gets its partitions back
    /// without a rebalance. Without it, a restarted instance is a new
    /// member and waits for the old one's session to time out.
    #[arg(long, env = "GPULEDGER_GROUP_INSTANCE_ID")]
    group_instance_id: Option<String>,

    /// Roll a history file once it holds this many rows.
    #[arg(long, default_value_t = 500_000)]
    flush_rows: usize,

    /// Roll a history file once its oldest row is this old (milliseconds).
    #[arg(long, default_value_t = 2_000)]
    flush_interval_ms: u64,

    #[command(flatten)]
    rules: LedgerRulesArgs,

    /// Address of the control API; port 0 picks a free one (printed on stdout).
    #[arg(long, env = "GPULEDGER_API_LISTEN", default_value = "127.0.0.1:8081")]
    api_listen: std::net::SocketAddr,

    /// Control API tokens: `admin:TOKEN`, `scheduler:TOKEN`, `lead:TENANT:TOKEN`
    /// (repeatable, or comma-separated in the environment).
    #[arg(
        long = "api-token",
        env = "GPULEDGER_API_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_tokens: Vec<TokenArg>,

    /// Cluster name carried by events the control API creates.
    #[arg(long, env = "GPULEDGER_CLUSTER", default_value = "local")]
    cluster: String,

    /// Kubernetes namespace → tenant for the admission webhook, `NS=TENANT`
    /// (repeatable, or comma-separated in the environment).
    #[arg(long = "k8s-namespace", env = "GPULEDGER_K8S_NAMESPACES", value_delimiter = ',', value_parser = parse_pair)]
    k8s_namespaces: Vec<(String, String)>,

    /// Pool of pods without the `gpuledger.io/pool` annotation.
    #[arg(long, env = "GPULEDGER_K8S_DEFAULT_POOL", default_value = "default")]
    k8s_default_pool: String,

    /// Slices per whole GPU for MIG resources (7 on H100/H200/A100/B200, 4 on A30).
    #[arg(long, default_value_t = 7)]
    k8s_max_slices: i32,

    /// How long `POST /v1/admission` waits for its decision (seconds).
    #[arg(long, default_value_t = 10)]
    admission_timeout_s: u64,

    /// Append a `Clock` event per pool this often (seconds), so timers fire
    /// when nothing else happens; 0 turns the ticks off (for replaying
    /// history, for simulations and tests that own time).
    #[arg(long, env = "GPULEDGER_CLOCK_INTERVAL_S", default_value_t = 60)]
    clock_interval_s: u64,

    /// How far an admin's `event_time` may be from the control API's clock
    /// (seconds); further back needs `POST /v1/events?mode=import`. Other
    /// roles' events always get the API's time.
    #[arg(long, env = "GPULEDGER_EVENT_TIME_SKEW_S", default_value_t = 300)]
    event_time_skew_s: u64,

    /// TLS for the control API.
    #[command(flatten)]
    tls: gpuledger_common::tls::TlsArgs,

    /// Send to the DLQ any ledger event whose `event_time` is more than
    /// this many seconds after its record's Kafka timestamp: a guard for
    /// producers that write to the ledger topic without the control API.
    /// Off by default (a historical import's records are all appended
    /// now, with earlier times, which this never refuses).
    #[arg(long, env = "GPULEDGER_LEDGER_MAX_AHEAD_S")]
    ledger_max_ahead_s: Option<u64>,

    /// Compact the history's closed days (before today, UTC) this often
    /// (seconds), as `compact` does; 0 leaves it to `compact` (a CronJob).
    #[arg(long, env = "GPULEDGER_COMPACT_INTERVAL_S", default_value_t = 0)]
    compact_interval_s: u64,

    /// Folder for ledger snapshots (a restart replays only what follows them).
    #[arg(long, env = "GPULEDGER_STATE_DIR", default_value = "var/state")]
    state_dir: std::path::PathBuf,

    /// POST every `BurstTriggered` decision here as JSON (the burst
    /// provider hook), with the decision id as `Idempotency-Key`.
    #[arg(long, env = "GPULEDGER_BURST_WEBHOOK")]
    burst_webhook: Option<String>,

    /// Tries per burst hook call, the first included.
    #[arg(long, default_value_t = 6)]
    burst_webhook_attempts: u32,

    /// Wait before the first retry of a burst hook call (milliseconds; doubled each time).
    #[arg(long, default_value_t = 500)]
    burst_webhook_backoff_ms: u64,

    /// Snapshot a ledger partition after this many events (and on shutdown).
    #[arg(long, default_value_t = 10_000)]
    snapshot_every: u64,

    /// Ledger events per decision transaction at most. While one
    /// transaction commits, the next gathers up to this many events; once
    /// it is full, reading waits, so a small batch caps the ledger's
    /// throughput at this many events per commit.
    #[arg(long, default_value_t = 20_000)]
    ledger_batch: usize,

    /// How long a decision transaction waits to fill, from its first event
    /// (milliseconds). With 0 a batch commits as soon as nothing more is
    /// waiting; under load, events arriving during one commit share the
    /// next. Answers wait for it only with `--answer-at committed`.
    #[arg(long, default_value_t = 0)]
    ledger_linger_ms: u64,

    /// When an admission (or any caller waiting on the ledger) is answered:
    /// as soon as the state machine decides (`decided`; the decision is a
    /// function of the durable ledger, so the one committed is the one
    /// answered), or once the decision's transaction commits (`committed`).
    #[arg(long, value_enum, default_value_t = AnswerAt::Decided)]
    answer_at: AnswerAt,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not NAMESPACE=TENANT"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tune_allocator(cli.command.folds_ledger_only());
    cli.log.init();
    let shutdown = Shutdown::from_signals();
    match cli.command {
        Command::Statement(args) => {
            let period: gpuledger_schemas::billing::Period =
                args.period.parse().map_err(anyhow::Error::msg)?;
            let text = std::fs::read_to_string(&args.ledger)
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.ledger.display()))?;
            let config = args.rules.config();
            let statement = gpuledger_processor::offline::statement(&text, period, config)
                .map_err(anyhow::Error::msg)?;
            writeln!(std::io::stdout().lock(), "{}", statement.to_json())?;
        }
        Command::Fold(args) => {
            let text = std::fs::read_to_string(&args.ledger)
                .map_err(|e| anyhow::anyhow!("{}: {e}", args.ledger.display()))?;
            let config = args.rules.config();
            let report = gpuledger_processor::offline::throughput(&text, config)
                .map_err(anyhow::Error::msg)?;
            writeln!(
                std::io::stdout().lock(),
                "{}",
                serde_json::to_string(&report)?
            )?;
        }
        Command::Compact(args) => {
            let before = args
                .before
                .unwrap_or_else(|| gpuledger_schemas::Timestamp::now().date_string());
            let tables: Vec<String> = if args.tables.is_empty() {
                gpuledger_schemas::tables::all()
                    .into_iter()
                    .map(|(t, _)| t.to_owned())
                    .collect()
            } else {
                args.tables
            };
            let root = args.history.open().map_err(anyhow::Error::msg)?;
            let mut out = std::io::stdout().lock();
            for done in compact::compact_closed(&root, &tables, &before)? {
                writeln!(
                    out,
                    "{} {}: {} files -> {} ({} rows)",
                    done.table, done.date, done.files_before, done.files_after, done.rows
                )?;
            }
        }
        Command::Generate(args) => {
            let start: gpuledger_schemas::Timestamp =
                format!("{}T00:00:00Z", args.start)
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--start {}: {e}", args.start))?;
            let config = generate::GenerateConfig {
                history_root: args.history.open().map_err(anyhow::Error::msg)?,
                gpus: args.gpus,
                days: args.days,
                interval_s: args.interval_s,
                start,
                seed: args.seed,
                partitions: args.partitions,
                ledger_topic: gpuledger_schemas::Topic::Ledger.name(&args.topic_prefix),
                telemetry_topic: gpuledger_schemas::Topic::Telemetry.name(&args.topic_prefix),
                ledger_ndjson: args.ledger_ndjson,
                samples: !args.ledger_only,
            };
            let summary = tokio::task::block_in_place(|| generate::run(&config))?;
            writeln!(
                std::io::stdout().lock(),
                "{}",
                serde_json::to_string(&summary)?
            )?;
        }
        Command::CatchUp(args) => {
            let config = TelemetryWriterConfig {
                kafka: args.writer.kafka,
                group_id: args.writer.group_id,
                group_instance_id: None,
                history_root: args.writer.history.open().map_err(anyhow::Error::msg)?,
                rolling: RollingPolicy {
                    max_rows: args.flush_rows,
                    // Files roll by size, and the last ones at the end.
                    max_age: Duration::MAX,
                },
                until: Until::TopicEnd,
            };
            let started = std::time::Instant::now();
            let ingested = telemetry::run(&config, shutdown.clone()).await?;
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(
                &mut out,
                &serde_json::json!({
                    "samples": ingested.samples,
                    "files": ingested.files,
                    "dead_letters": ingested.dead_letters,
                    "seconds": started.elapsed().as_secs_f64(),
                }),
            )?;
            writeln!(out)?;
        }
        Command::Replay(args) => {
            let config = ReplayConfig {
                kafka: args.kafka,
                ledger: args.rules.config(),
                state_dir: args.state_dir,
                decisions_out: args.decisions_out,
            };
            let summary = tokio::task::block_in_place(|| replay::run(&config))?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "replayed {} ledger records: {} applied, {} rejected, {} duplicates, {} decisions",
                summary.events,
                summary.applied,
                summary.rejected,
                summary.duplicates,
                summary.decisions
            )?;
        }
        Command::Run(args) => {
            let writer = &args.writer;
            let history = writer.history.open().map_err(anyhow::Error::msg)?;
            let history_for_compaction = history.clone();
            let mut ledger = LedgerWorkerConfig {
                kafka: writer.kafka.clone(),
                group_id: format!("{}-ledger", writer.group_id),
                group_instance_id: args.group_instance_id.clone(),
                ledger: args.rules.config(),
                max_batch: args.ledger_batch,
                linger: Duration::from_millis(args.ledger_linger_ms),
                clock_interval: (args.clock_interval_s > 0)
                    .then(|| Duration::from_secs(args.clock_interval_s)),
                cluster: args.cluster.clone(),
                max_ahead: args.ledger_max_ahead_s.map(Duration::from_secs),
                state_dir: Some(args.state_dir.clone()),
                snapshot_every: args.snapshot_every.max(1),
                history_root: Some(history.clone()),
                history_flush: Duration::from_millis(args.flush_interval_ms),
                burst_hook: args.burst_webhook.clone().map(|url| {
                    BurstHook::spawn(BurstHookConfig {
                        url,
                        attempts: args.burst_webhook_attempts,
                        backoff: Duration::from_millis(args.burst_webhook_backoff_ms),
                        timeout: Duration::from_secs(10),
                    })
                }),
                waiters: None,
                answer: args.answer_at,
                applied: None,
            };
            let config = TelemetryWriterConfig {
                kafka: writer.kafka.clone(),
                group_id: writer.group_id.clone(),
                group_instance_id: args.group_instance_id,
                history_root: history,
                rolling: RollingPolicy {
                    max_rows: args.flush_rows,
                    max_age: Duration::from_millis(args.flush_interval_ms),
                },
                until: Until::Shutdown,
            };
            let api_state = ApiState::new(
                &writer.kafka,
                Tokens::parse(&args.api_tokens).map_err(anyhow::Error::msg)?,
                &args.cluster,
                Duration::from_secs(args.admission_timeout_s),
                K8sMapping {
                    tenants: args.k8s_namespaces.iter().cloned().collect(),
                    default_pool: args.k8s_default_pool.clone(),
                    max_slices: args.k8s_max_slices,
                },
            )?;
            let mut api_state = api_state;
            api_state.skew = api::envelopes::Skew(Duration::from_secs(args.event_time_skew_s));
            api_state.reservations = ledger.ledger.reservations;
            // This process's own decisions answer its callers directly.
            ledger.waiters = Some(api_state.waiters.clone());
            ledger.applied = Some(api_state.applied.clone());
            let listener = tokio::net::TcpListener::bind(args.api_listen)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot listen on {} for the control API: {e} (set --api-listen)",
                        args.api_listen
                    )
                })?;
            {
                // The first stdout line is the API address, for scripts and tests.
                let mut out = std::io::stdout().lock();
                let scheme = if args.tls.tls_cert.is_some() {
                    "https"
                } else {
                    "http"
                };
                writeln!(
                    out,
                    "control API listening on {scheme}://{}",
                    listener.local_addr()?
                )?;
                out.flush()?;
            }
            if args.api_tokens.is_empty() {
                tracing::warn!("no --api-token given: every control API call will be refused");
            }

            // The first task to fail stops the process; a restart resumes
            // each from its durable progress.
            let mut tasks = tokio::task::JoinSet::new();
            let s = shutdown.clone();
            tasks.spawn(async move { telemetry::run(&config, s).await.map(|_| ()) });
            let s = shutdown.clone();
            let ledgers = api_state.ledgers.clone();
            tasks.spawn(async move { ledger_worker::run(&ledger, ledgers, s).await });
            let (kafka, waiters, s) = (
                writer.kafka.clone(),
                api_state.waiters.clone(),
                shutdown.clone(),
            );
            tasks.spawn(async move { waiters::listen(&kafka, waiters, s).await });
            if args.compact_interval_s > 0 {
                let (root, s) = (history_for_compaction, shutdown.clone());
                let every = Duration::from_secs(args.compact_interval_s);
                tasks.spawn(async move {
                    compact::run_every(root, every, s).await;
                    Ok(())
                });
            }
            let mut s = shutdown.clone();
            let tls = args.tls.server().map_err(anyhow::Error::msg)?;
            tasks.spawn(async move {
                let app = api::router(api_state);
                let stopped = async move { s.wait().await };
                match tls {
                    Some(tls) => {
                        let listener = gpuledger_common::tls::TlsListener::new(listener, &tls)
                            .map_err(gpuledger_processor::Error::Io)?;
                        axum::serve(listener, app)
                            .with_graceful_shutdown(stopped)
                            .await
                    }
                    None => {
                        axum::serve(listener, app)
                            .with_graceful_shutdown(stopped)
                            .await
                    }
                }
                .map_err(gpuledger_processor::Error::Io)
            });
            while let Some(done) = tasks.join_next().await {
                done??;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// Commands that fold the ledger alone may use huge pages; the others
    /// write telemetry and do not.
    #[test]
    fn only_ledger_folds_use_huge_pages() {
        let folds = |args: &[&str]| {
            let cli = super::Cli::try_parse_from(
                std::iter::once("gpuledger-processor").chain(args.iter().copied()),
            )
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            cli.command.folds_ledger_only()
        };
        assert!(folds(&["fold", "--ledger", "l.ndjson"]));
        assert!(folds(&[
            "statement",
            "--ledger",
            "l.ndjson",
            "--period",
            "2026-11"
        ]));
        assert!(!folds(&["generate", "--history-root", "h"]));
    }

    /// The kernel reports the opt-out in the process's status as
    /// `THP_enabled: 0` (a kernel that reports nothing is not checked).
    #[test]
    fn the_process_opts_out_of_transparent_huge_pages() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        super::tune_allocator(false);
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let reported = status.lines().find(|l| l.starts_with("THP_enabled:"));
        if let Some(line) = reported {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }
}
