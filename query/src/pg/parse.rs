//! How PostgreSQL SQL becomes a plan.
//!
//! Queries over the catalog (`pg_catalog`, `information_schema`, the
//! statements psql's `\d` or Grafana send to list tables and columns) go
//! through `datafusion-postgres`'s compatibility rewrites, which make many
//! of them plannable at all. Queries over gpuledger's own tables are
//! parsed as PostgreSQL without those rewrites, exactly as the HTTP API
//! parses them, so both faces give the same answer: one rewrite replaces
//! a correlated subquery in a `SELECT` list with `NULL`, harmless for a
//! client's catalog probe, wrong for a cost query.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Statement, visit_relations};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_postgres::QueryHook;
use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, into_pg_type};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::Type;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::results::FieldInfo;
use datafusion_postgres::pgwire::api::stmt::QueryParser;
use datafusion_postgres::pgwire::error::PgWireResult;

use super::session::{engine_error, error};

/// A prepared statement: its text and, unless empty, its parsed form and
/// plan.
pub(crate) type Prepared = (String, Option<(Statement, LogicalPlan)>);

/// Parses and plans PostgreSQL statements (see the module docs).
pub(crate) struct SqlParser {
    ctx: Arc<SessionContext>,
    compatible: PostgresCompatibilityParser,
    hooks: Vec<Arc<dyn QueryHook>>,
}

impl std::fmt::Debug for SqlParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlParser").finish_non_exhaustive()
    }
}

/// Whether `statement` reads the catalog, or no table at all (`SELECT
/// version()`, `SHOW …`): those get the compatibility rewrites.
fn for_clients(statement: &Statement) -> bool {
    let mut relations = 0;
    let reads_catalog = visit_relations(statement, |name| {
        relations += 1;
        let name = name.to_string().to_lowercase();
        let last = name
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .trim_matches('"');
        if name.contains("pg_catalog")
            || name.contains("information_schema")
            || last.starts_with("pg_")
        {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    reads_catalog.is_break() || relations == 0
}

impl SqlParser {
    pub(crate) fn new(ctx: Arc<SessionContext>, hooks: Vec<Arc<dyn QueryHook>>) -> Self {
        Self {
            ctx,
            compatible: PostgresCompatibilityParser::new(),
            hooks,
        }
    }

    /// The statements of `sql`, each in the form it is planned from.
    pub(crate) fn parse(&self, sql: &str) -> PgWireResult<Vec<Statement>> {
        let compatible = self
            .compatible
            .parse(sql)
            .map_err(|e| error("42601", e.to_string()))?;
        let Ok(plain) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
            return Ok(compatible);
        };
        if plain.len() != compatible.len() {
            return Ok(compatible);
        }
        Ok(plain
            .into_iter()
            .zip(compatible)
            .map(|(plain, compatible)| {
                if for_clients(&plain) {
                    compatible
                } else {
                    plain
                }
            })
            .collect())
    }

    /// The logical plan of `statement`.
    pub(crate) async fn plan(&self, statement: Statement) -> PgWireResult<LogicalPlan> {
        self.ctx
            .state()
            .statement_to_plan(DfStatement::Statement(Box::new(statement)))
            .await
            .map_err(engine_error)
    }
}

/// The parameters `plan` takes, `$1` first, with the types it expects
/// where the engine could tell.
pub(crate) fn parameter_types(plan: &LogicalPlan) -> PgWireResult<Vec<Option<DataType>>> {
    let types: HashMap<String, Option<DataType>> =
        plan.get_parameter_types().map_err(engine_error)?;
    let mut ordered: Vec<(usize, Option<DataType>)> = types
        .into_iter()
        .map(|(id, data_type)| {
            let position = id.trim_start_matches('$').parse().unwrap_or(usize::MAX);
            (position, data_type)
        })
        .collect();
    ordered.sort_by_key(|(position, _)| *position);
    Ok(ordered.into_iter().map(|(_, t)| t).collect())
}

#[async_trait]
impl QueryParser for SqlParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.parse(sql)?;
        if statements.is_empty() {
            return Ok(None);
        }
        let statement = statements.remove(0);
        let text = statement.to_string();
        for hook in &self.hooks {
            if let Some(plan) = hook
                .handle_extended_parse_query(&statement, &self.ctx, client)
                .await
            {
                return Ok(Some((text, Some((statement, plan?)))));
            }
        }
        let plan = self.plan(statement.clone()).await?;
        Ok(Some((text, Some((statement, plan)))))
    }

    fn get_parameter_types(&self, prepared: &Prepared) -> PgWireResult<Vec<Type>> {
        let (_, Some((_, plan))) = prepared else {
            return Ok(Vec::new());
        };
        parameter_types(plan)?
            .iter()
            .map(|t| t.as_ref().map_or(Ok(Type::UNKNOWN), into_pg_type))
            .collect()
    }

    fn get_result_schema(
        &self,
        prepared: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match prepared {
            (_, Some((_, plan))) if !matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Dml(_)) => {
                arrow_schema_to_pg_fields(
                    plan.schema().as_arrow(),
                    format.unwrap_or(&Format::UnifiedText),
                    None,
                )
            }
            _ => Ok(Vec::new()),
        }
    }
}
