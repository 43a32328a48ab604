//! Elicitations rmcp cannot type, carried past it to the router.
//!
//! rmcp decodes every message from a server into its typed JSON-RPC model
//! before a handler sees it. An `elicitation/create` whose `params` are a
//! string or an array, or whose `_meta` is not an object, fails that decode:
//! rmcp then answers with an *id-less* `-32600` itself, so the server cannot
//! tell which request failed and gatehouse never reviews, answers or audits
//! it. That breaks the rule that every elicitation gets exactly one answer
//! and one audit line.
//!
//! Both transports therefore look at each raw message before rmcp does (the
//! stdio pump in [`super::stdio`], the SSE streams in [`RescuingHttpClient`]).
//! Such a request keeps its id and method, and its params move under
//! [`RAW_PARAMS_KEY`]: an object rmcp accepts. The typed decode of the
//! elicitation still fails (there is no `message`), so rmcp hands the request
//! to the custom-request path, where [`unwrap_params`] restores what the
//! server sent. The router then refuses it with `-32602` naming the field,
//! under the request's own id, and audits it like any other refusal.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::{Map, Value};
use sse_stream::Sse;

/// The key the original params travel under.
pub const RAW_PARAMS_KEY: &str = "gatehouse/raw";

const ELICITATION_METHOD: &str = "elicitation/create";

