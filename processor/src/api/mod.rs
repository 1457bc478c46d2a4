//! The control API (DESIGN §8), served by the processor: ledger events in,
//! admission answers out. Every route but `/healthz` needs a bearer token.

pub mod auth;
pub mod envelopes;
mod event_ids;
pub mod k8s;
mod views;
pub mod waiters;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use gpuledger_common::kafka::{EventProducer, KafkaArgs};
use gpuledger_schemas::events::{AdmissionRequest, ReservationCancel, ReservationRequest};
use gpuledger_schemas::{Envelope, Event, EventBody, Timestamp, Topic};
use serde::Deserialize;
use tokio::sync::Mutex;

use auth::{Role, Tokens, acting_tenant, may_append, require_scheduler, require_writer, role};
use envelopes::{Mode, Skew};
use event_ids::EventIds;
use k8s::K8sMapping;
use views::{dry_run_decision, get_availability, get_tenant};

use crate::answers::{Answer, Key, Waiters};
use crate::applied::{AppliedOffsets, Reached};
use crate::ledger::ReservationLimits;
use crate::ledger_worker::SharedLedgers;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct ApiState {
    pub tokens: Arc<Tokens>,
    pub producer: Arc<Mutex<EventProducer>>,
    pub waiters: Waiters,
    pub cluster: String,
    pub admission_timeout: Duration,
    pub k8s: Arc<K8sMapping>,
    /// The ledger worker's state, read for availability, tenant views and dry runs.
    pub ledgers: SharedLedgers,
    /// How far an admin's event times may be from this clock.
    pub skew: Skew,
    /// The bounds of reservation requests, as the ledger has them.
    pub reservations: ReservationLimits,
    /// How far this process's ledger worker has applied: paces bulk bodies.
    pub applied: AppliedOffsets,
    ids: Arc<EventIds>,
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
        k8s: K8sMapping,
    ) -> crate::Result<Self> {
        Ok(Self {
            ledgers: SharedLedgers::default(),
            k8s: Arc::new(k8s),
            tokens: Arc::new(tokens),
            // A request waits for its append: no linger (concurrent requests
            // still share batches while one is in flight).
            producer: Arc::new(Mutex::new(EventProducer::with_settings(
                kafka,
                "gpuledger-control-api",
                &[("linger.ms", "0")],
            )?)),
            waiters: Waiters::default(),
            cluster: cluster.to_owned(),
            admission_timeout,
            skew: Skew::default(),
            reservations: ReservationLimits::default(),
            applied: AppliedOffsets::default(),
            ids: Arc::new(EventIds::new()),
        })
    }
}

/// The routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    crate::metrics::render(),
                )
            }),
        )
        .route("/v1/events", post(post_events))
        .route("/v1/admission", post(post_admission))
        .route("/v1/reservations", post(post_reservation))
        .route("/v1/k8s/admission", post(post_k8s_admission))
        .route("/v1/availability", get(get_availability))
        .route("/v1/tenants/{tenant}", get(get_tenant))
        .route("/v1/reservations/{id}", delete(delete_reservation))
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
            crate::metrics::API_REQUESTS_REFUSED.inc();
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

/// Query of `POST /v1/events`.
#[derive(Debug, Deserialize)]
struct EventsQuery {
    /// `live` (the default) or `import` ([`envelopes::Mode`]).
    #[serde(default)]
    mode: Option<String>,
}

/// `POST /v1/events`: NDJSON ledger events. Every line is checked first;
/// one bad line refuses the whole body (naming the line and the field), so
/// nothing is half-appended. The envelope is the API's for callers the
/// ledger does not trust with it ([`envelopes`]).
async fn post_events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
    body: String,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    let mode: Mode = match query.mode.as_deref() {
        None => Mode::Live,
        Some(text) => text.parse().map_err(|message| ApiError {
            status: StatusCode::BAD_REQUEST,
            body: serde_json::json!({ "error": message, "field": "mode" }),
        })?,
    };
    // Reading a large body is CPU work: off the threads that answer
    // admissions.
    let reader = state.clone();
    let events = tokio::task::spawn_blocking(move || read_events(&reader, &role, mode, &body))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the body failed: {e}"),
            )
        })??;
    append_paced(&state, &events).await?;
    Ok(Json(serde_json::json!({ "accepted": events.len() })).into_response())
}

