//! Bearer tokens and roles of the control API (DESIGN §8), and what each
//! role may do here: the token vocabulary is `gpuledger-common`'s.

use axum::http::{HeaderMap, StatusCode, header};
use gpuledger_schemas::{Event, EventBody, EventType};

pub use gpuledger_common::auth::{Role, TokenArg, TokenSpec, Tokens};

use super::{ApiError, ApiState};

pub(super) fn role<'a>(state: &'a ApiState, headers: &HeaderMap) -> Result<&'a Role, ApiError> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state
        .tokens
        .role(header)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required"))
}

/// Whether `role` may append `event`.
pub(super) fn may_append(role: &Role, event: &Event) -> Result<(), String> {
    let tenant_of = |body: &EventBody| -> Option<String> {
        match body {
            EventBody::ReservationRequest(r) => Some(r.tenant.clone()),
            EventBody::ReservationCancel(r) => Some(r.tenant.clone()),
            _ => None,
        }
    };
    match role {
        Role::Admin => Ok(()),
        Role::Finance => Err("a finance token reads; it cannot append events".to_owned()),
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

/// Reservations are written by admins, schedulers and team leads (for
/// their own tenant), never by finance.
pub(super) fn require_writer(role: &Role, what: &str) -> Result<(), ApiError> {
    if *role == Role::Finance {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{what}: a finance token reads; it cannot write"),
        ));
    }
    Ok(())
}

/// The tenant a call acts for: a team lead only ever for its own.
pub(super) fn acting_tenant(role: &Role, asked: Option<String>) -> Result<String, ApiError> {
    match (role, asked) {
        (Role::TeamLead { tenant }, Some(t)) if &t != tenant => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("a team lead of {tenant:?} cannot act for {t:?}"),
        )),
        (Role::TeamLead { tenant }, _) => Ok(tenant.clone()),
        (_, Some(t)) => Ok(t),
        (_, None) => Err(ApiError::new(StatusCode::BAD_REQUEST, "tenant is required")),
    }
}

/// Admission requests come from schedulers (and admins), not team leads.
pub(super) fn require_scheduler(role: &Role, what: &str) -> Result<(), ApiError> {
    if matches!(role, Role::TeamLead { .. } | Role::Finance) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{what}: the scheduler or admin role is needed"),
        ));
    }
    Ok(())
}
