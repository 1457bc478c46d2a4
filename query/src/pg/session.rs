//! How one PostgreSQL query runs: parsed with PostgreSQL's dialect, client
//! settings and transaction statements answered by the protocol's hooks,
//! everything else planned, checked read-only, restricted to what the
//! login may read and run under the time limit, rows streamed as they come.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Set, Statement};
use datafusion_postgres::QueryHook;
use datafusion_postgres::arrow_pg::datatypes::df::deserialize_parameters;
use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::pgwire::api::portal::{Format, Portal};
use datafusion_postgres::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use datafusion_postgres::pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use datafusion_postgres::pgwire::api::store::PortalStore;
use datafusion_postgres::pgwire::api::{ClientInfo, ClientPortalStore};
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::PgWireBackendMessage;
use datafusion_postgres::pgwire::messages::data::DataRow;
use datafusion_postgres::pgwire::types::format::FormatOptions;
use futures::{Sink, StreamExt};

use super::parse::{Prepared, SqlParser, parameter_types};
use crate::access::Access;
use crate::failure::{Stage, told};
use crate::limits::{Limits, Slots, for_one_query};

/// Runs the queries of every PostgreSQL connection.
pub(crate) struct Session {
    ctx: Arc<SessionContext>,
    parser: Arc<SqlParser>,
    hooks: Vec<Arc<dyn QueryHook>>,
    timeout: Duration,
    limits: Limits,
    slots: Slots,
}

impl Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session", &self.ctx.session_id())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Session {
    pub(crate) fn new(ctx: Arc<SessionContext>, timeout: Duration, limits: Limits) -> Self {
        let hooks: Vec<Arc<dyn QueryHook>> =
            vec![Arc::new(ClientSettings), Arc::new(TransactionStatementHook)];
        let parser = Arc::new(SqlParser::new(ctx.clone(), hooks.clone()));
        Self {
            ctx,
            parser,
            hooks,
            timeout,
            slots: Slots::new(&limits),
            limits,
        }
    }

    /// Runs `plan` for `client`: read-only, restricted to what its login
    /// may read, within the service's time limit or the client's shorter
    /// `statement_timeout`.
    async fn run<C>(&self, client: &C, plan: LogicalPlan, format: &Format) -> PgWireResult<Response>
    where
        C: ClientInfo + ?Sized,
    {
        let access: Arc<Access> = client
            .session_extensions()
            .get::<Access>()
            .ok_or_else(|| error("28000", "not logged in"))?;
        let failed = |stage: Stage| {
            let access = access.clone();
            move |e: DataFusionError| told_error(&access, stage, &e)
        };
        crate::access::read_only()
            .verify_plan(&plan)
            .map_err(|e| error("25006", e.to_string()))?;
        let plan = access.restrict(plan).map_err(failed(Stage::Planning))?;
        let limit = match statement_timeout(client) {
            Some(asked) if asked < self.timeout => asked,
            _ => self.timeout,
        };
        let deadline = tokio::time::Instant::now() + limit;
        let too_slow = || {
            error(
                "57014",
                format!("canceling statement: it ran past {limit:?}"),
            )
        };
        let permit = tokio::time::timeout_at(deadline, self.slots.enter(&access))
            .await
            .map_err(|_| {
                error(
                    "53300",
                    format!("no place for the query within {limit:?}: as many queries of this role as may run at once are running"),
                )
            })?;
        // Its own memory, within the service's.
        let run_ctx = for_one_query(&self.ctx.state(), self.limits.query_memory_bytes);
        let frame = tokio::time::timeout_at(deadline, run_ctx.execute_logical_plan(plan))
            .await
            .map_err(|_| too_slow())?
            .map_err(failed(Stage::Running))?;
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        let fields: Arc<Vec<FieldInfo>> = Arc::new(arrow_schema_to_pg_fields(
            frame.schema().as_arrow(),
            format,
            Some(options),
        )?);
        let batches = tokio::time::timeout_at(deadline, frame.execute_stream())
            .await
            .map_err(|_| too_slow())?
            .map_err(failed(Stage::Running))?;
        let answer = Answer {
            deadline,
            limit,
            access,
            max_bytes: self.limits.max_result_bytes,
            _permit: permit,
        };
        let rows = rows_until(batches, fields.clone(), answer);
        Ok(Response::Query(QueryResponse::new(fields, rows)))
    }
}

/// Where `SET statement_timeout` leaves the client's limit.
const STATEMENT_TIMEOUT_MS: &str = "statement_timeout_ms";

