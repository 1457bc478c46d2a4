//! The HTTP face of the query service: `POST /v1/sql`, `GET /v1/statements`,
//! `/metrics` and `/healthz`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::dataframe::DataFrame;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use gpuledger_common::metrics::{Counter, Metric, render};
use gpuledger_schemas::billing::{Period, Statement};
use serde::Deserialize;

use crate::access::{Access, Gate, Refusal, read_only};
use crate::encode::{EncodeError, Encoder, Format, Pending};
use crate::failure::{Kind, Stage, told, told_text};
use crate::limits::{Limits, Slots, for_one_query};
use crate::statements::StatementError;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub ctx: Arc<SessionContext>,
    /// How long one query may run.
    pub timeout: std::time::Duration,
    /// Who may read what.
    pub gate: Gate,
    /// What one query may take.
    pub limits: Limits,
    /// Places for running queries, by role.
    pub slots: Slots,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("session", &self.ctx.session_id())
            .finish()
    }
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/sql", post(sql))
        .route("/v1/statements", get(statements))
        .route("/v1/export/focus", get(export_focus))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    render(&[Metric::Counter(&QUERIES), Metric::Counter(&QUERIES_REFUSED)]),
                )
            }),
        )
        .with_state(state)
}

static QUERIES: Counter = Counter::new("gpuledger_queries_total", "SQL queries answered.");
static QUERIES_REFUSED: Counter = Counter::new(
    "gpuledger_queries_refused_total",
    "SQL queries refused with a 4xx.",
);

/// A SQL request: `{"sql": "SELECT …"}`, or the SQL as a plain-text body.
#[derive(Debug, Deserialize)]
struct SqlRequest {
    sql: String,
}

/// An error answer: a status and a message naming what was wrong.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, error = %self.message, "query failed");
        } else {
            QUERIES_REFUSED.inc();
            tracing::warn!(status = %self.status, error = %self.message, "query rejected");
        }
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// What the caller's token may read, or the 401/403 that says why not.
fn access(state: &AppState, headers: &HeaderMap) -> Result<Access, ApiError> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state.gate.bearer(header).map_err(|refusal| match refusal {
        Refusal::Unauthenticated => ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "a bearer token is needed (Authorization: Bearer …)".into(),
        },
        Refusal::Forbidden(why) => ApiError {
            status: StatusCode::FORBIDDEN,
            message: why.into(),
        },
    })
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
    }
}

/// `POST /v1/sql`: the answer in the format `Accept` asks for, streamed
/// batch by batch. Planning and the first batch come before the answer
/// starts, so a bad query is a 4xx; the per-query time limit covers the
/// whole answer.
async fn sql(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let access = access(&state, &headers)?;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept).map_err(|message| ApiError {
        status: StatusCode::NOT_ACCEPTABLE,
        message,
    })?;
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let query = if is_json {
        serde_json::from_str::<SqlRequest>(&body)
            .map_err(|e| bad_request(format!("body must be {{\"sql\": \"…\"}}: {e}")))?
            .sql
    } else {
        body
    };
    if query.trim().is_empty() {
        return Err(bad_request("no SQL given"));
    }
    let limit = state.timeout;
    let deadline = tokio::time::Instant::now() + limit;
    let too_slow = || ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        message: format!("the query took longer than {limit:?} (--query-timeout-s)"),
    };
    // A place among the role's running queries, held until the answer is
    // sent; waiting for one counts in the time limit.
    let permit = tokio::time::timeout_at(deadline, state.slots.enter(&access))
        .await
        .map_err(|_| ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "no place for the query within {limit:?}: as many queries of this role as may run at once are running"
            ),
        })?;
    let failed = |stage: Stage| {
        let access = access.clone();
        move |e: datafusion::error::DataFusionError| bad_request(told(&access, stage, &e).message)
    };
    let frame = tokio::time::timeout_at(deadline, state.ctx.sql_with_options(&query, read_only()))
        .await
        .map_err(|_| too_slow())?
        .map_err(failed(Stage::Planning))?;
    // A team lead's query scans only its tenant's rows.
    let plan = access
        .restrict(frame.logical_plan().clone())
        .map_err(failed(Stage::Planning))?;
    // Its own memory, within the service's.
    let run_ctx = for_one_query(&state.ctx.state(), state.limits.query_memory_bytes);
    let frame = DataFrame::new(run_ctx.state(), plan);
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let mut stream = tokio::time::timeout_at(deadline, frame.execute_stream())
        .await
        .map_err(|_| too_slow())?
        .map_err(failed(Stage::Running))?;
    let first = tokio::time::timeout_at(deadline, stream.next())
        .await
        .map_err(|_| too_slow())?
        .transpose()
        .map_err(failed(Stage::Running))?;
    let pending = Pending::default();
    let mut encoder = Encoder::new(format, &schema, pending.clone()).map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: told_text(&access, Kind::Execution, &e.to_string()),
    })?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
    let max_bytes = state.limits.max_result_bytes;
    tokio::spawn(async move {
        let _permit = permit;
        let mut sent_bytes = 0usize;
        let mut bounded = |chunk: Vec<u8>| {
            sent_bytes = sent_bytes.saturating_add(chunk.len());
            if sent_bytes > max_bytes {
                return Err(format!(
                    "the answer is larger than {} MiB (--max-result-mb): ask for fewer rows or columns",
                    max_bytes >> 20
                ));
            }
            Ok(chunk)
        };
        let sent = async {
            if let Some(batch) = first {
                encoder.write(&batch)?;
                if tx.send(Ok(bounded(pending.take())?)).await.is_err() {
                    return Ok(());
                }
            }
            loop {
                let next = tokio::time::timeout_at(deadline, stream.next())
                    .await
                    .map_err(|_| format!("the query took longer than {limit:?}"))?;
                let Some(batch) = next else { break };
                let batch = batch.map_err(|e| told(&access, Stage::Running, &e).message)?;
                encoder.write(&batch)?;
                if tx.send(Ok(bounded(pending.take())?)).await.is_err() {
                    // The client went away: stop the query.
                    return Ok(());
                }
            }
            encoder.finish()?;
            let _ = tx.send(Ok(bounded(pending.take())?)).await;
            Ok::<(), EncodeError>(())
        }
        .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "query failed while its answer was streaming");
            let message = told_text(&access, Kind::Execution, &e.to_string());
            let _ = tx.send(Err(std::io::Error::other(message))).await;
        }
    });
    QUERIES.inc();
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// The statement of `?period=YYYY-MM` from the history as it stands.
async fn priced(
    state: &AppState,
    access: &Access,
    period: Option<&str>,
) -> Result<Arc<Statement>, ApiError> {
    let period: Period = period
        .ok_or_else(|| bad_request("period is required: ?period=YYYY-MM"))?
        .parse()
        .map_err(bad_request)?;
    let work = crate::statements::statement(&state.ctx, period);
    tokio::time::timeout(state.timeout, work)
        .await
        .map_err(|_| ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!("the statement took longer than {:?}", state.timeout),
        })?
        .map_err(|e| match e {
            StatementError::Pricing(e) => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                message: told_text(access, Kind::Execution, &e.to_string()),
            },
            other => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: told_text(access, Kind::Execution, &other.to_string()),
            },
        })
}

