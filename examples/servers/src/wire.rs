//! Keeps the server's outgoing requests exactly as the tools build them.
//!
//! rmcp's `Peer::send_request` stamps a fresh `_meta.progressToken` on every
//! request it sends, including server-to-client `elicitation/create`. The demo
//! tools promise precise wire shapes (`ask_name` has no `_meta`, `elicit_raw`
//! sends its params verbatim), so [`NoProgressToken`] removes that token on
//! the way out, and [`NoProgressTokenSessions`] does the same for every
//! streamable HTTP session. Nothing else is touched, and the server never
//! relies on the token: it does not wait for progress from the client.

use std::{borrow::Cow, future::Future, sync::Arc};

use futures::Stream;
use rmcp::{
    RoleServer,
    model::{
        ClientJsonRpcMessage, GetExtensions as _, JsonRpcMessage, RequestMetaObject,
        ServerJsonRpcMessage,
    },
    transport::{
        Transport,
        streamable_http_server::{
            RestoreOutcome, SessionId, SessionManager,
            session::{EventStore, ServerSseMessage},
        },
    },
};

/// The `_meta` key rmcp adds to each outgoing request.
const PROGRESS_TOKEN: &str = "progressToken";

/// A server transport that removes the `_meta.progressToken` rmcp adds to
/// outgoing server-to-client requests, dropping `_meta` if nothing else is
/// left in it. Responses and notifications pass through unchanged.
#[derive(Debug)]
pub struct NoProgressToken<T>(pub T);

impl<T: Transport<RoleServer>> Transport<RoleServer> for NoProgressToken<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        mut item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &mut item {
            let extensions = request.request.extensions_mut();
            let now_empty = extensions
                .get_mut::<RequestMetaObject>()
                .is_some_and(|meta| {
                    meta.0.0.remove(PROGRESS_TOKEN);
                    meta.0.0.is_empty()
                });
            if now_empty {
                extensions.remove::<RequestMetaObject>();
            }
        }
        self.0.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.0.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close()
    }
}

/// A streamable HTTP [`SessionManager`] that wraps each session's transport
/// in [`NoProgressToken`] and otherwise delegates to the inner manager.
#[derive(Debug, Default)]
pub struct NoProgressTokenSessions<M>(pub M);

impl<M: SessionManager> SessionManager for NoProgressTokenSessions<M> {
    type Error = M::Error;
    type Transport = NoProgressToken<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.0.create_session().await?;
        Ok((id, NoProgressToken(transport)))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.0.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.0.has_session(id)
    }

    fn close_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.0.resume(id, last_event_id)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.0.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => {
                RestoreOutcome::Restored(NoProgressToken(transport))
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.0.event_store()
    }
}
