//! [`Gateway`]: gatehouse as an MCP server in front of the MCP runtime, one
//! value per upstream session. It lists the aggregated tools under
//! qualified names and forwards `tools/call` to the right server; forwards
//! resources and prompts ([`crate::forward`]); tells the upstream client when
//! the catalog changes; and puts what the chain defers in front of the
//! person ([`crate::upstream`]).

use std::sync::Arc;

use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};

use crate::calls::{CallKind, Calls, SessionId, UpstreamCall};
use crate::forward::Forwarder;
use crate::rounds;
use crate::trace;
use crate::upstream::Upstream;
use gatehouse_mcp::runtime::{McpRuntime, RuntimeError};

/// How long a list request waits at most for a refresh under way (servers
/// coming up) before it answers with the servers that are up; the rest
/// follow with `notifications/tools/list_changed`.
pub const CATALOG_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the catalog must stay unchanged, once a server is up, for a list
/// request to answer before the refresh ends: servers that start at once
/// arrive within it of each other, and a slow one is not waited for
/// (clients such as `claude -p` start their first turn after a short wait
/// of their own).
pub const CATALOG_SETTLED: std::time::Duration = std::time::Duration::from_millis(150);

/// How many requests one upstream session may have in flight at once by
/// default.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 256;

/// The MCP server gatehouse presents upstream: one value per upstream
/// session ([`Gateway::for_new_session`]), sharing the runtime, the people
/// and the registry of requests in flight.
#[derive(Clone)]
pub struct Gateway {
    runtime: McpRuntime,
    upstream: Arc<Upstream>,
    forwarder: Forwarder,
    calls: Arc<Calls>,
    session: SessionId,
    max_calls_per_session: usize,
    /// Whether this is a session over streamable HTTP, where a 2026-07-28
    /// request comes as a session of its own ([`Gateway::owner`]).
    over_http: bool,
    /// Cancelled when this session's client goes away
    /// ([`Gateway::disconnector`]): its calls stop, and their servers are
    /// told (`notifications/cancelled`).
    gone: tokio_util::sync::CancellationToken,
    /// Cancelled when gatehouse stops ([`Gateway::stop_calls`]): every
    /// session's calls stop, their servers told.
    stopping: tokio_util::sync::CancellationToken,
    /// This session's lifetime: cancelled when the last handle on its
    /// gateway is dropped. For an HTTP session (one gateway per session,
    /// [`Gateway::for_new_http_session`]) that is when rmcp ends its service:
    /// the client closed it, its transport ended, or it was idle too long.
    /// The stdio session's gateway lives as long as `gatehouse serve`. What
    /// was started for the session (the catalog change notices of
    /// [`ServerHandler::on_initialized`]) ends with it.
    ended: SessionEnded,
}

/// A token cancelled when the last clone of it is dropped.
#[derive(Clone)]
struct SessionEnded {
    token: tokio_util::sync::CancellationToken,
    _guard: Arc<tokio_util::sync::DropGuard>,
}

impl SessionEnded {
    fn new() -> Self {
        let token = tokio_util::sync::CancellationToken::new();
        SessionEnded {
            _guard: Arc::new(token.clone().drop_guard()),
            token,
        }
    }
}

impl Gateway {
    /// A gateway over `runtime` for one upstream session. `upstream` must
    /// be the router's [`Person`](crate::router::Person) and `calls` the
    /// router's registry ([`Router::set_calls`](crate::router::Router::set_calls)),
    /// so that an elicitation goes to the session whose request made the
    /// server ask.
    pub fn new(runtime: McpRuntime, upstream: Arc<Upstream>, calls: Arc<Calls>) -> Self {
        upstream.use_calls(calls.clone());
        Gateway {
            runtime,
            upstream,
            forwarder: Forwarder::default(),
            calls,
            session: SessionId::next(),
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
            over_http: false,
            gone: tokio_util::sync::CancellationToken::new(),
            stopping: tokio_util::sync::CancellationToken::new(),
            ended: SessionEnded::new(),
        }
    }

    /// The same gateway with at most `limit` requests in flight per
    /// session; more are refused with a JSON-RPC error.
    pub fn with_max_calls_per_session(mut self, limit: usize) -> Self {
        self.max_calls_per_session = limit.max(1);
        self
    }

