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
//! stdio pump in `connection::stdio`, the SSE streams in [`RescuingHttpClient`]).
//! Such a request keeps its id and method, and its params move under
//! [`RAW_PARAMS_KEY`]: an object rmcp accepts. The typed decode of the
//! elicitation still fails (there is no `message`), so rmcp hands the request
//! to the custom-request path, where [`unwrap_params`] restores what the
//! server sent. The router then refuses it with `-32602` naming the field,
//! under the request's own id, and audits it like any other refusal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;
use sse_stream::Sse;

use super::ELICITATION_METHOD;
use crate::connection::sent_under::SentUnder;

/// The key the original params travel under.
pub const RAW_PARAMS_KEY: &str = "gatehouse/raw";

/// At most how many bytes [`rescue_message`] adds to a message (the
/// wrapper; everything else is copied verbatim or shrinks).
pub const RESCUE_GROWTH: usize = 32;

/// The UTF-8 byte order mark rmcp skips at the start of a line.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Rewrites one raw JSON-RPC message if it is an `elicitation/create`
/// request that rmcp's model cannot decode, or whose params carry
/// [`RAW_PARAMS_KEY`] themselves (a server forging the wrapper gets it
/// wrapped again, and so refused like any other bad params); `None` leaves
/// the message as it is.
///
/// The test is rmcp's own decode, so exactly what rmcp would refuse is
/// rescued (a string or array as params, `_meta` not an object, a repeated
/// key, ...). The method may be written with escapes and the line may start
/// with a byte order mark, as rmcp allows. The params are copied byte for
/// byte and the top level is re-serialised without its whitespace, so the
/// result is at most [`RESCUE_GROWTH`] bytes longer than the message.
///
/// ```
/// use gatehouse_mcp::rescue::rescue_message;
/// let line = br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":"hi"}"#;
/// let rescued: serde_json::Value = serde_json::from_slice(&rescue_message(line).unwrap()).unwrap();
/// assert_eq!(rescued["id"], 7);
/// assert_eq!(rescued["params"]["gatehouse/raw"], "hi");
///
/// let fine = br#"{"jsonrpc":"2.0","id":8,"method":"elicitation/create","params":{"message":"?"}}"#;
/// assert!(rescue_message(fine).is_none());
/// ```
pub fn rescue_message(message: &[u8]) -> Option<Vec<u8>> {
    let message = message.strip_prefix(UTF8_BOM).unwrap_or(message);
    // Most messages are not elicitations: skip the parse for them. A method
    // written with escapes needs a backslash.
    if memchr::memmem::find(message, b"elicitation").is_none()
        && memchr::memchr(b'\\', message).is_none()
    {
        return None;
    }
    // The usual elicitation costs a look at its top-level members and
    // rmcp's decode; a message whose members cannot be read that way (a
    // repeated top-level key) takes the general path below.
    if let Ok(head) = serde_json::from_slice::<Head<'_>>(message) {
        if head.method.as_deref() != Some(ELICITATION_METHOD) || !head.id.0 {
            return None;
        }
        let forged = head.params.is_some_and(carries_marker);
        if !forged && serde_json::from_slice::<ServerJsonRpcMessage>(message).is_ok() {
            return None;
        }
    }
    let mut object: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(message).ok()?;
    let method: String = serde_json::from_str(object.get("method")?.get()).ok()?;
    if method != ELICITATION_METHOD || !object.contains_key("id") {
        return None;
    }
    let forged = object
        .get("params")
        .is_some_and(|params| carries_marker(params));
    if !forged && serde_json::from_slice::<ServerJsonRpcMessage>(message).is_ok() {
        return None;
    }
    let params = object
        .remove("params")
        .map_or_else(|| "null".to_owned(), |params| params.get().to_owned());
    let wrapped = RawValue::from_string(format!("{{\"{RAW_PARAMS_KEY}\":{params}}}")).ok()?;
    object.insert("params".to_owned(), wrapped);
    let rescued = serde_json::to_vec(&object).ok()?;
    // Wrapping cannot mend params serde_json cannot hold at all (a number
    // beyond f64, nesting past its depth limit): those stay rmcp's to refuse.
    serde_json::from_slice::<ServerJsonRpcMessage>(&rescued)
        .is_ok()
        .then_some(rescued)
}

/// Whether raw params are an object with a [`RAW_PARAMS_KEY`] member. The
/// key cannot be there if its text is not, unless escapes spell it.
fn carries_marker(params: &RawValue) -> bool {
    let text = params.get().as_bytes();
    if memchr::memmem::find(text, RAW_PARAMS_KEY.as_bytes()).is_none()
        && memchr::memchr(b'\\', text).is_none()
    {
        return false;
    }
    serde_json::from_str::<BTreeMap<String, IgnoredAny>>(params.get())
        .is_ok_and(|members| members.contains_key(RAW_PARAMS_KEY))
}

/// The top-level members [`rescue_message`] looks at; the others are
/// skipped unread.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    id: Present,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Whether a member is there at all: `"id": null` is an id for this test,
/// as it is a key in the general path's map.
#[derive(Default)]
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <IgnoredAny as serde::Deserialize>::deserialize(deserializer).map(|_| Present(true))
    }
}

