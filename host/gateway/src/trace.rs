//! The gateway's spans of a trace (emitted through [`tracing`] under
//! [`gatehouse_base::trace::TARGET`], exported only when the host
//! subscribes; see [`gatehouse_telemetry::traces`]):
//!
//! ```text
//! upstream request   tools/call, resources/read or prompts/get from a client (kind server)
//! ├─ downstream call the request as sent to its server (kind client)
//! └─ elicitation     each question its server asks while it runs
//!    ├─ review       each module's (the reviewer core's span), with its model calls
//!    └─ person       the wait for the person
//!
//! contract check     the conformance kit's check of a module as a chain is built
//! └─ review          each of the kit's reviews
//! ```
//!
//! An upstream request continues the trace its `_meta` names (W3C
//! `traceparent`), and the downstream call carries its own context on in
//! the request's `_meta`. Attributes name the server, the call, the module
//! digest and the outcome; what a server or an agent wrote (a form's
//! message, a call's arguments) only when the operator opted in
//! ([`gatehouse_telemetry::traces::content`]). Every value taken from a
//! server or a client is escaped and bounded
//! ([`gatehouse_base::trace::attribute`]).

use std::future::Future;

use gatehouse_base::trace::{TARGET, attribute};
use gatehouse_telemetry::traces;
use rmcp::ErrorData;
use serde_json::{Map, Value};
use tracing::{Instrument, Span};

use crate::calls::{CallKind, SessionId};

/// The outcome attribute of every span that has one.
pub const OUTCOME: &str = "gatehouse.outcome";

impl CallKind {
    /// The MCP method of an upstream request of this kind.
    pub fn method(self) -> &'static str {
        match self {
            CallKind::ToolCall => "tools/call",
            CallKind::ResourceRead => "resources/read",
            CallKind::PromptGet => "prompts/get",
        }
    }
}

/// The span of one upstream request: the child of the trace its `_meta`
/// carries, else the root of one of its own. It is named by its method
/// alone until the request is routed ([`routed`]): a name the client
/// chose is never recorded unless a server declared it.
pub fn upstream_request(kind: CallKind, session: SessionId, meta: &Map<String, Value>) -> Span {
    let span = tracing::debug_span!(
        target: TARGET,
        parent: None::<tracing::Id>,
        "upstream request",
        otel.name = kind.method(),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = kind.method(),
        mcp.session.id = session.get(),
        gatehouse.call.name = tracing::field::Empty,
        gatehouse.server = tracing::field::Empty,
        gatehouse.call.arguments = tracing::field::Empty,
        gatehouse.outcome = tracing::field::Empty,
    );
    if !span.is_disabled()
        && let Some(propagation) = traces::propagation()
    {
        let context = traces::trace_context(meta);
        if !context.is_empty() {
            propagation.continue_from(&span, &context);
        }
    }
    span
}

/// Records on an upstream request's span where it was routed: the server,
/// the name (`kind`'s method and `name`, a name the server declared; a
/// resource read is named by its server unless the operator opted in to
/// content), and the arguments when the operator opted in to content.
pub fn routed(span: &Span, kind: CallKind, server: &str, name: &str, arguments: Option<&Value>) {
    if span.is_disabled() {
        return;
    }
    span.record("gatehouse.server", attribute(server));
    let shown = shown_name(kind, server, name);
    span.record(
        "otel.name",
        format!("{} {}", kind.method(), attribute(shown)),
    );
    if kind != CallKind::ResourceRead || traces::content() {
        span.record("gatehouse.call.name", attribute(name));
    }
    if traces::content()
        && let Some(arguments) = arguments
    {
        span.record(
            "gatehouse.call.arguments",
            attribute(&arguments.to_string()),
        );
    }
}

/// The name a routed request's spans are called by: `name`, except a
/// resource's URI (which the client wrote and may hold a secret), shown
/// only when the operator opted in to content; else its `server`.
fn shown_name<'a>(kind: CallKind, server: &'a str, name: &'a str) -> &'a str {
    if kind == CallKind::ResourceRead && !traces::content() {
        server
    } else {
        name
    }
}

/// Records how a request ended on its span: [`OUTCOME`], and an error
/// status unless it is `ok`. The span ends now: an exported span ends when
/// it was last exited, and this enters it once more.
pub fn ended(span: &Span, outcome: &'static str) {
    if span.is_disabled() {
        return;
    }
    span.in_scope(|| {
        span.record(OUTCOME, outcome);
        if outcome != "ok" {
            span.record("otel.status_code", "error");
        }
    });
}

/// How a forwarded request ended, in one word: `ok`, `tool-error` (a
/// result marked as an error), `abandoned` (its client went away or
/// cancelled it) or `error`.
pub fn outcome_of<T>(result: &Result<T, ErrorData>, is_error: impl Fn(&T) -> bool) -> &'static str {
    match result {
        Ok(value) if is_error(value) => "tool-error",
        Ok(_) => "ok",
        Err(error) if error.code.0 == -32800 => "abandoned",
        Err(_) => "error",
    }
}