/// Rewrites one raw JSON-RPC message if it is an `elicitation/create` request
/// rmcp could not type; `None` leaves the message as it is.
///
/// Only requests (a `method` and an `id`) are touched; anything that is not
/// JSON, or not such a request, is passed on for rmcp to judge.
///
/// ```
/// use gatehouse::mcp::rescue::rescue_message;
/// let line = br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":"hi"}"#;
/// let rescued: serde_json::Value = serde_json::from_slice(&rescue_message(line).unwrap()).unwrap();
/// assert_eq!(rescued["id"], 7);
/// assert_eq!(rescued["params"]["gatehouse/raw"], "hi");
///
/// let fine = br#"{"jsonrpc":"2.0","id":8,"method":"elicitation/create","params":{"message":"?"}}"#;
/// assert!(rescue_message(fine).is_none());
/// ```
pub fn rescue_message(message: &[u8]) -> Option<Vec<u8>> {
    // Most messages are not elicitations: skip the parse for them.
    memchr::memmem::find(message, ELICITATION_METHOD.as_bytes())?;
    let mut object: Map<String, Value> = serde_json::from_slice(message).ok()?;
    if object.get("method")?.as_str()? != ELICITATION_METHOD || !object.contains_key("id") {
        return None;
    }
    let untypable = match object.get("params") {
        None | Some(Value::Null) => false,
        Some(Value::Object(params)) => params.get("_meta").is_some_and(|meta| !meta.is_object()),
        Some(_) => true,
    };
    if !untypable {
        return None;
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    let mut wrapped = Map::new();
    wrapped.insert(RAW_PARAMS_KEY.to_owned(), params);
    object.insert("params".to_owned(), Value::Object(wrapped));
    serde_json::to_vec(&object).ok()
}

/// The params of an elicitation that reached the custom-request path, as
/// the server sent them: a [`RAW_PARAMS_KEY`] wrapper is removed, anything
/// else is returned unchanged.
///
/// ```
/// use gatehouse::mcp::rescue::unwrap_params;
/// use serde_json::json;
/// assert_eq!(unwrap_params(json!({"gatehouse/raw": [1, 2]})), json!([1, 2]));
/// assert_eq!(unwrap_params(json!({"message": 5})), json!({"message": 5}));
/// ```
pub fn unwrap_params(params: Value) -> Value {
    match params {
        Value::Object(mut object) if object.len() == 1 && object.contains_key(RAW_PARAMS_KEY) => {
            object.remove(RAW_PARAMS_KEY).unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// Rewrites the `data` of one SSE event with [`rescue_message`].
fn rescue_event(mut event: Sse) -> Sse {
    if let Some(rescued) = event
        .data
        .as_deref()
        .and_then(|data| rescue_message(data.as_bytes()))
        .and_then(|bytes| String::from_utf8(bytes).ok())
    {
        event.data = Some(rescued);
    }
    event
}

type SseStream = futures::stream::BoxStream<'static, Result<Sse, SseError>>;

fn rescue_stream(stream: SseStream) -> SseStream {
    stream.map(|event| event.map(rescue_event)).boxed()
}

fn rescue_response(response: StreamableHttpPostResponse) -> StreamableHttpPostResponse {
    match response {
        StreamableHttpPostResponse::Sse(stream, session) => {
            StreamableHttpPostResponse::Sse(rescue_stream(stream), session)
        }
        other => other,
    }
}

/// A streamable HTTP client that passes every SSE event through
/// [`rescue_message`] before rmcp decodes it. Server requests arrive only on
/// SSE streams (a plain JSON body answers the client's own POST), so those
/// are the only place an elicitation needs rescuing. Every method forwards
/// to the same method of `inner`, so its size limits still hold.
///
/// ```
/// use gatehouse::mcp::rescue::RescuingHttpClient;
/// use rmcp::transport::StreamableHttpClientTransport;
/// use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let client = RescuingHttpClient::new(reqwest::Client::new());
/// let config = StreamableHttpClientTransportConfig::with_uri("http://127.0.0.1:9/mcp");
/// let _transport = StreamableHttpClientTransport::with_client(client, config);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RescuingHttpClient<C> {
    inner: C,
}

impl<C> RescuingHttpClient<C> {
    /// Wraps `inner`.
    pub fn new(inner: C) -> Self {
        RescuingHttpClient { inner }
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for RescuingHttpClient<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
            .map(rescue_response)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map(rescue_response)
    }

    /// What rmcp's transport calls; forwarded so that `inner` keeps
    /// enforcing its SSE-event and body limits.
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
            .map(rescue_response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map(rescue_stream)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map(rescue_stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerJsonRpcMessage;
    use serde_json::json;

    fn rescued(message: Value) -> Option<Value> {
        let bytes = serde_json::to_vec(&message).unwrap();
        rescue_message(&bytes).map(|bytes| serde_json::from_slice(&bytes).unwrap())
    }

    fn elicitation(params: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": "e-1", "method": "elicitation/create", "params": params})
    }

    #[test]
    fn params_rmcp_cannot_type_are_wrapped_with_id_and_method_kept() {
        for params in [json!("hello"), json!([1, 2]), json!(5), json!(true)] {
            let out = rescued(elicitation(params.clone())).expect("rescued");
            assert_eq!(out["id"], "e-1");
            assert_eq!(out["method"], "elicitation/create");
            assert_eq!(out["params"], json!({RAW_PARAMS_KEY: params}));
            assert_eq!(unwrap_params(out["params"].clone()), params);
        }
        let bad_meta = json!({"message": "?", "requestedSchema": {}, "_meta": "x"});
        let out = rescued(elicitation(bad_meta.clone())).expect("rescued");
        assert_eq!(unwrap_params(out["params"].clone()), bad_meta);
    }

    #[test]
    fn typable_messages_and_other_traffic_pass_untouched() {
        for params in [
            json!({"message": "?", "requestedSchema": {"type": "object"}}),
            json!({"message": "?", "_meta": {"k": 1}}),
            json!({}),
            Value::Null,
        ] {
            assert_eq!(rescued(elicitation(params)), None);
        }
        let mut no_params = elicitation(Value::Null);
        no_params.as_object_mut().unwrap().remove("params");
        assert_eq!(rescued(no_params), None);
        // A notification (no id), another method, a response, not JSON.
        let mut notification = elicitation(json!("x"));
        notification.as_object_mut().unwrap().remove("id");
        assert_eq!(rescued(notification), None);
        assert_eq!(
            rescued(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "elicitation/create"})
            ),
            None
        );
        assert_eq!(
            rescued(json!({"jsonrpc": "2.0", "id": 1, "result": {"m": "elicitation/create"}})),
            None
        );
        assert_eq!(rescue_message(b"elicitation/create {not json"), None);
    }

    #[test]
    fn sse_events_are_rescued_and_others_kept() {
        let event = Sse {
            event: Some("message".into()),
            data: Some(elicitation(json!([1])).to_string()),
            id: Some("9".into()),
            retry: None,
        };
        let out = rescue_event(event);
        assert_eq!(out.id.as_deref(), Some("9"));
        let data: Value = serde_json::from_str(out.data.as_deref().unwrap()).unwrap();
        assert_eq!(data["params"][RAW_PARAMS_KEY], json!([1]));
        let plain = Sse {
            event: None,
            data: Some("ping".into()),
            id: None,
            retry: None,
        };
        assert_eq!(rescue_event(plain).data.as_deref(), Some("ping"));
    }

    #[test]
    fn the_server_side_json_model_rejects_what_is_rescued() {
        // If rmcp ever learns to type these, the rescue is no longer needed:
        // this test then fails and says so.
        for params in [json!("hello"), json!({"message": "?", "_meta": "x"})] {
            let decoded = serde_json::from_value::<ServerJsonRpcMessage>(elicitation(params));
            assert!(decoded.is_err(), "rmcp now types these params: {decoded:?}");
        }
        let rescued_value = rescued(elicitation(json!("hello"))).unwrap();
        assert!(serde_json::from_value::<ServerJsonRpcMessage>(rescued_value).is_ok());
    }
}
