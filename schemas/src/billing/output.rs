//! A computed statement and its JSON form (DESIGN §7).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::exact::Decimal;
use crate::pricing::StatementLine;

use super::Period;

/// The statement of one period: every tenant's lines, rounded, and the
/// platform's view.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub period: Period,
    pub currency: String,
    /// Sorted by tenant name.
    pub tenants: Vec<TenantStatement>,
    pub platform: PlatformLines,
}

/// One tenant's statement.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantStatement {
    pub tenant: String,
    /// Every line of [`StatementLine`], in statement order, `total` last.
    pub lines: Vec<(StatementLine, Decimal)>,
    pub breakdown: Breakdown,
    /// What the lines are made of: the `billed` amounts of a line's
    /// charges add up to the line.
    pub charges: Vec<super::Charge>,
}

impl TenantStatement {
    /// One tenant's part of the JSON shape: tenant, lines, breakdown.
    pub fn to_json(&self) -> Value {
        let lines: Map<String, Value> = self
            .lines
            .iter()
            .map(|(line, amount)| (line.as_str().to_owned(), text(amount)))
            .collect();
        let b = &self.breakdown;
        let mut breakdown = Map::new();
        breakdown.insert("failed_work".into(), text(&b.failed_work));
        breakdown.insert("retried_work".into(), text(&b.retried_work));
        if let Some(idle) = &b.idle_allocated {
            breakdown.insert("idle_allocated".into(), text(idle));
        }
        breakdown.insert("completed_jobs".into(), json!(b.completed_jobs));
        breakdown.insert(
            "completed_work_units".into(),
            b.completed_work_units
                .iter()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect::<Map<_, _>>()
                .into(),
        );
        breakdown.insert(
            "cost_per_completed_job".into(),
            optional(&b.cost_per_completed_job),
        );
        breakdown.insert(
            "cost_per_work_unit".into(),
            b.cost_per_work_unit
                .iter()
                .map(|(k, v)| (k.clone(), optional(v)))
                .collect::<Map<_, _>>()
                .into(),
        );
        json!({"tenant": self.tenant, "lines": lines, "breakdown": breakdown})
    }

    /// The amount of `line`.
    pub fn line(&self, line: StatementLine) -> Decimal {
        self.lines
            .iter()
            .find(|(l, _)| *l == line)
            .map_or_else(Decimal::zero, |(_, amount)| amount.clone())
    }
}

/// Figures beside the lines, not added into `total`.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    pub failed_work: Decimal,
    pub retried_work: Decimal,
    /// `None` where no telemetry covers the tenant's allocations.
    pub idle_allocated: Option<Decimal>,
    pub completed_jobs: u64,
    /// `None` with no completed job.
    pub cost_per_completed_job: Option<Decimal>,
    /// Keyed by work unit name.
    pub completed_work_units: BTreeMap<String, Decimal>,
    /// Keyed by work unit name; `None` where the units add up to zero.
    pub cost_per_work_unit: BTreeMap<String, Option<Decimal>>,
}

/// The platform's view: capacity nobody held, and the sum of tenant totals.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformLines {
    pub unallocated: Decimal,
    pub total: Decimal,
}

fn text(d: &Decimal) -> Value {
    Value::String(d.to_string())
}

fn optional(d: &Option<Decimal>) -> Value {
    d.as_ref().map_or(Value::Null, text)
}

impl Statement {
    /// The JSON shape of `GET /v1/statements`.
    pub fn to_json(&self) -> Value {
        let tenants: Vec<Value> = self.tenants.iter().map(TenantStatement::to_json).collect();
        json!({
            "period": self.period.to_string(),
            "currency": self.currency,
            "tenants": tenants,
            "platform": {
                "unallocated": text(&self.platform.unallocated),
                "total": text(&self.platform.total),
            },
        })
    }

    /// The statement as `tenant` may see it: its own lines, and no
    /// platform figures (they add up every tenant's).
    pub fn only_tenant(&self, tenant: &str) -> Statement {
        Statement {
            period: self.period,
            currency: self.currency.clone(),
            tenants: self
                .tenants
                .iter()
                .filter(|t| t.tenant == tenant)
                .cloned()
                .collect(),
            platform: PlatformLines {
                unallocated: Decimal::zero(),
                total: Decimal::zero(),
            },
        }
    }

    /// One row per tenant and line: `(tenant, line, amount)`, the shape of
    /// the `chargeback` view.
    pub fn rows(&self) -> Vec<(&str, StatementLine, &Decimal)> {
        self.tenants
            .iter()
            .flat_map(|t| {
                t.lines
                    .iter()
                    .map(move |(line, amount)| (t.tenant.as_str(), *line, amount))
            })
            .collect()
    }
}
