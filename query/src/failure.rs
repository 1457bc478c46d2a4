//! What a caller is told when its query fails.
//!
//! An error raised while a query runs can quote the values it failed on
//! (`Cannot cast string '…'`), and a team lead must never see another
//! tenant's values, nor a file path of the history. So a lead is told only
//! the kind of failure and an id; the service's log has the full text
//! under that id. Errors of planning — the SQL text against the tables'
//! schemas, before any row is read — name only what the query wrote, and
//! every caller gets them in full. Admin and finance tokens read every
//! tenant, so they get every error in full.

use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::error::DataFusionError;

use crate::access::Access;

/// When a query failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Turning the SQL into a plan: no row has been read.
    Planning,
    /// Optimizing, scanning, computing, encoding.
    Running,
}

/// The class of a failure, for the caller and for SQLSTATE codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The SQL does not parse, or names what is not there.
    Syntax,
    /// The query needs more memory than it may have.
    ResourcesExhausted,
    /// A feature the engine does not have.
    NotSupported,
    /// A function, cast or operator failed on a value.
    Evaluation,
    /// Anything else while the query ran.
    Execution,
}

impl Kind {
    /// The kind of `e`.
    pub fn of(e: &DataFusionError) -> Kind {
        match e.find_root() {
            DataFusionError::SQL(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..) => Kind::Syntax,
            DataFusionError::ResourcesExhausted(_) => Kind::ResourcesExhausted,
            DataFusionError::NotImplemented(_) => Kind::NotSupported,
            DataFusionError::ArrowError(..) => Kind::Evaluation,
            _ => Kind::Execution,
        }
    }

    /// The words a lead reads.
    fn describe(self) -> &'static str {
        match self {
            Kind::Syntax => "the query is not valid",
            Kind::ResourcesExhausted => "the query needs more memory than a query may use",
            Kind::NotSupported => "the query uses a feature the engine does not have",
            Kind::Evaluation => "a function, cast or operator failed on a value",
            Kind::Execution => "the query failed while it ran",
        }
    }

    /// The SQLSTATE for the PostgreSQL protocol.
    pub fn sqlstate(self) -> &'static str {
        match self {
            Kind::Syntax => "42000",
            Kind::ResourcesExhausted => "53200",
            Kind::NotSupported => "0A000",
            Kind::Evaluation => "22000",
            Kind::Execution => "XX000",
        }
    }
}

/// What the caller is told of a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    pub kind: Kind,
    pub message: String,
}

/// What `access` is told of `e`, raised at `stage`. A redacted failure is
/// logged with its id and full text.
pub fn told(access: &Access, stage: Stage, e: &DataFusionError) -> Told {
    let kind = Kind::of(e);
    let full = e.to_string();
    if matches!(access, Access::All) || stage == Stage::Planning {
        return Told {
            kind,
            message: full,
        };
    }
    let id = next_id();
    tracing::warn!(error_id = %id, error = %full, "a team lead's query failed");
    Told {
        kind,
        message: format!(
            "{} (error id {id}; the service's log has the details)",
            kind.describe()
        ),
    }
}

/// A message for `access` of a failure that is not the engine's (an
/// encoder's, a statement's): in full for every-tenant readers, else
/// redacted as a running failure.
pub fn told_text(access: &Access, kind: Kind, full: &str) -> String {
    if matches!(access, Access::All) {
        return full.to_owned();
    }
    let id = next_id();
    tracing::warn!(error_id = %id, error = %full, "a team lead's request failed");
    format!(
        "{} (error id {id}; the service's log has the details)",
        kind.describe()
    )
}

/// An id unique within this run of the service: the start time's seconds
/// and a count.
fn next_id() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("q{start:x}-{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lead_reads_no_value_of_a_running_failure() {
        let e = DataFusionError::ArrowError(
            Box::new(datafusion::arrow::error::ArrowError::CastError(
                "Cannot cast string 'team-vision|job-1' to value of Int32 type".into(),
            )),
            None,
        );
        let lead = Access::Tenant("team-search".into());
        let told = told(&lead, Stage::Running, &e);
        assert_eq!(told.kind, Kind::Evaluation);
        assert!(!told.message.contains("team-vision"), "{}", told.message);
        assert!(told.message.contains("error id q"), "{}", told.message);
        let admin = super::told(&Access::All, Stage::Running, &e);
        assert!(admin.message.contains("team-vision"));
    }

    #[test]
    fn planning_failures_are_told_in_full() {
        let e = DataFusionError::Plan("table 'nope' not found".into());
        let lead = Access::Tenant("team-search".into());
        let told = told(&lead, Stage::Planning, &e);
        assert_eq!(told.kind, Kind::Syntax);
        assert_eq!(
            told.message,
            "Error during planning: table 'nope' not found"
        );
    }

    #[test]
    fn ids_differ() {
        assert_ne!(next_id(), next_id());
    }
}
