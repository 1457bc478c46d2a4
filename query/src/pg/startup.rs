//! Who may connect: the password of a PostgreSQL login is a query token
//! (`admin`, `finance` or a team lead's), proven by SCRAM-SHA-256 (or, if
//! the service is told so, sent in cleartext). What the token may read is
//! kept in the connection's typed extensions, where no startup parameter
//! or `SET` can reach it; the user name is free. Where TLS is required, a
//! client that did not ask for it is refused before it logs in.

use std::fmt::Debug;

use async_trait::async_trait;
use datafusion_postgres::pgwire::api::auth::{
    DefaultServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use datafusion_postgres::pgwire::api::{ClientInfo, PgWireConnectionState};
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use datafusion_postgres::pgwire::messages::startup::Authentication;
use datafusion_postgres::pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use futures::{Sink, SinkExt};

use super::scram::{self, Exchange, Verifier};
use crate::access::{Access, Gate, Refusal};

/// How a PostgreSQL client proves its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PgAuth {
    /// SCRAM-SHA-256: the token never crosses the wire.
    #[default]
    Scram,
    /// The token as a cleartext password (only over TLS, or for clients
    /// without SCRAM).
    Cleartext,
}

/// Checks a login's token. With no tokens configured (a local set-up)
/// everyone is let in without one.
#[derive(Debug)]
pub(crate) struct TokenStartup {
    gate: Gate,
    auth: PgAuth,
    verifier: Verifier,
    require_tls: bool,
    parameters: DefaultServerParameterProvider,
}

impl TokenStartup {
    pub(crate) fn new(gate: Gate, auth: PgAuth, require_tls: bool) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        // Honest answers to clients that look: nobody is a superuser here
        // and nothing can be written.
        parameters.is_superuser = false;
        parameters.default_transaction_read_only = true;
        Self {
            verifier: Verifier::new(gate.tokens()),
            gate,
            auth,
            require_tls,
            parameters,
        }
    }
}

fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// The error a client sees for a refused login.
fn refused(refusal: Refusal) -> PgWireError {
    let message = match refusal {
        Refusal::Unauthenticated => {
            "password authentication failed: the password is a gpuledger query token".to_owned()
        }
        Refusal::Forbidden(why) => why.to_owned(),
    };
    fatal("28P01", message)
}

#[async_trait]
impl StartupHandler for TokenStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                if self.require_tls && !client.is_secure() {
                    return Err(fatal(
                        "28000",
                        "this server takes TLS connections only (sslmode=require or verify-full)",
                    ));
                }
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                if self.gate.is_open() {
                    client.session_extensions().insert(Access::All);
                    return finish_authentication(client, &self.parameters).await;
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                let ask = match self.auth {
                    PgAuth::Scram => Authentication::SASL(vec![scram::MECHANISM.to_owned()]),
                    PgAuth::Cleartext => Authentication::CleartextPassword,
                };
                client
                    .send(PgWireBackendMessage::Authentication(ask))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let access = match self.auth {
                    PgAuth::Cleartext => {
                        let password = message.into_password()?;
                        self.gate.token(&password.password).map_err(refused)?
                    }
                    PgAuth::Scram => {
                        let Some(exchange) = client.session_extensions().get::<Exchange>() else {
                            // The client's first message: the server's first answers it.
                            let first = message.into_sasl_initial_response()?;
                            if first.auth_method != scram::MECHANISM {
                                return Err(fatal(
                                    "28000",
                                    format!(
                                        "{} is not offered; use {}",
                                        first.auth_method,
                                        scram::MECHANISM
                                    ),
                                ));
                            }
                            let data = first.data.unwrap_or_default();
                            let exchange = self
                                .verifier
                                .first(&data)
                                .map_err(|e| fatal("28000", e.to_string()))?;
                            let server_first = exchange.server_first().to_owned();
                            client.session_extensions().insert(exchange);
                            client
                                .send(PgWireBackendMessage::Authentication(
                                    Authentication::SASLContinue(server_first.into_bytes().into()),
                                ))
                                .await?;
                            return Ok(());
                        };
                        let last = message.into_sasl_response()?;
                        let (role, server_final) = self
                            .verifier
                            .last(&exchange, &last.data)
                            .map_err(|_| refused(Refusal::Unauthenticated))?;
                        let access = self.gate.role(&role).map_err(refused)?;
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(server_final.into_bytes().into()),
                            ))
                            .await?;
                        access
                    }
                };
                let method = match self.auth {
                    PgAuth::Scram => "scram-sha-256",
                    PgAuth::Cleartext => "cleartext",
                };
                let secure = client.is_secure();
                tracing::info!(client = %client.socket_addr(), ?access, method, tls = secure, "PostgreSQL login");
                client.session_extensions().insert(access);
                finish_authentication(client, &self.parameters).await?;
            }
            _ => {}
        }
        Ok(())
    }
}
