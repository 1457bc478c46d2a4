//! Who may read what (DESIGN §7). `admin` and `finance` tokens read every
//! tenant; a team lead's token reads only its tenant's rows. That is
//! enforced in the query plan, never in SQL text: every scan of a table or
//! view with a `tenant` column gets a filter on the lead's tenant right
//! above it, wherever the scan sits — in a join, a union, a CTE, a
//! subquery in an expression.

use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder, TableScanBuilder, col, lit};
use datafusion::prelude::Column;
use gpuledger_common::auth::{Role, Tokens};

/// The column that names a row's tenant.
const TENANT: &str = "tenant";

/// What every caller's SQL may be: no DDL, no DML, no `SET` or other
/// statements; so no views or external tables of their own, no `COPY` to
/// or from files.
pub fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

/// What a caller may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Every tenant.
    All,
    /// One tenant's rows only.
    Tenant(String),
}

/// Why a caller may not read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one we do not know.
    Unauthenticated,
    /// A token whose role reads nothing here.
    Forbidden(&'static str),
}

/// The tokens of the query service. With none configured every caller
/// reads everything (a local set-up; the service warns at start).
#[derive(Debug, Clone, Default)]
pub struct Gate {
    tokens: Tokens,
}

impl Gate {
    /// A gate over `tokens`.
    pub fn new(tokens: Tokens) -> Self {
        Self { tokens }
    }

    /// Whether any token is configured.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// What an `Authorization` header's bearer token may read.
    pub fn bearer(&self, header: Option<&str>) -> Result<Access, Refusal> {
        if self.is_open() {
            return Ok(Access::All);
        }
        access_of(self.tokens.role(header))
    }

    /// What a bare token (a PostgreSQL password) may read.
    pub fn token(&self, token: &str) -> Result<Access, Refusal> {
        if self.is_open() {
            return Ok(Access::All);
        }
        access_of(self.tokens.role_of_token(token))
    }
}

fn access_of(role: Option<&Role>) -> Result<Access, Refusal> {
    match role {
        None => Err(Refusal::Unauthenticated),
        Some(Role::Admin | Role::Finance) => Ok(Access::All),
        Some(Role::TeamLead { tenant }) => Ok(Access::Tenant(tenant.clone())),
        Some(Role::Scheduler) => Err(Refusal::Forbidden(
            "a scheduler token asks for admissions; reading needs admin, finance or a team lead's token",
        )),
    }
}

impl Access {
    /// `plan` as this caller may run it.
    pub fn restrict(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        match self {
            Access::All => Ok(plan),
            Access::Tenant(tenant) => only_tenant(plan, tenant),
        }
    }

    /// Whether the caller may read `tenant`'s rows.
    pub fn allows(&self, tenant: &str) -> bool {
        match self {
            Access::All => true,
            Access::Tenant(own) => own == tenant,
        }
    }
}

/// Puts `tenant = <tenant>` above every scan whose table has a `tenant`
/// column, subqueries included. A scan is first widened to all its columns
/// and its row limit dropped, so that neither a projection without
/// `tenant` nor a limit taken before the filter can get in the way; a
/// projection then gives the plan the columns it had.
fn only_tenant(plan: LogicalPlan, tenant: &str) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        if scan.source.schema().index_of(TENANT).is_err() {
            return Ok(Transformed::no(node));
        }
        let columns: Vec<_> = scan
            .projected_schema
            .columns()
            .into_iter()
            .map(datafusion::prelude::Expr::Column)
            .collect();
        let whole = TableScanBuilder::new(scan.table_name.clone(), scan.source.clone())
            .with_filters(scan.filters.clone())
            .build()?;
        let tenant_column = Column::new(Some(scan.table_name.clone()), TENANT);
        let restricted = LogicalPlanBuilder::from(LogicalPlan::TableScan(whole))
            .filter(col(tenant_column).eq(lit(tenant)))?
            .project(columns)?;
        let restricted = match scan.fetch {
            Some(fetch) => restricted.limit(0, Some(fetch))?,
            None => restricted,
        };
        Ok(Transformed::yes(restricted.build()?))
    })
    .map(|t| t.data)
}