    /// The gateway for another upstream session (each HTTP session gets
    /// one): the same runtime, people and registry, its own session id.
    pub fn for_new_session(&self) -> Gateway {
        Gateway {
            session: SessionId::next(),
            gone: tokio_util::sync::CancellationToken::new(),
            ended: SessionEnded::new(),
            ..self.clone()
        }
    }

    /// The gateway for another session over streamable HTTP
    /// ([`Gateway::for_new_session`]), where a request of protocol
    /// 2026-07-28 is a session of its own, and the request that carries the
    /// answers to its questions comes as another (`Gateway::owner`).
    pub fn for_new_http_session(&self) -> Gateway {
        Gateway {
            over_http: true,
            ..self.for_new_session()
        }
    }

    /// This gateway's upstream session.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// What to call when this session's client goes away (its input
    /// ended): [`Upstream::disconnect`] for this session, so that what waits
    /// for its person is answered at once, and every call the session has in
    /// flight stops, its server told with `notifications/cancelled`.
    pub fn disconnector(&self) -> impl FnOnce() + Send + 'static {
        let upstream = self.upstream.clone();
        let session = self.session;
        let gone = self.gone.clone();
        move || {
            tracing::info!(session = session.get(), "the upstream client went away");
            gone.cancel();
            upstream.disconnect(session);
        }
    }

    /// gatehouse is stopping: the calls of every session stop, each
    /// cancelled at its server (`notifications/cancelled`); then wait for
    /// them with [`Calls::idle_within`] before the servers are stopped.
    pub fn stop_calls(&self) {
        self.stopping.cancel();
    }

    /// Resolves, with why, when a request of this session need not be
    /// worked on any more: its client went away or (`cancelled`, the
    /// request's own token, for a request that ends with its answer)
    /// cancelled it. Dropping the downstream request then sends its server
    /// `notifications/cancelled` (rmcp's client does on drop).
    fn abandoned(
        &self,
        cancelled: Option<tokio_util::sync::CancellationToken>,
    ) -> impl std::future::Future<Output = &'static str> + Send + 'static {
        let gone = self.gone.clone();
        let stopping = self.stopping.clone();
        async move {
            let cancelled = async {
                match cancelled {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = gone.cancelled() => "the upstream client went away; the call was cancelled at its server",
                () = stopping.cancelled() => "gatehouse is stopping; the call was cancelled at its server",
                () = cancelled => "the upstream client went away or cancelled the request",
            }
        }
    }

    /// Records a request of this session as in flight on `server`, or
    /// refuses it when the session already has its limit in flight.
    fn begin_call(&self, call: UpstreamCall) -> Result<crate::calls::CallGuard, ErrorData> {
        self.calls
            .begin_limited(call, self.max_calls_per_session)
            .map_err(|limit| {
                ErrorData::new(
                    rmcp::model::ErrorCode(-32000),
                    format!(
                        "too many requests in flight for this session (max_calls_per_session = {limit}); retry when one finishes"
                    ),
                    None,
                )
            })
    }

    /// Begins a routed upstream `call` ([`Self::begin_call`]) with the
    /// request's id and turn from `context`, under `span`, which records
    /// where it was routed ([`trace::routed`]), or that it was refused.
    fn begin_routed(
        &self,
        call: UpstreamCall,
        context: &RequestContext<RoleServer>,
        span: &tracing::Span,
    ) -> Result<crate::calls::CallGuard, ErrorData> {
        trace::routed(
            span,
            call.kind,
            &call.server,
            &call.name,
            call.arguments.as_ref(),
        );
        self.begin_call(
            call.with_request_id(serde_json::to_string(&context.id).unwrap_or_default())
                .with_turn_id(crate::calls::turn_id(&context.meta))
                .with_span(span.clone()),
        )
        .inspect_err(|_| trace::ended(span, "refused"))
    }

    /// The catalog to answer with: refreshed first when a refresh is owed,
    /// waiting for it until it ends, or the catalog has settled
    /// ([`CATALOG_SETTLED`] without a change while a server is up), or
    /// [`CATALOG_WAIT`] has passed. A refresh that takes longer (a server
    /// slow to start, or hanging until its startup timeout) goes on in the
    /// background, publishing each server as it comes up, and the client
    /// hears `notifications/tools/list_changed`: a slow server never hides
    /// the others, nor gatehouse itself.
    async fn refreshed(&self) -> Arc<gatehouse_mcp::runtime::Snapshot> {
        if self.runtime.refresh_owed() {
            let mut changes = self.runtime.catalog_changes();
            changes.borrow_and_update();
            let runtime = self.runtime.clone();
            let mut refresh = tokio::spawn(async move { runtime.refresh_if_dirty().await });
            let deadline = tokio::time::Instant::now() + CATALOG_WAIT;
            loop {
                let some_up = !self.runtime.snapshot().connections().is_empty();
                let settled = async {
                    if some_up {
                        tokio::time::sleep(CATALOG_SETTLED).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    ended = &mut refresh => {
                        match ended {
                            Ok(Err(error)) => tracing::warn!(
                                "refresh failed; serving what is up: {}",
                                gatehouse_base::escape::Escaped(&error.to_string())
                            ),
                            Err(error) => tracing::warn!("the refresh task failed: {error}"),
                            Ok(Ok(_)) => {}
                        }
                        break;
                    }
                    // Still going in the background from here.
                    () = tokio::time::sleep_until(deadline) => break,
                    () = settled => break,
                    changed = changes.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        self.runtime.snapshot()
    }

    /// The catalog's changes from now on (what was published before is
    /// not a change), for [`tell_changes`].
    fn catalog_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut changes = self.runtime.catalog_changes();
        changes.borrow_and_update();
        changes
    }

    /// Whether `context`'s request is of protocol 2026-07-28 or later (it
    /// says so in its `_meta`): then the session takes no request from
    /// gatehouse, and its questions ride in results ([`rounds`]).
    fn inline(context: &RequestContext<RoleServer>) -> bool {
        context
            .meta
            .protocol_version()
            .is_some_and(|version| !version.has_initialize())
    }

    /// Who may send a parked 2026-07-28 request of this gateway's again:
    /// its session; over HTTP, where each such request is a session of its
    /// own, any client the listener let in (the state, 256 random bits sent
    /// only in the response to that client, is what names the request).
    fn owner(&self) -> rounds::Owner {
        if self.over_http {
            rounds::Owner::Http
        } else {
            rounds::Owner::Session(self.session)
        }
    }

    /// The first round of `context`'s request, of 2026-07-28: `work` runs
    /// in a task of its own under `call` until it ends or its server asks
    /// the person, who is this session's client.
    async fn first_round(
        &self,
        context: &RequestContext<RoleServer>,
        (kind, name): (CallKind, &str),
        call: crate::calls::CallGuard,
        work: rounds::Work,
    ) -> rounds::Round {
        self.upstream.connect_inline(
            self.session,
            context.peer.clone(),
            &context.meta,
            !self.over_http,
        );
        let rounds = self.upstream.rounds();
        let run = rounds.start(self.owner(), kind, name, call, work);
        rounds.round(run).await
    }

    /// The next round of a request sent again with the `state` of its last
    /// one and the client's `responses`. Refused (-32602, naming nothing) if
    /// the request is not of 2026-07-28 or the state names no request of
    /// this client, kind and name.
    async fn resumed(
        &self,
        inline: bool,
        kind: CallKind,
        name: &str,
        state: &str,
        responses: rmcp::model::InputResponses,
    ) -> Result<rounds::Round, ErrorData> {
        if !inline {
            return Err(rounds::unknown_state());
        }
        let rounds = self.upstream.rounds();
        let run = rounds.resume(self.owner(), kind, name, state, responses)?;
        Ok(rounds.round(run).await)
    }

    /// The catalog in which `tool` is found: when it is not (yet) there and
    /// servers are still coming up, after the refresh under way has ended.
    async fn catalog_with(&self, tool: &str) -> Arc<gatehouse_mcp::runtime::Snapshot> {
        let snapshot = self.refreshed().await;
        if snapshot.tool(tool).is_some() || !self.runtime.refreshing() {
            return snapshot;
        }
        if let Err(error) = self.runtime.refresh_if_dirty().await {
            tracing::warn!(
                "refresh failed; serving what is up: {}",
                gatehouse_base::escape::Escaped(&error.to_string())
            );
        }
        self.runtime.snapshot()
    }
}

/// Runs `tell` at each of the catalog's `changes` (telling a client that
/// the lists changed), until it fails (the client is gone) or the runtime
/// is.
async fn tell_changes<F, Told>(mut changes: tokio::sync::watch::Receiver<u64>, mut tell: F)
where
    F: FnMut() -> Told,
    Told: std::future::Future<Output = bool>,
{
    while changes.changed().await.is_ok() {
        if !tell().await {
            break;
        }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .build(),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
    }

    /// Every version rmcp knows: `initialize` negotiates at most the newest
    /// with that handshake (elicitations then go upstream as requests), and
    /// a client that opens with `server/discover` gets 2026-07-28 (its
    /// questions ride in results, `rounds`).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.upstream.connect(self.session, context.peer.clone());
        let changes = self.catalog_changes();
        let peer = context.peer;
        let told = tell_changes(changes, move || {
            let peer = peer.clone();
            async move {
                peer.notify_tool_list_changed().await.is_ok()
                    && peer.notify_resource_list_changed().await.is_ok()
                    && peer.notify_prompt_list_changed().await.is_ok()
            }
        });
        // Until the session ends: a task left waiting for the next change
        // would keep the session's peer (its channel) alive, a few KiB for
        // every session ever opened.
        let ended = self.ended.token.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = ended.cancelled() => {}
                () = told => {}
            }
        });
    }

    /// A 2026-07-28 client hears of catalog changes on a
    /// `subscriptions/listen` stream (it has no `initialized` to start
    /// them): the list changes of tools, resources and prompts.
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .resources_list_changed()
                .prompts_list_changed()
                .build(),
        )
    }

    /// Tells the subscription of each catalog change, as
    /// [`ServerHandler::on_initialized`] tells an initialized session, until
    /// the client cancels it or gatehouse stops.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let changes = self.catalog_changes();
        let sink = subscription.sink().clone();
        let told = tell_changes(changes, move || {
            let sink = sink.clone();
            async move {
                let accepted = sink.accepted();
                (accepted.tools_list_changed != Some(true)
                    || sink.notify_tool_list_changed().await.is_ok())
                    && (accepted.resources_list_changed != Some(true)
                        || sink.notify_resource_list_changed().await.is_ok())
                    && (accepted.prompts_list_changed != Some(true)
                        || sink.notify_prompt_list_changed().await.is_ok())
            }
        });
        tokio::select! {
            () = subscription.cancelled() => {}
            () = told => {}
        }
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .refreshed()
            .await
            .tools()
            .iter()
            .map(|entry| {
                let mut tool = entry.tool.clone();
                tool.name = entry.qualified.clone().into();
                tool
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let inline = Self::inline(&context);
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.clone().unwrap_or_default();
            return self
                .resumed(inline, CallKind::ToolCall, &request.name, state, responses)
                .await?
                .into_tool();
        }
        let span = trace::upstream_request(CallKind::ToolCall, self.session, &context.meta);
        // Not entered until routed: a span is named for good when it is
        // first entered, and its name is the routed one.
        let snapshot = self.catalog_with(&request.name).await;
        let Some(entry) = snapshot.tool(&request.name) else {
            trace::ended(&span, "unknown");
            return Err(ErrorData::invalid_params(
                format!("no tool named `{}`", request.name),
                None,
            ));
        };
        let arguments = request.arguments.clone().map(serde_json::Value::Object);
        let call = self.begin_routed(
            UpstreamCall::new(
                self.session,
                CallKind::ToolCall,
                entry.server.clone(),
                request.name.clone(),
                entry.tool.name.to_string(),
            )
            .with_arguments(arguments),
            &context,
            &span,
        )?;
        let runtime = self.runtime.clone();
        let name = request.name.clone();
        let (server, server_name) = (entry.server.clone(), entry.tool.name.to_string());
        // A call carried across rounds (2026-07-28, inline) outlives its
        // first request: only its client's going ends it.
        let abandoned = self.abandoned((!inline).then(|| context.ct.clone()));
        let give_up = call.give_up();
        let called = async move {
            match runtime
                .call_tool_in_unless(&snapshot, &name, request.arguments, abandoned)
                .await
            {
                Err(RuntimeError::Call(gatehouse_mcp::connection::ConnectError::Abandoned {
                    why,
                    ..
                })) => {
                    tracing::debug!(tool = %gatehouse_base::escape::Escaped(&name), "{why}");
                    give_up.record(why);
                    Err(ErrorData::new(rmcp::model::ErrorCode(-32800), why, None))
                }
                Ok(result) => Ok(result),
                Err(RuntimeError::UnknownTool(name)) => Err(ErrorData::invalid_params(
                    format!("no tool named `{name}`"),
                    None,
                )),
                Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(
                    error.to_string(),
                )])),
            }
        };
        let called = trace::downstream(
            &span,
            CallKind::ToolCall,
            &server,
            &server_name,
            called,
            |result: &CallToolResult| result.is_error == Some(true),
        );
        if inline {
            let work = Box::pin(async move { called.await.map(rounds::Output::Tool) });
            return self
                .first_round(&context, (CallKind::ToolCall, &request.name), call, work)
                .await
                .into_tool();
        }
        crate::calls::on_behalf(call.key(), called)
            .await
            .map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListResourcesResult::with_all_items(
            self.forwarder.list_resources(&snapshot).await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListResourceTemplatesResult::with_all_items(
            self.forwarder.list_resource_templates(&snapshot).await,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let inline = Self::inline(&context);
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.clone().unwrap_or_default();
            return self
                .resumed(
                    inline,
                    CallKind::ResourceRead,
                    &request.uri,
                    state,
                    responses,
                )
                .await?
                .into_resource();
        }
        let span = trace::upstream_request(CallKind::ResourceRead, self.session, &context.meta);
        let snapshot = self.refreshed().await;
        let target = self
            .forwarder
            .resource_target(&snapshot, &request.uri)
            .await
            .inspect_err(|_| trace::ended(&span, "unknown"))?;
        let call = self.begin_routed(
            UpstreamCall::new(
                self.session,
                CallKind::ResourceRead,
                target.server.clone(),
                request.uri.clone(),
                target.uri.clone(),
            ),
            &context,
            &span,
        )?;
        let forwarder = self.forwarder.clone();
        let uri = request.uri.clone();
        let (server, server_uri) = (target.server.clone(), target.uri.clone());
        let read = async move { forwarder.read_target(&snapshot, &uri, &target).await };
        let read = trace::downstream(
            &span,
            CallKind::ResourceRead,
            &server,
            &server_uri,
            read,
            |_| false,
        );
        if inline {
            let work = Box::pin(async move { read.await.map(rounds::Output::Resource) });
            return self
                .first_round(&context, (CallKind::ResourceRead, &request.uri), call, work)
                .await
                .into_resource();
        }
        crate::calls::on_behalf(call.key(), read)
            .await
            .map(Into::into)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let snapshot = self.refreshed().await;
        Ok(ListPromptsResult::with_all_items(
            self.forwarder.list_prompts(&snapshot).await,
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let inline = Self::inline(&context);
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.clone().unwrap_or_default();
            return self
                .resumed(inline, CallKind::PromptGet, &request.name, state, responses)
                .await?
                .into_prompt();
        }
        let span = trace::upstream_request(CallKind::PromptGet, self.session, &context.meta);
        let snapshot = self.refreshed().await;
        let (server, name) = self
            .forwarder
            .prompt_server(&snapshot, &request.name)
            .await
            .inspect_err(|_| trace::ended(&span, "unknown"))?;
        let call = self.begin_routed(
            UpstreamCall::new(
                self.session,
                CallKind::PromptGet,
                server.clone(),
                request.name.clone(),
                name.clone(),
            )
            .with_arguments(request.arguments.clone().map(serde_json::Value::Object)),
            &context,
            &span,
        )?;
        let forwarder = self.forwarder.clone();
        let qualified = request.name.clone();
        let arguments = request.arguments.clone();
        let got = trace::downstream(
            &span,
            CallKind::PromptGet,
            &server.clone(),
            &name.clone(),
            async move {
                forwarder
                    .get_prompt_from(&snapshot, &qualified, &server, &name, arguments)
                    .await
            },
            |_| false,
        );
        if inline {
            let work = Box::pin(async move { got.await.map(rounds::Output::Prompt) });
            return self
                .first_round(&context, (CallKind::PromptGet, &request.name), call, work)
                .await
                .into_prompt();
        }
        crate::calls::on_behalf(call.key(), got)
            .await
            .map(Into::into)
    }
}
