//! The control API (DESIGN §8), served by the processor: ledger events in,
//! admission answers out. Every route but `/healthz` needs a bearer token.

pub mod auth;
pub mod waiters;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gpuledger_common::kafka::{EventProducer, KafkaArgs};
use gpuledger_schemas::events::AdmissionRequest;
use gpuledger_schemas::{Envelope, Event, EventBody, EventType, Timestamp, Topic};
use serde::Deserialize;
use tokio::sync::Mutex;

use auth::{Role, Tokens};
use waiters::Waiters;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct ApiState {
    pub tokens: Arc<Tokens>,
    pub producer: Arc<Mutex<EventProducer>>,
    pub waiters: Waiters,
    pub cluster: String,
    pub admission_timeout: Duration,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl ApiState {
    /// State for a broker and a set of tokens.
    pub fn new(
        kafka: &KafkaArgs,
        tokens: Tokens,
        cluster: &str,
        admission_timeout: Duration,
    ) -> crate::Result<Self> {
        Ok(Self {
            tokens: Arc::new(tokens),
            producer: Arc::new(Mutex::new(EventProducer::new(
                kafka,
                "gpuledger-control-api",
            )?)),
            waiters: Waiters::default(),
            cluster: cluster.to_owned(),
            admission_timeout,
        })
    }
}

/// The routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/events", post(post_events))
        .route("/v1/admission", post(post_admission))
        .with_state(state)
}

/// An error answer with its status; the body names what was wrong.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: serde_json::Value,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: serde_json::json!({ "error": message.into() }),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, body = %self.body, "control API error");
        } else {
            tracing::warn!(status = %self.status, body = %self.body, "control API request refused");
        }
        (self.status, Json(self.body)).into_response()
    }
}

impl From<gpuledger_common::kafka::Error> for ApiError {
    fn from(e: gpuledger_common::kafka::Error) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("could not append to the ledger: {e}"),
        )
    }
}

fn role<'a>(state: &'a ApiState, headers: &HeaderMap) -> Result<&'a Role, ApiError> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state
        .tokens
        .role(header)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required"))
}

/// Whether `role` may append `event`.
fn may_append(role: &Role, event: &Event) -> Result<(), String> {
    let tenant_of = |body: &EventBody| -> Option<String> {
        match body {
            EventBody::ReservationRequest(r) => Some(r.tenant.clone()),
            EventBody::ReservationCancel(r) => Some(r.tenant.clone()),
            _ => None,
        }
    };
    match role {
        Role::Admin => Ok(()),
        Role::Scheduler => match event.event_type() {
            EventType::Clock | EventType::PriceBook | EventType::TenantPolicy => Err(format!(
                "{} events need the admin role",
                event.event_type().name()
            )),
            _ => Ok(()),
        },
        Role::TeamLead { tenant } => match tenant_of(&event.body) {
            Some(t) if &t == tenant => Ok(()),
            Some(t) => Err(format!("a team lead of {tenant:?} cannot act for {t:?}")),
            None => Err(format!(
                "a team lead may post reservations only, not {}",
                event.event_type().name()
            )),
        },
    }
}

/// `POST /v1/events`: NDJSON ledger events. Every line is checked first;
/// one bad line refuses the whole body (naming the line and the field), so
/// nothing is half-appended.
async fn post_events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    let mut events = Vec::new();
    for (index, line) in body
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line_no = index + 1;
        let refuse = |status: StatusCode, message: String, field: Option<&str>| ApiError {
            status,
            body: serde_json::json!({ "error": message, "line": line_no, "field": field }),
        };
        let event = Event::from_json_str(line).map_err(|e| {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("line {line_no}: {e}"),
                e.field_name(),
            )
        })?;
        event.validate().map_err(|e| {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("line {line_no}: {e}"),
                e.field_name(),
            )
        })?;
        if event.event_type().topic() != Topic::Ledger {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "line {line_no}: {} is not a ledger event",
                    event.event_type().name()
                ),
                Some("type"),
            ));
        }
        may_append(&role, &event)
            .map_err(|m| refuse(StatusCode::FORBIDDEN, format!("line {line_no}: {m}"), None))?;
        events.push(event);
    }
    if events.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "no events in the body (one JSON event per line)",
        ));
    }
    let mut producer = state.producer.lock().await;
    for event in &events {
        producer.send(event).await?;
    }
    producer.flush(Duration::from_secs(30)).await?;
    Ok(Json(serde_json::json!({ "accepted": events.len() })).into_response())
}

/// The body of `POST /v1/admission`.
#[derive(Debug, Deserialize)]
struct AdmissionBody {
    pool: String,
    request_id: String,
    job_id: String,
    #[serde(default = "first_attempt")]
    attempt: i32,
    tenant: String,
    slices: i32,
    max_slices: i32,
}

fn first_attempt() -> i32 {
    1
}

/// `POST /v1/admission`: appends the request and answers with its decision.
async fn post_admission(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    if matches!(role, Role::TeamLead { .. }) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admission requests need the scheduler or admin role",
        ));
    }
    let request: AdmissionBody = serde_json::from_str(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("admission request: {e}")))?;
    let event = Event::new(
        Envelope {
            // Each call is its own ledger event; the ledger answers a
            // repeated request_id with its original decision.
            event_id: format!("{}@{}", request.request_id, Timestamp::now().as_micros()),
            event_time: Timestamp::now(),
            source: "control-api".to_owned(),
            cluster: state.cluster.clone(),
        },
        AdmissionRequest {
            pool: request.pool,
            request_id: request.request_id.clone(),
            job_id: request.job_id,
            attempt: request.attempt,
            tenant: request.tenant,
            slices: request.slices,
            max_slices: request.max_slices,
        },
    );
    event.validate().map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        body: serde_json::json!({ "error": e.to_string(), "field": e.field_name() }),
    })?;
    let answer = state.waiters.wait_for(&request.request_id);
    {
        let mut producer = state.producer.lock().await;
        producer.send(&event).await?;
        producer.flush(Duration::from_secs(30)).await?;
    }
    match tokio::time::timeout(state.admission_timeout, answer).await {
        Ok(Ok(decision)) => Ok(Json(decision.to_json_value()).into_response()),
        _ => {
            state.waiters.forget(&request.request_id);
            Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "no decision for request {:?} within {} s; it is in the ledger and will be decided — retry with the same request_id",
                    request.request_id,
                    state.admission_timeout.as_secs()
                ),
            ))
        }
    }
}