/// The events of an NDJSON body, enveloped for `role` and checked.
fn read_events(
    state: &ApiState,
    role: &Role,
    mode: Mode,
    body: &str,
) -> Result<Vec<Event>, ApiError> {
    let now = Timestamp::now();
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
        let bad = |e: gpuledger_schemas::Error| {
            refuse(
                StatusCode::BAD_REQUEST,
                format!("line {line_no}: {e}"),
                e.field_name(),
            )
        };
        let mut value: serde_json::Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(_) => return Err(bad(Event::from_json_str(line).unwrap_err())),
        };
        if let Some(object) = value.as_object_mut() {
            let fresh = || state.ids.fresh(now);
            envelopes::settle(object, role, mode, state.skew, now, &state.cluster, fresh).map_err(
                |r| {
                    let status = if r.field == "mode" {
                        StatusCode::FORBIDDEN
                    } else {
                        StatusCode::BAD_REQUEST
                    };
                    refuse(
                        status,
                        format!("line {line_no}: {}", r.message),
                        Some(r.field),
                    )
                },
            )?;
        }
        let event = Event::from_json_value(&value).map_err(bad)?;
        event.validate().map_err(bad)?;
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
        may_append(role, &event)
            .map_err(|m| refuse(StatusCode::FORBIDDEN, format!("line {line_no}: {m}"), None))?;
        if let EventBody::ReservationRequest(r) = &event.body {
            within_limits(state, r, now).map_err(|(field, m)| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    format!("line {line_no}: {m}"),
                    Some(field),
                )
            })?;
        }
        events.push(event);
    }
    if events.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "no events in the body (one JSON event per line)",
        ));
    }
    Ok(events)
}

/// Events a body is appended in at a time.
const BODY_SLICE: usize = 256;
/// The longest a slice waits for this process's ledger worker to apply the
/// one before: pacing is a courtesy to admissions, never a reason to fail.
const SLICE_PACE: Duration = Duration::from_secs(2);
/// The longest a body waits for the broker, all slices together.
const BODY_DELIVERY: Duration = Duration::from_secs(30);

/// Appends `events` a slice at a time: each slice once the broker has the
/// one before and this process's ledger worker has applied it. An
/// admission appended meanwhile is queued between two slices, so it waits
/// behind one slice of the body, not all of it. The producer is held only
/// to queue each event, never for a wait.
async fn append_paced(state: &ApiState, events: &[Event]) -> Result<(), ApiError> {
    let deadline = tokio::time::Instant::now() + BODY_DELIVERY;
    let all_partitions = state.producer.lock().await.partitions(Topic::Ledger)?;
    for slice in events.chunks(BODY_SLICE) {
        let mut deliveries = Vec::with_capacity(slice.len());
        for event in slice {
            match &event.body {
                // A book for every pool goes to every ledger partition, so each
                // partition's state machine prices its own pools (DESIGN §11).
                EventBody::PriceBook(book) if book.pool.is_none() => {
                    for partition in &all_partitions {
                        let producer = state.producer.lock().await;
                        deliveries.push(producer.queue_to(event, Some(*partition)).await?);
                    }
                }
                _ => {
                    let producer = state.producer.lock().await;
                    deliveries.push(producer.queue(event).await?);
                }
            }
        }
        let placed = futures::future::join_all(deliveries.into_iter().map(|d| d.placed()));
        let Ok(placed) = tokio::time::timeout_at(deadline, placed).await else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the broker did not acknowledge the events within 30 s; post them again (ids make a retry safe)",
            ));
        };
        let mut last: std::collections::BTreeMap<i32, i64> = Default::default();
        for (partition, offset) in placed.into_iter().collect::<Result<Vec<_>, _>>()? {
            let at = last.entry(partition).or_insert(offset);
            *at = (*at).max(offset);
        }
        for (partition, offset) in last {
            if state.applied.reached(partition, offset, SLICE_PACE).await == Reached::TimedOut {
                tracing::debug!(partition, offset, "ledger worker behind a body's slice");
            }
        }
    }
    Ok(())
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
    require_scheduler(&role, "admission requests")?;
    let request: AdmissionBody = serde_json::from_str(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("admission request: {e}")))?;
    let request_id = request.request_id.clone();
    let asked = std::time::Instant::now();
    let event = state.event(AdmissionRequest {
        pool: request.pool.into(),
        request_id: request.request_id.into(),
        job_id: request.job_id.into(),
        attempt: request.attempt,
        tenant: request.tenant.into(),
        slices: request.slices,
        max_slices: request.max_slices,
    });
    // A repeated request_id is answered with the original decision, whose
    // cause is the first request: wait for the request id as well.
    let answer = append_and_wait(&state, &event, Key::Request(request_id), |d| {
        matches!(&d.body, EventBody::AdmissionDecision(_))
    })
    .await?;
    crate::metrics::ADMISSION_SECONDS.observe(asked.elapsed());
    Ok(Json(answer.to_json_value()).into_response())
}

