//! Which upstream call each request to a streamable-HTTP server was sent
//! for, so that an elicitation the server sends on that request's response
//! stream is known to belong to that call.
//!
//! Over streamable HTTP a server sends what it asks while handling a request
//! on the SSE stream of that request's POST (SEP-2260), and rmcp marks what
//! arrives there with the request's id
//! ([`InboundStreamOrigin::OutboundRequest`]). The id is rmcp's, chosen when
//! it sends; the call is the gateway's ([`on_behalf::current_call`]). The
//! connection joins them: it puts the call's key in the request's `_meta`
//! under [`MARKER`] ([`mark`]); the HTTP client takes it out again before
//! the request goes on the wire and records it under the request's id
//! ([`SentUnder::record`]); the client handler looks an elicitation's stream
//! up ([`SentUnder::call_for`]). The marker never reaches the server, and
//! nothing the server sends can name a call: the stream an elicitation
//! arrived on is rmcp's observation, not the server's claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, Extensions, JsonRpcMessage, RequestId, RequestMetaObject,
};
use rmcp::service::InboundStreamOrigin;

use crate::on_behalf::{self, CallKey};

/// The `_meta` key that carries a call's key from the connection to the
/// HTTP client; removed before the request is sent.
pub const MARKER: &str = "io.gatehouse/call";

/// Request ids of one connection's requests in flight, by the call they were
/// sent for. Cheap to clone; clones share the map.
#[derive(Debug, Clone, Default)]
pub struct SentUnder(Arc<Mutex<HashMap<RequestId, CallKey>>>);

/// Puts the current call's key ([`on_behalf::current_call`]) in `meta` under
/// [`MARKER`], when there is one; returns it.
pub fn mark(meta: &mut Option<RequestMetaObject>) -> Option<CallKey> {
    let key = on_behalf::current_call()?;
    meta.get_or_insert_default()
        .insert(MARKER.to_owned(), serde_json::Value::from(key.get()));
    Some(key)
}

impl SentUnder {
    /// Takes [`MARKER`] out of an outgoing request's params, and records the
    /// request's id under the call it names.
    pub fn record(&self, message: &mut ClientJsonRpcMessage) {
        let JsonRpcMessage::Request(request) = message else {
            return;
        };
        let meta = match &mut request.request {
            ClientRequest::CallToolRequest(call) => call.params.meta.as_mut(),
            ClientRequest::ReadResourceRequest(read) => read.params.meta.as_mut(),
            ClientRequest::GetPromptRequest(get) => get.params.meta.as_mut(),
            _ => None,
        };
        let Some(marked) = meta.and_then(|meta| meta.remove(MARKER)) else {
            return;
        };
        if let Some(key) = marked.as_u64().map(CallKey::from_raw) {
            self.lock().insert(request.id.clone(), key);
        }
    }

    /// The call whose request's response stream an incoming request (by its
    /// `extensions`) arrived on, if rmcp saw one and it was sent for a call.
    pub fn call_for(&self, extensions: &Extensions) -> Option<CallKey> {
        match extensions.get::<InboundStreamOrigin>()? {
            InboundStreamOrigin::OutboundRequest(id) => self.lock().get(id).copied(),
            InboundStreamOrigin::Unassociated => None,
        }
    }

    /// Forgets the requests sent for `key` (its call has ended).
    pub fn forget(&self, key: CallKey) {
        self.lock().retain(|_, known| *known != key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CallKey>> {
        // Each statement leaves the map consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Forgets what a request sent for a call recorded when dropped, however
/// the request ends.
#[derive(Debug)]
pub struct Forget {
    pub(super) sent_under: SentUnder,
    pub(super) key: Option<CallKey>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.sent_under.forget(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, NumberOrString};

    use crate::on_behalf::on_behalf;

    #[tokio::test]
    async fn a_marked_request_is_recorded_and_its_marker_never_sent() {
        let call = CallKey::next();
        let mut params = CallToolRequestParams::new("push");
        let key = on_behalf(call, async { mark(&mut params.meta) }).await;
        assert_eq!(key, Some(call));
        let mut message = JsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            NumberOrString::Number(7),
        );
        let sent_under = SentUnder::default();
        sent_under.record(&mut message);
        let wire = serde_json::to_string(&message).expect("serializes");
        assert!(!wire.contains(MARKER), "{wire}");
        let mut extensions = Extensions::new();
        extensions.insert(InboundStreamOrigin::OutboundRequest(
            NumberOrString::Number(7),
        ));
        assert_eq!(sent_under.call_for(&extensions), Some(call));
        // Another stream, or none, names no call.
        let mut other = Extensions::new();
        other.insert(InboundStreamOrigin::OutboundRequest(
            NumberOrString::Number(8),
        ));
        assert_eq!(sent_under.call_for(&other), None);
        let mut standalone = Extensions::new();
        standalone.insert(InboundStreamOrigin::Unassociated);
        assert_eq!(sent_under.call_for(&standalone), None);
        assert_eq!(sent_under.call_for(&Extensions::new()), None);
        // Once the call ends, its requests are forgotten.
        drop(Forget {
            sent_under: sent_under.clone(),
            key,
        });
        assert_eq!(sent_under.call_for(&extensions), None);
    }

    #[test]
    fn outside_a_call_nothing_is_marked() {
        let mut meta = None;
        assert_eq!(mark(&mut meta), None);
        assert!(meta.is_none());
    }
}
