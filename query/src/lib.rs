//! The gpuledger query service: DataFusion SQL over the Parquet history.
//!
//! It registers the history tables and answers SQL over HTTP. It reads
//! history only; it never writes to it or to Kafka.

pub mod access;
pub mod case_select;
pub mod catalog;
mod columns;
pub mod encode;
pub mod failure;
pub mod focus;
pub mod http;
pub mod limits;
pub mod pg;
pub mod run_aggregate;
mod scoped;
pub mod statements;
mod telemetry;
pub mod views;

use gpuledger_common::history::HistoryRoot;
use std::net::SocketAddr;
use std::sync::Arc;

use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpuledger_common::shutdown::Shutdown;

/// What went wrong in the query service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting up the engine or the catalog.
    #[error("query engine: {0}")]
    Engine(#[from] datafusion::error::DataFusionError),
    /// Binding or serving.
    #[error("HTTP server: {0}")]
    Io(#[from] std::io::Error),
}

/// Result with the query service's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of the query service.
#[derive(Debug, Clone)]
pub struct QueryConfig {
    /// Root of the Parquet history.
    pub history_root: HistoryRoot,
    /// Address of the HTTP API (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Address of the PostgreSQL wire protocol, if it is served.
    pub pg_listen: Option<SocketAddr>,
    /// Memory all running queries may hold together; a query past it fails
    /// with "Resources exhausted" instead of taking the service down.
    pub memory_limit_bytes: usize,
    /// How long one query may run.
    pub query_timeout: std::time::Duration,
    /// Who may read what; none: everyone reads everything.
    pub tokens: gpuledger_common::auth::Tokens,
    /// What one query may take.
    pub limits: limits::Limits,
    /// TLS for both faces; `None`: plaintext.
    pub tls: Option<gpuledger_common::tls::ServerTls>,
    /// How a PostgreSQL login proves its token.
    pub pg_auth: pg::PgAuth,
    /// With TLS, whether a PostgreSQL client may still connect without it.
    pub pg_allow_plaintext: bool,
}

/// A session with the history tables registered, under `memory_bytes`,
/// with values of size-picking functions capped at `max_value_bytes`.
pub async fn session(
    history_root: &HistoryRoot,
    memory_bytes: usize,
    max_value_bytes: usize,
) -> Result<SessionContext> {
    let config = SessionConfig::from_env()?
        .with_information_schema(true)
        .with_extension(Arc::new(statements::RecordedCache::new(history_root)));
    // Parquet filter pushdown stays off for SQL (DataFusion's default,
    // `DATAFUSION_EXECUTION_PARQUET_PUSHDOWN_FILTERS` turns it on): the
    // history's sort keys already skip pages by their statistics, and
    // evaluating a filter row by row while decoding cost more than it saved
    // on queries keeping much of what they read (docs/bench-journal/query-service.md). The
    // statement's raw-sample reads turn it on for themselves.
    // DataFusion caches a table's file listing forever by default; history
    // grows while the service runs, so every query lists the files anew.
    //
    // Parquet footers and page indexes are kept once read (files are never
    // rewritten in place). DataFusion's default room for them, 50 MB, is
    // less than a month of samples' footers (1,000 GPUs: 241 files), and a
    // scan over every file then misses on every one of them, re-reading and
    // parsing each footer on each query (100–150 ms before any row was
    // read, measured). An eighth of the query memory, and at least 64 MiB.
    let caches = CacheManagerConfig::default()
        .with_list_files_cache_limit(0)
        .with_metadata_cache_limit((memory_bytes / 8).max(64 << 20));
    let runtime = RuntimeEnvBuilder::new()
        .with_cache_manager(caches)
        .with_memory_limit(memory_bytes, 1.0)
        .build_arc()?;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(case_select::CaseSelect))
        // After `CaseSelect`, which rewrites the aggregate's arguments.
        .with_physical_optimizer_rule(Arc::new(run_aggregate::RunAggregate))
        .build();
    let ctx = SessionContext::new_with_state(state);
    for capped in limits::capped_functions(&ctx, max_value_bytes) {
        ctx.register_udf(capped);
    }
    catalog::register_history(&ctx, history_root)?;
    ctx.register_table("chargeback", Arc::new(views::StatementView::chargeback()))?;
    ctx.register_table("statements", Arc::new(views::StatementView::statements()))?;
    ctx.register_table("job_costs", Arc::new(views::StatementView::job_costs()))?;
    ctx.register_table(
        "tenant_usage_hourly",
        Arc::new(views::StatementView::tenant_usage_hourly()),
    )?;
    // A view in SQL over the raw samples; the service's own DDL, before
    // any caller's SQL (which may not define views) is taken.
    ctx.sql(views::UTILIZATION).await?;
    // What PostgreSQL clients (psql's \d, Grafana) read to list tables and
    // columns: metadata only, no rows of the history.
    let default_catalog = ctx
        .state()
        .config()
        .options()
        .catalog
        .default_catalog
        .clone();
    datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog(
        &ctx,
        &default_catalog,
        datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
    )
    .map_err(|e| *e)?;
    Ok(ctx)
}

/// Where the service listens once bound.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The HTTP API.
    pub http: SocketAddr,
    /// The PostgreSQL wire protocol, if served.
    pub postgres: Option<SocketAddr>,
}

/// Binds `addr` for `what`, naming the flag to change it if that fails.
async fn bind(addr: SocketAddr, what: &str, flag: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} for {what}: {e} (set {flag})"),
        ))
    })
}

/// Binds the HTTP API (and the PostgreSQL protocol if configured), calls
/// `on_bound` with the bound addresses, then serves until shutdown.
pub async fn run(
    config: &QueryConfig,
    mut shutdown: Shutdown,
    on_bound: impl FnOnce(Bound),
) -> Result<()> {
    let ctx = Arc::new(
        session(
            &config.history_root,
            config.memory_limit_bytes,
            config.limits.max_value_bytes,
        )
        .await?,
    );
    let listener = bind(config.listen, "the SQL API", "--listen").await?;
    let pg_listener = match config.pg_listen {
        Some(addr) => Some(bind(addr, "the PostgreSQL protocol", "--pg-listen").await?),
        None => None,
    };
    let bound = Bound {
        http: listener.local_addr()?,
        postgres: pg_listener.as_ref().map(|l| l.local_addr()).transpose()?,
    };
    tracing::info!(
        http = %bound.http,
        postgres = ?bound.postgres,
        root = %config.history_root,
        "query service listening"
    );
    on_bound(bound);
    let gate = access::Gate::new(config.tokens.clone());
    if gate.is_open() {
        tracing::warn!("no --api-token given: every caller reads every tenant (local use only)");
    }
    if let Some(pg_listener) = pg_listener {
        let login = pg::Login {
            auth: config.pg_auth,
            require_tls: config.tls.is_some() && !config.pg_allow_plaintext,
        };
        let handlers = pg::Handlers::new(
            ctx.clone(),
            gate.clone(),
            config.query_timeout,
            config.limits,
            login,
        );
        tokio::spawn(pg::serve(
            pg_listener,
            Arc::new(handlers),
            config.tls.as_ref().map(|t| t.postgres.clone()),
            shutdown.clone(),
        ));
    }
    let app = http::router(http::AppState {
        ctx,
        timeout: config.query_timeout,
        gate,
        limits: config.limits,
        slots: limits::Slots::new(&config.limits),
    });
    match &config.tls {
        Some(tls) => {
            let listener = gpuledger_common::tls::TlsListener::new(listener, tls)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.wait().await })
                .await?;
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.wait().await })
                .await?;
        }
    }
    Ok(())
}
