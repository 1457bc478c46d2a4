//! Who sets an event's id and time (docs/security.md, "Envelopes").
//!
//! The ledger's clock is the latest `event_time` it applied, and it never
//! goes back; an `event_id` is the ledger's dedupe key. So neither is left
//! to a caller the ledger cannot trust with them:
//!
//! - a scheduler's or a team lead's event gets the control API's time and
//!   an id of the API's making. An id the caller sent is kept only as an
//!   idempotency key of that caller: the same key from the same caller
//!   gives the same id (a retry is a duplicate), and no caller's key can
//!   be another caller's id;
//! - an admin, a trusted producer, keeps its ids, and its times within a
//!   skew of the API's clock (live), or any time up to that skew ahead
//!   (`?mode=import`, for bulk historical import).

use std::time::Duration;

use gpuledger_common::auth::Role;
use gpuledger_schemas::Timestamp;
use serde_json::{Map, Value};

/// How far an admin's `event_time` may be from the API's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skew(pub Duration);

impl Default for Skew {
    /// Five minutes: more than clocks kept by NTP ever drift apart.
    fn default() -> Self {
        Skew(Duration::from_secs(300))
    }
}

impl Skew {
    fn micros(self) -> i64 {
        i64::try_from(self.0.as_micros()).unwrap_or(i64::MAX)
    }
}

/// How `POST /v1/events` takes an admin's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Events of now: times within the skew either way.
    #[default]
    Live,
    /// Bulk historical import: any past time (an admin's only).
    Import,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "live" => Ok(Mode::Live),
            "import" => Ok(Mode::Import),
            other => Err(format!("mode {other:?} is not live or import")),
        }
    }
}

/// The longest idempotency key a caller may send as `event_id`.
pub const MAX_KEY_LEN: usize = 200;

/// Why an envelope was refused: the field and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub field: &'static str,
    pub message: String,
}

fn refused(field: &'static str, message: String) -> Refused {
    Refused { field, message }
}

/// Who the caller is, for its idempotency keys: keys of different callers
/// never meet.
fn scope(role: &Role) -> Option<String> {
    match role {
        Role::Admin => None,
        Role::Scheduler => Some("scheduler".to_owned()),
        Role::TeamLead { tenant } => Some(format!("lead.{tenant}")),
        Role::Finance => Some("finance".to_owned()),
    }
}

/// Sets the envelope of `event` (one JSON object of `POST /v1/events`)
/// as `role` may have it at `now`: stamps the id and time of an untrusted
/// caller (`fresh` makes an id when it sent no key), checks an admin's
/// time against `skew` in `mode`.
pub fn settle(
    event: &mut Map<String, Value>,
    role: &Role,
    mode: Mode,
    skew: Skew,
    now: Timestamp,
    cluster: &str,
    fresh: impl FnOnce() -> String,
) -> Result<(), Refused> {
    let Some(scope) = scope(role) else {
        return check_admin_time(event, mode, skew, now);
    };
    if mode == Mode::Import {
        return Err(refused(
            "mode",
            "bulk import is for admin tokens only".to_owned(),
        ));
    }
    let id = match event.get("event_id") {
        None | Some(Value::Null) => fresh(),
        Some(Value::String(key)) if !key.trim().is_empty() => {
            if key.len() > MAX_KEY_LEN {
                return Err(refused(
                    "event_id",
                    format!(
                        "an idempotency key of {} bytes is longer than {MAX_KEY_LEN}",
                        key.len()
                    ),
                ));
            }
            format!("api-{scope}-{key}")
        }
        Some(_) => {
            return Err(refused(
                "event_id",
                "must be a non-empty string (an idempotency key), or left out".to_owned(),
            ));
        }
    };
    event.insert("event_id".into(), Value::String(id));
    event.insert("event_time".into(), Value::String(now.to_string()));
    event.insert(
        "source".into(),
        Value::String(format!("control-api/{scope}")),
    );
    event.insert("cluster".into(), Value::String(cluster.to_owned()));
    Ok(())
}