/// `work`, the request as sent to `server` (which names it `name`), under a
/// span of its own, the child of `upstream`: the request carries that
/// span's trace context in its `_meta`
/// ([`gatehouse_mcp::on_behalf::carrying`]), and how it ended is recorded
/// on both spans.
pub fn downstream<T, W>(
    upstream: &Span,
    kind: CallKind,
    server: &str,
    name: &str,
    work: W,
    is_error: fn(&T) -> bool,
) -> impl Future<Output = Result<T, ErrorData>> + Send + 'static
where
    W: Future<Output = Result<T, ErrorData>> + Send + 'static,
    T: Send + 'static,
{
    let shown = shown_name(kind, server, name);
    let span = tracing::debug_span!(
        target: TARGET,
        parent: upstream,
        "downstream call",
        otel.name = %format_args!("{} {}", kind.method(), attribute(shown)),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = kind.method(),
        gatehouse.server = %attribute(server),
        gatehouse.call.name = tracing::field::Empty,
        gatehouse.outcome = tracing::field::Empty,
    );
    if kind != CallKind::ResourceRead || traces::content() {
        span.record("gatehouse.call.name", attribute(name));
    }
    let carried = match traces::propagation() {
        Some(propagation) if !span.is_disabled() => propagation.carry(&span),
        _ => Map::new(),
    };
    let mut unended = Unended(Some((span.clone(), upstream.clone())));
    async move {
        let work = work.instrument(span.clone());
        let result = gatehouse_mcp::on_behalf::carrying(carried, work).await;
        let outcome = outcome_of(&result, is_error);
        if let Some((call, request)) = unended.0.take() {
            // The call ends, then the request it was made for.
            ended(&call, outcome);
            ended(&request, outcome);
        }
        result
    }
}

/// A forwarded call's span and its request's, ended `abandoned` if the
/// call's work is dropped before it ends (a parked 2026-07-28 request
/// that expired or was pushed out).
struct Unended(Option<(Span, Span)>);

impl Drop for Unended {
    fn drop(&mut self) {
        if let Some((call, request)) = self.0.take() {
            ended(&call, "abandoned");
            ended(&request, "abandoned");
        }
    }
}

/// The span of the conformance kit's contract check of a module as the
/// chain is built (a root: its reviews are its children); how it ended is
/// recorded with [`ended`] (`ok` or `failed`).
pub fn contract_check(module: &str) -> Span {
    tracing::debug_span!(
        target: TARGET,
        parent: None::<tracing::Id>,
        "contract check",
        otel.name = %format_args!("contract check {}", attribute(module)),
        otel.status_code = tracing::field::Empty,
        gatehouse.module = %attribute(module),
        gatehouse.outcome = tracing::field::Empty,
    )
}

/// The span of one elicitation from `server`: the child of the upstream
/// request it belongs to (`call`), else the root of a trace of its own.
/// How it was decided is recorded when it is answered ([`decided`]).
pub fn elicitation(server: &str, call: Option<&Span>) -> Span {
    tracing::debug_span!(
        target: TARGET,
        parent: call.and_then(Span::id),
        "elicitation",
        otel.status_code = tracing::field::Empty,
        gatehouse.server = %attribute(server),
        gatehouse.elicitation.mode = tracing::field::Empty,
        gatehouse.elicitation.message = tracing::field::Empty,
        gatehouse.decided_by = tracing::field::Empty,
        gatehouse.action = tracing::field::Empty,
        gatehouse.fail_closed = tracing::field::Empty,
        gatehouse.person.channel = tracing::field::Empty,
        gatehouse.latency_us = tracing::field::Empty,
    )
}

/// Records on an elicitation's span its mode, and its message when the
/// operator opted in to content.
pub fn asked(span: &Span, mode: &str, message: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("gatehouse.elicitation.mode", attribute(mode));
    if traces::content()
        && let Some(message) = message
    {
        span.record("gatehouse.elicitation.message", attribute(message));
    }
}

/// Records how an elicitation was decided on its span, in the words its
/// metrics use; the span ends now (as [`ended`] does), its audit line
/// written.
pub fn decided(span: &Span, labels: &crate::telemetry::DecisionLabels<'_>, latency_us: u64) {
    if span.is_disabled() {
        return;
    }
    let _in = span.enter();
    span.record("gatehouse.decided_by", labels.decided_by);
    span.record("gatehouse.action", labels.action);
    span.record("gatehouse.latency_us", latency_us);
    if let Some(channel) = labels.person {
        span.record("gatehouse.person.channel", channel);
    }
    if let Some(code) = labels.fail_closed {
        span.record("gatehouse.fail_closed", attribute(code));
        span.record("otel.status_code", "error");
    }
}

/// The span of the shadow modules' reviews of an elicitation (a child of
/// the current span, the elicitation's), which run beside the chain and may
/// end after the answer.
pub fn shadow_reviews() -> Span {
    tracing::debug_span!(target: TARGET, "shadow reviews", gatehouse.shadow = true)
}

/// The span of the wait for the person's answer (a child of the current
/// span, the elicitation's); the channel and action are recorded when the
/// person answers ([`answered`]).
pub fn person() -> Span {
    tracing::debug_span!(
        target: TARGET,
        "person",
        gatehouse.person.channel = tracing::field::Empty,
        gatehouse.action = tracing::field::Empty,
    )
}

/// Records who answered on the person's span, and how.
pub fn answered(span: &Span, channel: Option<&'static str>, action: &str) {
    if span.is_disabled() {
        return;
    }
    if let Some(channel) = channel {
        span.record("gatehouse.person.channel", channel);
    }
    span.record("gatehouse.action", attribute(action));
}