/// `GET /v1/export/focus` parameters.
#[derive(Debug, Deserialize)]
struct FocusParams {
    period: Option<String>,
    /// `csv`, `json`, `parquet` or `arrow`, instead of `Accept`.
    format: Option<String>,
}

/// `GET /v1/export/focus?period=YYYY-MM`: the statement's charges as FOCUS
/// 1.2 rows (a lead's token: its tenant's only), in the format `Accept` or
/// `format=` asks for.
async fn export_focus(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<FocusParams>,
) -> Result<Response, ApiError> {
    let access = access(&state, &headers)?;
    let format = match params.format.as_deref() {
        Some("csv") => Format::Csv,
        Some("json") => Format::Json,
        Some("parquet") => Format::Parquet,
        Some("arrow") => Format::Arrow,
        Some(other) => {
            return Err(bad_request(format!(
                "format {other:?} is not one of csv, json, parquet, arrow"
            )));
        }
        None => {
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            Format::from_accept(accept).map_err(|message| ApiError {
                status: StatusCode::NOT_ACCEPTABLE,
                message,
            })?
        }
    };
    let statement = priced(&state, &access, params.period.as_deref()).await?;
    let internal = |message: String| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: told_text(&access, Kind::Execution, &message),
    };
    let batch = crate::focus::rows(&statement, &access).map_err(|e| internal(e.to_string()))?;
    let pending = Pending::default();
    let encoded = Encoder::new(format, &batch.schema(), pending.clone()).and_then(|mut encoder| {
        encoder.write(&batch)?;
        encoder.finish()
    });
    encoded.map_err(|e| internal(e.to_string()))?;
    QUERIES.inc();
    Ok((
        [(header::CONTENT_TYPE, format.content_type())],
        pending.take(),
    )
        .into_response())
}

/// `GET /v1/statements` parameters.
#[derive(Debug, Deserialize)]
struct StatementParams {
    period: Option<String>,
    tenant: Option<String>,
    format: Option<String>,
}

/// `GET /v1/statements?period=YYYY-MM[&tenant=…]`: the statement in the
/// JSON shape of DESIGN §7, or CSV (`Accept: text/csv` or `format=csv`).
async fn statements(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<StatementParams>,
) -> Result<Response, ApiError> {
    let access = access(&state, &headers)?;
    if let Some(tenant) = &params.tenant
        && !access.allows(tenant)
    {
        // The name asked for is not repeated: an answer to a lead names
        // no other tenant, even one the lead wrote.
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: "this token reads only its own tenant".into(),
        });
    }
    let mut statement = priced(&state, &access, params.period.as_deref()).await?;
    let shown = |t: &gpuledger_schemas::billing::TenantStatement| {
        params.tenant.as_ref().is_none_or(|only| &t.tenant == only) && access.allows(&t.tenant)
    };
    if !statement.tenants.iter().all(shown) {
        // A copy with only the tenants this caller asked for and may read.
        Arc::make_mut(&mut statement).tenants.retain(shown);
    }
    QUERIES.inc();
    let wants_csv = params.format.as_deref() == Some("csv")
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/csv"));
    if wants_csv {
        return Ok((
            [(header::CONTENT_TYPE, "text/csv")],
            crate::statements::to_csv(&statement),
        )
            .into_response());
    }
    let mut json = statement.to_json();
    if access != Access::All {
        // The platform's figures add up every tenant's.
        if let Some(object) = json.as_object_mut() {
            object.remove("platform");
        }
    }
    Ok(Json(json).into_response())
}
