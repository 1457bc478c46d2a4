//! Who may read what (DESIGN §7). `admin` and `finance` tokens read every
//! tenant; a team lead's token reads only its tenant's rows. That is
//! enforced in the query plan, never in SQL text: every scan, wherever it
//! sits (a join, a union, a CTE, a view, a subquery in an expression), is
//! replaced by one that yields only the lead's rows before any expression
//! of the query sees them ([`crate::scoped`]).

use std::sync::Arc;

use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::plan_err;
use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::{LogicalPlan, TableScanBuilder};
use gpuledger_common::auth::{Role, Tokens};

use crate::scoped::Scoped;
use crate::views::StatementView;

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

    /// The tokens, for deriving login keys from them.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// What a caller proven to hold a token of `role` may read.
    pub fn role(&self, role: &Role) -> Result<Access, Refusal> {
        access_of(Some(role))
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

/// `plan` with every table scan replaced by a [`Scoped`] scan of the same
/// table that yields only `tenant`'s rows, subqueries and inlined views
/// included. A statement view is replaced by one that builds only the
/// tenant's rows. `EXPLAIN ANALYZE` is refused: its counts are taken
/// inside the scans.
fn only_tenant(plan: LogicalPlan, tenant: &str) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Analyze(_) => {
            plan_err!("EXPLAIN ANALYZE is not available to a team lead's token; EXPLAIN is")
        }
        LogicalPlan::TableScan(scan) => {
            let provider = source_as_provider(&scan.source)?;
            let provider = match provider.downcast_ref::<StatementView>() {
                Some(view) => Arc::new(view.only(tenant)),
                None => provider,
            };
            let name = scan.table_name.to_string();
            let scoped = Scoped::new(name, provider, tenant);
            let replaced =
                TableScanBuilder::new(scan.table_name, provider_as_source(Arc::new(scoped)))
                    .with_projection(scan.projection)
                    .with_filters(scan.filters)
                    .with_fetch(scan.fetch)
                    .build()?;
            Ok(Transformed::yes(LogicalPlan::TableScan(replaced)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}