/// The body of `POST /v1/reservations`.
#[derive(Debug, Deserialize)]
struct ReservationBody {
    pool: String,
    reservation_id: String,
    /// Defaults to a team lead's own tenant.
    #[serde(default)]
    tenant: Option<String>,
    slices: i32,
    max_slices: i32,
    start: Timestamp,
    end: Timestamp,
}

/// `POST /v1/reservations`: asks for capacity over [start, end) and answers
/// with the ledger's decision (`confirmed`, or `rejected` with the window
/// that conflicts).
async fn post_reservation(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    let request: ReservationBody = serde_json::from_str(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("reservation request: {e}")))?;
    require_writer(&role, "reservations")?;
    let tenant = acting_tenant(&role, request.tenant)?;
    let event = state.event(ReservationRequest {
        pool: request.pool,
        reservation_id: request.reservation_id,
        tenant,
        slices: request.slices,
        max_slices: request.max_slices,
        start: request.start,
        end: request.end,
    });
    if let EventBody::ReservationRequest(r) = &event.body {
        within_limits(&state, r, event.envelope.event_time).map_err(|(field, message)| {
            ApiError {
                status: StatusCode::BAD_REQUEST,
                body: serde_json::json!({ "error": message, "field": field }),
            }
        })?;
    }
    let cause = Key::Cause(event.envelope.event_id.to_string());
    let answer = append_and_wait(&state, &event, cause, |d| {
        matches!(&d.body, EventBody::ReservationDecision(_))
    })
    .await?;
    Ok(Json(answer.to_json_value()).into_response())
}

/// Whether reservation `r`, asked for at `now`, is within the limits the
/// ledger would reject it past: its window, and the tenant's open
/// reservations as this process's ledgers know them. The field past one
/// and why.
fn within_limits(
    state: &ApiState,
    r: &ReservationRequest,
    now: Timestamp,
) -> Result<(), (&'static str, String)> {
    state.reservations.check_window(r, now)?;
    let open = state
        .ledgers
        .read()
        .map(|ledgers| {
            ledgers
                .values()
                .map(|l| l.open_reservations(&r.pool, &r.tenant))
                .sum()
        })
        .unwrap_or(0);
    state.reservations.check_open(&r.tenant, open)
}

/// Query of `DELETE /v1/reservations/{id}`.
#[derive(Debug, Deserialize)]
struct CancelQuery {
    pool: String,
    #[serde(default)]
    tenant: Option<String>,
}

/// `DELETE /v1/reservations/{id}?pool=…[&tenant=…]`: cancels; the window
/// ends now and running holds are reclassified.
async fn delete_reservation(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path(reservation_id): Path<String>,
    Query(query): Query<CancelQuery>,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    require_writer(&role, "cancelling a reservation")?;
    let tenant = acting_tenant(&role, query.tenant)?;
    let event = state.event(ReservationCancel {
        pool: query.pool,
        reservation_id,
        tenant,
    });
    let cause = Key::Cause(event.envelope.event_id.to_string());
    let answer = append_and_wait(&state, &event, cause, |d| {
        matches!(&d.body, EventBody::ReservationDecision(_))
    })
    .await?;
    Ok(Json(answer.to_json_value()).into_response())
}

impl ApiState {
    /// A ledger event created by the API now. Each call is its own event.
    fn event(&self, body: impl Into<EventBody>) -> Event {
        let body = body.into();
        let now = Timestamp::now();
        Event::new(
            Envelope {
                event_id: self.ids.make(&body, now).into(),
                event_time: now,
                source: "control-api".into(),
                cluster: self.cluster.as_str().into(),
            },
            body,
        )
    }
}