/// The time limit the client set for its statements, if any.
fn statement_timeout<C: ClientInfo + ?Sized>(client: &C) -> Option<Duration> {
    let ms: u64 = client.metadata().get(STATEMENT_TIMEOUT_MS)?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// What bounds an answer as its rows are sent.
struct Answer {
    deadline: tokio::time::Instant,
    limit: Duration,
    access: Arc<Access>,
    /// The most bytes of batches it may send.
    max_bytes: usize,
    /// The query's place among its role's, held until the last row.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// The rows of `batches`, ending in an error if the deadline passes first
/// or the answer grows past its bound.
fn rows_until(
    batches: SendableRecordBatchStream,
    fields: Arc<Vec<FieldInfo>>,
    answer: Answer,
) -> impl futures::Stream<Item = PgWireResult<DataRow>> + Send + 'static {
    let answer = Arc::new(answer);
    futures::stream::unfold(Some((batches, 0usize)), move |state| {
        let fields = fields.clone();
        let answer = answer.clone();
        async move {
            let (mut batches, sent) = state?;
            let (rows, sent): (Vec<PgWireResult<DataRow>>, usize) =
                match tokio::time::timeout_at(answer.deadline, batches.next()).await {
                    Err(_) => {
                        let message =
                            format!("canceling statement: it ran past {:?}", answer.limit);
                        return Some((vec![Err(error("57014", message))], None));
                    }
                    Ok(None) => return None,
                    Ok(Some(Err(e))) => {
                        let error = told_error(&answer.access, Stage::Running, &e);
                        return Some((vec![Err(error)], None));
                    }
                    Ok(Some(Ok(batch))) => {
                        let sent = sent.saturating_add(batch.get_array_memory_size());
                        if sent > answer.max_bytes {
                            let message = format!(
                                "the answer is larger than {} MiB (--max-result-mb): ask for fewer rows or columns",
                                answer.max_bytes >> 20
                            );
                            return Some((vec![Err(error("54000", message))], None));
                        }
                        (encode_recordbatch(fields.clone(), batch).collect(), sent)
                    }
                };
            Some((rows, Some((batches, sent))))
        }
    })
    .flat_map(futures::stream::iter)
}

/// An `ERROR` with SQLSTATE `code`.
pub(crate) fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// The engine's own message, with the SQLSTATE class that fits: for
/// errors of planning, which quote only the query's text.
pub(crate) fn engine_error(e: DataFusionError) -> PgWireError {
    told_error(&Access::All, Stage::Planning, &e)
}

/// What `access` is told of `e`, raised at `stage` ([`crate::failure`]).
fn told_error(access: &Access, stage: Stage, e: &DataFusionError) -> PgWireError {
    let told = told(access, stage, e);
    error(told.kind.sqlstate(), told.message)
}

/// The values of `portal`'s parameters, typed as `plan` expects them.
fn parameters(portal: &Portal<Prepared>, plan: &LogicalPlan) -> PgWireResult<ParamValues> {
    let types = parameter_types(plan)?;
    let refs: Vec<Option<&DataType>> = types.iter().map(Option::as_ref).collect();
    deserialize_parameters(portal, &refs)
}

#[async_trait]
impl SimpleQueryHandler for Session {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.parser.parse(query)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(statements.len());
        'statements: for statement in statements {
            for hook in &self.hooks {
                if let Some(answer) = hook
                    .handle_simple_query(&statement, &self.ctx, client)
                    .await
                {
                    responses.push(answer?);
                    continue 'statements;
                }
            }
            let plan = self.parser.plan(statement).await?;
            responses.push(self.run(client, plan, &Format::UnifiedText).await?);
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = Prepared;
    type QueryParser = SqlParser;

    fn query_parser(&self) -> Arc<SqlParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (_, Some((statement, plan))) = &portal.statement.statement else {
            return Ok(Response::EmptyQuery);
        };
        let no_parameters = ParamValues::List(vec![]);
        for hook in &self.hooks {
            if let Some(answer) = hook
                .handle_extended_query(statement, plan, &no_parameters, &self.ctx, client)
                .await
            {
                return answer;
            }
        }
        let values = parameters(portal, plan)?;
        let plan = plan
            .clone()
            .replace_params_with_values(&values)
            .map_err(engine_error)?;
        self.run(client, plan, &portal.result_column_format).await
    }
}

/// `SET` and `SHOW` for what belongs to the client's connection (time
/// zone, date style, statement timeout, application name …), answered by
/// `datafusion-postgres`'s hook. The engine's own settings are shared by
/// every connection, so `SET datafusion.…` is refused; any other `SET` a
/// driver sends is acknowledged and ignored.
#[derive(Debug)]
struct ClientSettings;

/// The `SET` statements whose effect stays within the connection.
fn is_client_setting(set: &Set) -> bool {
    match set {
        Set::SingleAssignment {
            scope: None,
            hivevar: false,
            variable,
            ..
        } => matches!(
            variable.to_string().to_lowercase().as_str(),
            "statement_timeout"
                | "datestyle"
                | "bytea_output"
                | "intervalstyle"
                | "application_name"
                | "extra_float_digits"
                | "search_path"
        ),
        Set::SetTimeZone { local: false, .. } => true,
        _ => false,
    }
}

/// What `ClientSettings` does with `statement` instead of the hook, if
/// anything.
fn settings_answer(statement: &Statement) -> Option<PgWireResult<Response>> {
    let Statement::Set(set) = statement else {
        return None;
    };
    if is_client_setting(set) {
        return None;
    }
    if statement.to_string().to_lowercase().contains("datafusion.") {
        return Some(Err(error(
            "25006",
            "the engine's settings are the service's: SET datafusion.… is not allowed",
        )));
    }
    Some(Ok(Response::Execution(Tag::new("SET"))))
}

#[async_trait]
impl QueryHook for ClientSettings {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Some(answer) = settings_answer(statement) {
            return Some(answer);
        }
        SetShowHook
            .handle_simple_query(statement, ctx, client)
            .await
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        ctx: &SessionContext,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        SetShowHook
            .handle_extended_parse_query(statement, ctx, client)
            .await
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        plan: &LogicalPlan,
        parameters: &ParamValues,
        ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Some(answer) = settings_answer(statement) {
            return Some(answer);
        }
        SetShowHook
            .handle_extended_query(statement, plan, parameters, ctx, client)
            .await
    }
}
