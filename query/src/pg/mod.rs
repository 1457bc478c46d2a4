//! The PostgreSQL wire protocol face of the query service (DESIGN §7), for
//! `psql`, drivers and Grafana's PostgreSQL data source.
//!
//! The same session, tables, views and roles as the HTTP API: the password
//! is a query token, a team lead's queries run with the tenant filter under
//! every scan, every plan is checked read-only and bounded in time. The
//! protocol itself (messages, types, the `pg_catalog` tables `psql` asks
//! for) comes from `pgwire` and `datafusion-postgres`; what is ours is who
//! may connect ([`startup`]) and how a query runs ([`session`]).

mod parse;
mod scram;
mod session;
mod startup;

pub use startup::PgAuth;

/// How PostgreSQL clients log in.
#[derive(Debug, Clone, Copy)]
pub struct Login {
    pub auth: PgAuth,
    /// Refuse a client that did not ask for TLS.
    pub require_tls: bool,
}

use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use datafusion_postgres::pgwire::api::PgWireServerHandlers;
use datafusion_postgres::pgwire::api::auth::StartupHandler;
use datafusion_postgres::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use datafusion_postgres::pgwire::api::{ClientInfo, ErrorHandler};
use datafusion_postgres::pgwire::error::PgWireError;
use gpuledger_common::shutdown::Shutdown;
use tokio::net::TcpListener;

use crate::access::Gate;
use crate::limits::Limits;

/// The protocol handlers one connection uses.
#[derive(Debug)]
pub struct Handlers {
    session: Arc<session::Session>,
    startup: Arc<startup::TokenStartup>,
}

impl Handlers {
    /// Handlers over `ctx`, admitting the tokens of `gate`, each query
    /// bounded by `timeout` and `limits`.
    pub fn new(
        ctx: Arc<SessionContext>,
        gate: Gate,
        timeout: Duration,
        limits: Limits,
        login: Login,
    ) -> Self {
        Self {
            session: Arc::new(session::Session::new(ctx, timeout, limits)),
            startup: Arc::new(startup::TokenStartup::new(
                gate,
                login.auth,
                login.require_tls,
            )),
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.session.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.session.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(LogErrors)
    }
}

/// Logs every error a client is sent.
#[derive(Debug)]
struct LogErrors;

impl ErrorHandler for LogErrors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        tracing::warn!(client = %client.socket_addr(), %error, "PostgreSQL query refused");
    }
}

/// Serves PostgreSQL connections on `listener` until shutdown, with TLS
/// for clients that ask for it (`SSLRequest`) when `tls` is given; each
/// connection runs on its own task, so a slow or broken client holds up no
/// other.
pub async fn serve(
    listener: TcpListener,
    handlers: Arc<Handlers>,
    tls: Option<datafusion_postgres::pgwire::tokio::TlsAcceptor>,
    mut shutdown: Shutdown,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.wait() => return,
        };
        let (socket, peer) = match accepted {
            Ok(connection) => connection,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a PostgreSQL connection");
                continue;
            }
        };
        let (handlers, tls) = (handlers.clone(), tls.clone());
        tokio::spawn(async move {
            if let Err(e) =
                datafusion_postgres::pgwire::tokio::process_socket(socket, tls, handlers).await
            {
                tracing::debug!(%peer, error = %e, "PostgreSQL connection ended with an error");
            }
        });
    }
}