/// Validates and appends `event`, then waits for the first decision that
/// `wanted` accepts among those it caused (or for `also`), or for its
/// rejection: `409` with the ledger's reason, `504` after the timeout.
async fn append_and_wait(
    state: &ApiState,
    event: &Event,
    also: Key,
    wanted: impl Fn(&Event) -> bool,
) -> Result<Event, ApiError> {
    event.validate().map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        body: serde_json::json!({ "error": e.to_string(), "field": e.field_name() }),
    })?;
    let keys = [Key::Cause(event.envelope.event_id.to_string()), also];
    let mut answers = state.waiters.wait_for(&keys);
    // The producer is held only to queue the request; concurrent requests
    // then wait for the broker together and share its batches.
    let appending = std::time::Instant::now();
    let queued = state.producer.lock().await.queue(event).await;
    let appended = match queued {
        Ok(delivery) => delivery.settled().await,
        Err(e) => Err(e),
    };
    if let Err(e) = appended {
        state.waiters.forget(&keys);
        return Err(e.into());
    }
    crate::metrics::ADMISSION_APPEND_SECONDS.observe(appending.elapsed());
    let deadline = tokio::time::Instant::now() + state.admission_timeout;
    let result = loop {
        match tokio::time::timeout_at(deadline, answers.recv()).await {
            Ok(Some(Answer::Decision(d))) if wanted(&d) => break Ok(*d),
            Ok(Some(Answer::Decision(_))) => continue,
            Ok(Some(Answer::Rejected(reason))) => {
                break Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("the ledger rejected it: {reason}"),
                ));
            }
            Ok(None) | Err(_) => {
                break Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "no decision within {} s; the event {:?} is in the ledger and will be decided — retry with the same ids",
                        state.admission_timeout.as_secs(),
                        event.envelope.event_id
                    ),
                ));
            }
        }
    };
    state.waiters.forget(&keys);
    result
}

/// `POST /v1/k8s/admission`: a Kubernetes `AdmissionReview` v1 for a Pod.
/// The answer echoes `response.uid`; a denial carries the ledger's reason.
/// A timeout is an HTTP 504, so the webhook's `failurePolicy` decides.
async fn post_k8s_admission(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    require_scheduler(&role, "the webhook")?;
    let review: serde_json::Value = serde_json::from_str(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("AdmissionReview: {e}")))?;
    let ask = k8s::read_review(&review, &state.k8s)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("AdmissionReview: {e}")))?;
    let uid = review["request"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let Some(ask) = ask else {
        return Ok(Json(k8s::response(&uid, true, 200, "no GPU requested")).into_response());
    };
    let Some(tenant) = state.k8s.tenants.get(&ask.namespace).cloned() else {
        let message = format!(
            "gpuledger: namespace {:?} is not mapped to a tenant (--k8s-namespace {}=TENANT)",
            ask.namespace, ask.namespace
        );
        return Ok(Json(k8s::response(&uid, false, 403, &message)).into_response());
    };
    let dry_run = ask.dry_run;
    let event = state.event(AdmissionRequest {
        pool: ask.pool.into(),
        request_id: ask.request_id.as_str().into(),
        job_id: ask.job_id.into(),
        attempt: 1,
        tenant: tenant.into(),
        slices: ask.slices,
        max_slices: ask.max_slices,
    });
    let answer = if dry_run {
        // sideEffects: NoneOnDryRun — decide on a copy of the state, append nothing.
        dry_run_decision(&state, &event)
    } else {
        let asked = std::time::Instant::now();
        let answer = append_and_wait(&state, &event, Key::Request(ask.request_id), |d| {
            matches!(&d.body, EventBody::AdmissionDecision(_))
        })
        .await;
        if answer.is_ok() {
            crate::metrics::ADMISSION_SECONDS.observe(asked.elapsed());
        }
        answer
    };
    let reply = match answer {
        Ok(decision) => match &decision.body {
            EventBody::AdmissionDecision(d)
                if d.decision == gpuledger_schemas::events::AdmissionOutcome::Admit =>
            {
                let kind = d.kind.map_or("-", |k| k.as_str());
                k8s::response(
                    &uid,
                    true,
                    200,
                    &format!("gpuledger: admitted as {kind} ({})", d.reason),
                )
            }
            EventBody::AdmissionDecision(d) => k8s::response(
                &uid,
                false,
                403,
                &format!(
                    "gpuledger: denied ({}): tenant {} uses {} of {} GE",
                    d.reason, d.tenant, d.used_ge, d.entitled_ge
                ),
            ),
            _ => k8s::response(&uid, false, 500, "gpuledger: unexpected answer"),
        },
        Err(e) if e.status == StatusCode::CONFLICT => {
            let message = e.body["error"].as_str().unwrap_or("rejected").to_owned();
            k8s::response(&uid, false, 400, &format!("gpuledger: {message}"))
        }
        Err(e) => return Err(e),
    };
    Ok(Json(reply).into_response())
}
