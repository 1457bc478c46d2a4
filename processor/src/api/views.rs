//! What the control API reads from the ledger worker's state: spare
//! capacity over time, a tenant's view, and dry-run decisions.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gpuledger_schemas::{Event, EventBody, Timestamp};
use serde::Deserialize;

use super::auth::{acting_tenant, role};
use super::{ApiError, ApiState};
use crate::ledger::{Ge, Outcome, Position};

/// What the ledger would decide for `event` now, on a copy of its state.
pub(super) fn dry_run_decision(state: &ApiState, event: &Event) -> Result<Event, ApiError> {
    let pool = event.key().to_owned();
    let map = read_ledgers(state)?;
    let (partition, ledger) = map
        .iter()
        .find(|(_, l)| l.has_pool(&pool))
        .ok_or_else(|| ApiError::new(StatusCode::CONFLICT, format!("unknown pool {pool:?}")))?;
    match ledger.dry_run(
        Position {
            partition: *partition,
            offset: -1,
        },
        event,
    ) {
        Outcome::Applied { decisions, .. } => decisions
            .into_iter()
            .find(|d| matches!(d.body, EventBody::AdmissionDecision(_)))
            .map(Arc::unwrap_or_clone)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no decision in the dry run",
                )
            }),
        Outcome::Duplicate => Err(ApiError::new(StatusCode::CONFLICT, "already applied")),
        Outcome::Rejected { reason } => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("the ledger would reject it: {reason}"),
        )),
    }
}

/// Query of `GET /v1/availability`.
#[derive(Debug, Deserialize)]
pub(super) struct AvailabilityQuery {
    pool: String,
    #[serde(default)]
    from: Option<Timestamp>,
    #[serde(default)]
    to: Option<Timestamp>,
    /// With `hours`: the GE to find the earliest confirmable window for.
    #[serde(default)]
    ge: Option<gpuledger_schemas::Rational>,
    #[serde(default)]
    hours: Option<gpuledger_schemas::Decimal>,
}

const WEEK_MICROS: i64 = 7 * 24 * 3_600_000_000;

/// `GET /v1/availability?pool=&from=&to=[&ge=&hours=]`: reservable spare
/// capacity over time (default: the next seven days) and, with `ge` and
/// `hours`, the earliest start a reservation of that size would be confirmed.
pub(super) async fn get_availability(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<AvailabilityQuery>,
) -> Result<Response, ApiError> {
    role(&state, &headers)?;
    let from = query.from.unwrap_or_else(Timestamp::now);
    let to = query.to.unwrap_or(from.plus_micros(WEEK_MICROS));
    let map = read_ledgers(&state)?;
    let Some(ledger) = map.values().find(|l| l.has_pool(&query.pool)) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown pool {:?}", query.pool),
        ));
    };
    let windows = ledger
        .availability(&query.pool, from, to)
        .unwrap_or_default();
    let earliest = match (&query.ge, &query.hours) {
        (Some(ge), Some(hours)) => {
            let micros = (hours.to_rational()
                * gpuledger_schemas::Rational::from_integer(3_600_000_000))
            .round_half_even(0)
            .to_string()
            .parse::<i64>()
            .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "hours is out of range"))?;
            let ge = Ge::from_rational(ge);
            let horizon = from.plus_micros(WEEK_MICROS * 52);
            Some(ledger.earliest_window(&query.pool, &ge, micros, from, horizon))
        }
        (None, None) => None,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "ge and hours go together",
            ));
        }
    };
    let body = serde_json::json!({
        "pool": query.pool,
        "windows": windows.iter().map(|w| serde_json::json!({
            "from": w.from.to_string(), "to": w.to.to_string(), "free_ge": w.free_ge.to_string(),
        })).collect::<Vec<_>>(),
        "earliest_start": earliest.map(|e| e.map(|t| t.to_string())),
    });
    Ok(Json(body).into_response())
}

/// `GET /v1/tenants/{tenant}`: quota, use and reservations per pool. A team
/// lead reads only its own tenant.
pub(super) async fn get_tenant(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path(tenant): Path<String>,
) -> Result<Response, ApiError> {
    let role = role(&state, &headers)?.clone();
    acting_tenant(&role, Some(tenant.clone()))?;
    let map = read_ledgers(&state)?;
    let pools: Vec<serde_json::Value> = map
        .values()
        .flat_map(|l| l.tenant(&tenant))
        .map(|t| {
            serde_json::json!({
                "pool": t.pool,
                "nominal_ge": t.nominal_ge.to_string(),
                "burst_ge": t.burst_ge.to_string(),
                "use": {
                    "reserved": t.reserved_use.to_string(),
                    "quota": t.quota_use.to_string(),
                    "burst": t.burst_use.to_string(),
                },
                "active_reserved_ge": t.active_reserved_ge.to_string(),
                "month_to_date": t.month_to_date.as_ref().map(|(spend, hours)| serde_json::json!({
                    "spend": spend.round_half_even(2).to_string(),
                    "gpu_hours": hours.round_half_even(2).to_string(),
                })),
                "monthly_budget": t.monthly_budget.as_ref().map(ToString::to_string),
                "monthly_gpu_hours": t.monthly_gpu_hours.as_ref().map(ToString::to_string),
                "reservations": t.reservations.iter().map(|(id, ge, start, end, confirmed)| serde_json::json!({
                    "reservation_id": id, "ge": ge.to_string(), "start": start.to_string(),
                    "end": end.to_string(), "confirmed": confirmed,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "tenant": tenant, "pools": pools })).into_response())
}

/// The ledger worker's state, for reading.
fn read_ledgers(
    state: &ApiState,
) -> Result<
    std::sync::RwLockReadGuard<'_, std::collections::BTreeMap<i32, crate::ledger::Ledger>>,
    ApiError,
> {
    state.ledgers.read().map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ledger state unavailable",
        )
    })
}
