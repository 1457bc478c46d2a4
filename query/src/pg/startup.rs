//! Who may connect: the password of a PostgreSQL login is a query token
//! (`admin`, `finance` or a team lead's). What the token may read is kept
//! in the connection's typed extensions, where no startup parameter or
//! `SET` can reach it; the user name is free.

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

use crate::access::{Access, Gate, Refusal};

/// Asks for a cleartext password and checks it as a token. With no tokens
/// configured (a local set-up) everyone is let in without one.
#[derive(Debug)]
pub(crate) struct TokenStartup {
    gate: Gate,
    parameters: DefaultServerParameterProvider,
}

impl TokenStartup {
    pub(crate) fn new(gate: Gate) -> Self {
        let mut parameters = DefaultServerParameterProvider::default();
        // Honest answers to clients that look: nobody is a superuser here
        // and nothing can be written.
        parameters.is_superuser = false;
        parameters.default_transaction_read_only = true;
        Self { gate, parameters }
    }
}

/// The error a client sees for a refused login.
fn refused(refusal: Refusal) -> PgWireError {
    let message = match refusal {
        Refusal::Unauthenticated => {
            "password authentication failed: the password is a gpuledger query token".to_owned()
        }
        Refusal::Forbidden(why) => why.to_owned(),
    };
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        "28P01".to_owned(),
        message,
    )))
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
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                if self.gate.is_open() {
                    client.session_extensions().insert(Access::All);
                    return finish_authentication(client, &self.parameters).await;
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::CleartextPassword,
                    ))
                    .await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let password = password.into_password()?;
                let access = self.gate.token(&password.password).map_err(refused)?;
                tracing::debug!(client = %client.socket_addr(), ?access, "PostgreSQL login");
                client.session_extensions().insert(access);
                finish_authentication(client, &self.parameters).await?;
            }
            _ => {}
        }
        Ok(())
    }
}
