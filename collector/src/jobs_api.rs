//! The node's job endpoint, on the collector's `--jobs-listen` address
//! (127.0.0.1:9401 by default; bound anywhere else it requires
//! `--jobs-token` as a bearer token): `POST /v1/jobs/start` and `POST /v1/jobs/end`
//! take a JSON body (whatever content type is named) with the fields of `gpuledger-collector job start|end`,
//! for job wrappers and hooks that would rather speak HTTP than run a
//! process. The collector fills in the pool, cluster, node and source. The
//! event goes through the spool like every other: `202` comes once it is
//! on disk, with its `event_id`; a body that is not a valid event gets
//! `400` naming what is wrong; a collector shutting down answers `503`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use gpuledger_schemas::{Decimal, Event, Timestamp};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::job::{End, EndState, JobArgs, Start, end_event, start_event};

/// An event for the agent's spool, and where to say whether it was kept.
pub type Submission = (Event, oneshot::Sender<Result<(), String>>);

/// Where the node's events come from.
#[derive(Debug, Clone)]
pub struct Origin {
    pub pool: String,
    pub cluster: String,
    pub node: String,
    pub source: String,
}

/// The bearer token the job endpoint requires. Its `Debug` shows nothing
/// of it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobsToken(String);

impl std::str::FromStr for JobsToken {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.len() < 8 {
            return Err("the job endpoint's token must be at least 8 characters".to_owned());
        }
        Ok(JobsToken(s.to_owned()))
    }
}

impl std::fmt::Debug for JobsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobsToken(…)")
    }
}

struct Endpoint {
    origin: Origin,
    spool: mpsc::Sender<Submission>,
    token: Option<JobsToken>,
}

impl Endpoint {
    /// Whether `headers` carry the token, when one is required.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(JobsToken(token)) = &self.token else {
            return true;
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        gpuledger_common::auth::same_secret(given.as_bytes(), token.as_bytes())
    }
}

fn unauthorized() -> Response {
    refuse(
        StatusCode::UNAUTHORIZED,
        "the job endpoint needs its bearer token (Authorization: Bearer …)",
    )
}

fn first_attempt() -> i32 {
    1
}

/// `POST /v1/jobs/start`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartRequest {
    job_id: String,
    #[serde(default = "first_attempt")]
    attempt: i32,
    tenant: String,
    user: Option<String>,
    at: Option<Timestamp>,
    #[serde(default)]
    devices: Vec<String>,
    requested_slices: Option<i32>,
    requested_max_slices: Option<i32>,
}

/// `POST /v1/jobs/end`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndRequest {
    job_id: String,
    #[serde(default = "first_attempt")]
    attempt: i32,
    tenant: String,
    user: Option<String>,
    at: Option<Timestamp>,
    state: Option<EndState>,
    exit: Option<String>,
    work_units: Option<Decimal>,
    work_unit_name: Option<String>,
    reason: Option<String>,
}

/// The routes, handing events to `spool`; with `token`, only to callers
/// that give it.
pub fn router(origin: Origin, spool: mpsc::Sender<Submission>, token: Option<JobsToken>) -> Router {
    Router::new()
        .route("/v1/jobs/start", post(start))
        .route("/v1/jobs/end", post(end))
        .with_state(Arc::new(Endpoint {
            origin,
            spool,
            token,
        }))
}

fn refuse(status: StatusCode, error: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": error.to_string() }))).into_response()
}

impl Endpoint {
    fn attempt(
        &self,
        job_id: String,
        attempt: i32,
        tenant: String,
        user: Option<String>,
        at: Option<Timestamp>,
    ) -> JobArgs {
        JobArgs {
            cluster: self.origin.cluster.clone(),
            pool: self.origin.pool.clone(),
            job_id,
            attempt,
            tenant,
            user,
            node: Some(self.origin.node.clone()),
            at,
            source: self.origin.source.clone(),
        }
    }

    /// Checks the event and waits until the agent has spooled it.
    async fn submit(&self, event: Event) -> Response {
        if let Err(e) = event.validate() {
            return refuse(StatusCode::BAD_REQUEST, e);
        }
        let event_id = event.envelope.event_id.clone();
        let (reply, kept) = oneshot::channel();
        let stopping = || refuse(StatusCode::SERVICE_UNAVAILABLE, "the collector is stopping");
        if self.spool.send((event, reply)).await.is_err() {
            return stopping();
        }
        match kept.await {
            Ok(Ok(())) => {
                (StatusCode::ACCEPTED, Json(json!({ "event_id": event_id }))).into_response()
            }
            Ok(Err(e)) => refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("not spooled: {e}"),
            ),
            Err(_) => stopping(),
        }
    }
}

/// The body as `T`, whatever content type the caller named (`curl -d`
/// names a form); otherwise what is wrong with it, naming the field.
fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("body: {e}"))
}

async fn start(State(endpoint): State<Arc<Endpoint>>, headers: HeaderMap, body: Bytes) -> Response {
    if !endpoint.admits(&headers) {
        return unauthorized();
    }
    let r: StartRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e),
    };
    if r.requested_slices.is_some() != r.requested_max_slices.is_some() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "requested_slices and requested_max_slices come together",
        );
    }
    let job = endpoint.attempt(r.job_id, r.attempt, r.tenant, r.user, r.at);
    let start = Start {
        devices: r.devices,
        requested_slices: r.requested_slices,
        requested_max_slices: r.requested_max_slices,
    };
    endpoint.submit(start_event(&job, &start)).await
}

async fn end(State(endpoint): State<Arc<Endpoint>>, headers: HeaderMap, body: Bytes) -> Response {
    if !endpoint.admits(&headers) {
        return unauthorized();
    }
    let r: EndRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e),
    };
    let job = endpoint.attempt(r.job_id, r.attempt, r.tenant, r.user, r.at);
    let end = End {
        state: r.state,
        exit: r.exit,
        work_units: r.work_units,
        work_unit_name: r.work_unit_name,
        reason: r.reason,
    };
    match end_event(&job, &end) {
        Ok(event) => endpoint.submit(event).await,
        Err(e) => refuse(StatusCode::BAD_REQUEST, e),
    }
}