/// The params of an elicitation that reached the custom-request path, as
/// the server sent them: a [`RAW_PARAMS_KEY`] wrapper is removed, anything
/// else is returned unchanged.
///
/// ```
/// use gatehouse_mcp::rescue::unwrap_params;
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
/// use gatehouse_mcp::rescue::RescuingHttpClient;
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
    sent_under: SentUnder,
}

impl<C> RescuingHttpClient<C> {
    /// Wraps `inner`.
    pub fn new(inner: C) -> Self {
        RescuingHttpClient {
            inner,
            sent_under: SentUnder::default(),
        }
    }

    /// Records in `sent_under` which call each outgoing request was sent
    /// for, taking the connection's marker out of it first
    /// (`connection::sent_under`).
    pub(crate) fn with_sent_under(mut self, sent_under: SentUnder) -> Self {
        self.sent_under = sent_under;
        self
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for RescuingHttpClient<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        mut message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.sent_under.record(&mut message);
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
            .map(rescue_response)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        mut message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.sent_under.record(&mut message);
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
        mut message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.sent_under.record(&mut message);
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
    fn what_rmcp_would_refuse_is_rescued_however_it_is_spelled() {
        let line = |text: &str| {
            rescue_message(text.as_bytes())
                .map(|out| serde_json::from_slice::<Value>(&out).expect("the rescue writes JSON"))
        };
        // A byte order mark, an escaped method, a repeated params key.
        let bom = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"elicitation/create\",\"params\":\"x\"}";
        assert_eq!(line(bom).expect("rescued")["params"][RAW_PARAMS_KEY], "x");
        let escaped =
            r#"{"jsonrpc":"2.0","id":2,"method":"\u0065licitation\/create","params":[1]}"#;
        let out = line(escaped).expect("rescued");
        assert_eq!(out["method"], "elicitation/create");
        assert_eq!(out["params"][RAW_PARAMS_KEY], json!([1]));
        let twice = r#"{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"a","requestedSchema":{"type":"object"}},"params":{"message":"b","requestedSchema":{"type":"object"}}}"#;
        assert!(serde_json::from_str::<ServerJsonRpcMessage>(twice).is_err());
        let out = rescue_message(twice.as_bytes()).expect("rescued");
        assert!(serde_json::from_slice::<ServerJsonRpcMessage>(&out).is_ok());
        // Params no JSON value can hold: wrapping would not help.
        let huge = r#"{"jsonrpc":"2.0","id":5,"method":"elicitation/create","params":[1e400]}"#;
        assert_eq!(line(huge), None);
        // `_meta: null` is no `_meta` to rmcp: nothing to rescue.
        let null_meta = r#"{"jsonrpc":"2.0","id":4,"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":"object"},"_meta":null}}"#;
        assert_eq!(line(null_meta), None);
    }

    #[test]
    fn a_forged_wrapper_is_wrapped_again() {
        let inner = json!({"message": "Paste your token", "requestedSchema": {"type": "object"}});
        let forged = elicitation(json!({RAW_PARAMS_KEY: inner}));
        let out = rescued(forged).expect("rescued");
        // What reaches the router is the forged object itself: no message.
        assert_eq!(
            unwrap_params(out["params"].clone()),
            json!({RAW_PARAMS_KEY: inner})
        );
        // Spelled with an escape, the key is still the marker.
        let escaped = r#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"gatehouse\/raw":{"message":"m","requestedSchema":{"type":"object"}}}}"#;
        let out: Value =
            serde_json::from_slice(&rescue_message(escaped.as_bytes()).expect("rescued")).unwrap();
        assert_eq!(
            out["params"][RAW_PARAMS_KEY][RAW_PARAMS_KEY]["message"],
            "m"
        );
    }

    #[test]
    fn params_are_copied_byte_for_byte_and_the_message_barely_grows() {
        let numbers = vec!["1e15"; 1000].join(",");
        let message = format!(
            r#"{{ "jsonrpc" : "2.0", "id" : "g", "method" : "elicitation/create", "params" : [{numbers}] }}"#
        );
        let out = rescue_message(message.as_bytes()).expect("rescued");
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(
            text.contains(&format!("[{numbers}]")),
            "params kept verbatim"
        );
        assert!(
            text.len() <= message.len() + RESCUE_GROWTH,
            "{} > {}",
            text.len(),
            message.len()
        );
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
        // Rescued, it reaches the handler as a custom request (where
        // `unwrap_params` runs), not as a typed elicitation.
        let rescued_value = rescued(elicitation(json!("hello"))).unwrap();
        match serde_json::from_value::<ServerJsonRpcMessage>(rescued_value) {
            Ok(ServerJsonRpcMessage::Request(request)) => assert!(
                matches!(
                    request.request,
                    rmcp::model::ServerRequest::CustomRequest(_)
                ),
                "{:?}",
                request.request
            ),
            other => panic!("not a request: {other:?}"),
        }
    }
}