/// An admin's `event_time`: within `skew` of `now` when live, not more
/// than `skew` ahead of it when importing.
fn check_admin_time(
    event: &Map<String, Value>,
    mode: Mode,
    skew: Skew,
    now: Timestamp,
) -> Result<(), Refused> {
    let Some(Value::String(text)) = event.get("event_time") else {
        // Missing or not a string: the event's own parse names it.
        return Ok(());
    };
    let Ok(at) = text.parse::<Timestamp>() else {
        return Ok(());
    };
    let ahead = at.as_micros().saturating_sub(now.as_micros());
    if ahead > skew.micros() {
        return Err(refused(
            "event_time",
            format!(
                "{at} is more than the allowed skew of {} s ahead of the control API's clock ({now})",
                skew.0.as_secs()
            ),
        ));
    }
    if mode == Mode::Live && -ahead > skew.micros() {
        return Err(refused(
            "event_time",
            format!(
                "{at} is more than the allowed skew of {} s before the control API's clock ({now}); \
                 post historical events with ?mode=import",
                skew.0.as_secs()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    const NOW: &str = "2026-12-07T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn lead() -> Role {
        Role::TeamLead {
            tenant: "team-a".into(),
        }
    }

    #[test]
    fn an_untrusted_callers_time_and_id_are_the_apis() {
        for role in [lead(), Role::Scheduler] {
            let mut e = event(
                r#"{"type":"ReservationRequest","event_id":"r-1","event_time":"9999-12-31T00:00:00Z","source":"x","cluster":"c"}"#,
            );
            settle(
                &mut e,
                &role,
                Mode::Live,
                Skew::default(),
                now(),
                "prod",
                || unreachable!("a key was given"),
            )
            .unwrap();
            assert_eq!(e["event_time"], NOW);
            assert_eq!(e["cluster"], "prod");
            let id = e["event_id"].as_str().unwrap();
            assert!(id.starts_with("api-") && id.ends_with("-r-1"), "{id}");
            assert_ne!(id, "r-1");
        }
        // A past time is stamped too, and no key gets a fresh id.
        let mut e = event(r#"{"event_time":"2001-01-01T00:00:00Z"}"#);
        settle(
            &mut e,
            &lead(),
            Mode::Live,
            Skew::default(),
            now(),
            "c",
            || "api-fresh-1".into(),
        )
        .unwrap();
        assert_eq!(e["event_time"], NOW);
        assert_eq!(e["event_id"], "api-fresh-1");
    }

    #[test]
    fn keys_of_two_callers_never_meet() {
        let id_of = |role: &Role| {
            let mut e = event(r#"{"event_id":"same"}"#);
            settle(
                &mut e,
                role,
                Mode::Live,
                Skew::default(),
                now(),
                "c",
                String::new,
            )
            .unwrap();
            e["event_id"].as_str().unwrap().to_owned()
        };
        let other = Role::TeamLead {
            tenant: "team-b".into(),
        };
        assert_ne!(id_of(&lead()), id_of(&other));
        assert_ne!(id_of(&lead()), id_of(&Role::Scheduler));
        assert_eq!(id_of(&lead()), id_of(&lead()));
    }

    #[test]
    fn keys_are_bounded_and_import_is_an_admins() {
        let long = format!(r#"{{"event_id":"{}"}}"#, "k".repeat(MAX_KEY_LEN + 1));
        let e = settle(
            &mut event(&long),
            &lead(),
            Mode::Live,
            Skew::default(),
            now(),
            "c",
            String::new,
        );
        assert_eq!(e.unwrap_err().field, "event_id");
        let e = settle(
            &mut event("{}"),
            &lead(),
            Mode::Import,
            Skew::default(),
            now(),
            "c",
            String::new,
        );
        assert_eq!(e.unwrap_err().field, "mode");
    }

    #[test]
    fn an_admins_time_is_kept_within_the_skew() {
        let admin = |time: &str, mode: Mode| {
            let mut e = event(&format!(r#"{{"event_time":"{time}","event_id":"mine"}}"#));
            let result = settle(
                &mut e,
                &Role::Admin,
                mode,
                Skew::default(),
                now(),
                "c",
                String::new,
            );
            assert_eq!(e["event_id"], "mine");
            result
        };
        assert!(admin("2026-12-07T12:04:59Z", Mode::Live).is_ok());
        assert!(admin("2026-12-07T11:55:00Z", Mode::Live).is_ok());
        let ahead = admin("2026-12-07T12:05:01Z", Mode::Live).unwrap_err();
        assert_eq!(ahead.field, "event_time");
        assert!(ahead.message.contains("300 s ahead"), "{}", ahead.message);
        let behind = admin("2026-11-01T00:00:00Z", Mode::Live).unwrap_err();
        assert!(
            behind.message.contains("?mode=import"),
            "{}",
            behind.message
        );
        assert!(admin("2026-11-01T00:00:00Z", Mode::Import).is_ok());
        assert!(admin("9999-12-31T00:00:00Z", Mode::Import).is_err());
    }
}
