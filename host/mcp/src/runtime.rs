//! The MCP runtime: the servers that should run, connected, with their tools
//! under qualified names, published as one immutable [`Snapshot`] that is
//! replaced atomically.
//!
//! A refresh is single-flight and coalescing ([`RefreshState`]): build the
//! desired server set, reuse every connection whose configuration did not
//! change (unless a hard refresh asked for a reconnect), connect the rest
//! concurrently, list tools where they are new or stale, and publish as each
//! server comes up (so a slow or hanging server holds nobody else's tools;
//! [`McpRuntime::refreshing`] says a refresh is still under way). A changed
//! credential in the environment (bearer token, header or passed-through
//! variable) makes the runtime dirty and reconnects that server; so does a
//! connection that closed (the server exited or hung up). Holders of an old
//! snapshot keep its connections until they drop it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use tokio::sync::watch;

use crate::connection::{ConnectError, Connection};
use crate::handler::{ConnectionHooks, ElicitationHandler};
use crate::naming::qualified_names;
use crate::refresh::RefreshState;
use crate::server_config::ServerConfig;
use gatehouse_base::escape::Escaped;

/// Where the desired server set comes from (the config file and discovery).
/// It is asked through an `Arc` it shares with the runtime, so that a
/// source may build the list on a thread of its own.
pub trait DesiredServers: Send + Sync + 'static {
    /// The servers that should run now.
    fn desired(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<ServerConfig>, RuntimeError>>;
}

/// A fixed server list.
impl DesiredServers for Vec<ServerConfig> {
    fn desired(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<ServerConfig>, RuntimeError>> {
        Box::pin(async move { Ok(self.as_ref().clone()) })
    }
}

/// A shared source, as the host keeps it to tell it about roots.
impl<T: DesiredServers + ?Sized> DesiredServers for Arc<T> {
    fn desired(self: Arc<Self>) -> BoxFuture<'static, Result<Vec<ServerConfig>, RuntimeError>> {
        T::desired(Arc::clone(&*self))
    }
}

/// Why the runtime could not refresh or serve a call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The desired server set could not be built (bad config, say).
    #[error("{0}")]
    Desired(String),
    /// A server marked `required` failed to start.
    #[error("required {0}")]
    RequiredServerFailed(ConnectError),
    /// No tool by that qualified name.
    #[error("no tool named `{0}`")]
    UnknownTool(String),
    /// The call failed.
    #[error(transparent)]
    Call(ConnectError),
}

/// One tool the runtime serves: the tool as its server lists it, with that
/// server and the qualified name (`server__tool`, [`crate::naming`]) it is
/// served under upstream. (The reviewer's view of a listed tool is the
/// core's `CatalogTool`, which the gateway makes of it.)
#[derive(Debug, Clone)]
pub struct QualifiedTool {
    /// The qualified name (`server__tool`).
    pub qualified: String,
    /// The server.
    pub server: String,
    /// The tool as the server lists it.
    pub tool: Tool,
}

/// An immutable view of the runtime.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Increases with every published refresh.
    pub generation: u64,
    connections: BTreeMap<String, Arc<Connection>>,
    tools: Vec<QualifiedTool>,
    by_name: HashMap<String, usize>,
    failures: BTreeMap<String, String>,
}

impl Snapshot {
    /// The live connections, by server name.
    pub fn connections(&self) -> &BTreeMap<String, Arc<Connection>> {
        &self.connections
    }

    /// A server's connection.
    pub fn connection(&self, server: &str) -> Option<&Arc<Connection>> {
        self.connections.get(server)
    }

    /// Every tool, in server then listing order.
    pub fn tools(&self) -> &[QualifiedTool] {
        &self.tools
    }

    /// A tool by qualified name.
    pub fn tool(&self, qualified: &str) -> Option<&QualifiedTool> {
        self.by_name
            .get(qualified)
            .and_then(|index| self.tools.get(*index))
    }

    /// Servers that failed to start or list (optional or `required`), with
    /// why.
    pub fn failures(&self) -> &BTreeMap<String, String> {
        &self.failures
    }
}

/// How a server's connection attempts ended ([`McpRuntime::starts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStarts {
    /// Connected and listed.
    pub connected: u64,
    /// Failed to start.
    pub failed: u64,
}

struct Inner {
    refresh: RefreshState,
    snapshot: ArcSwap<Snapshot>,
    source: Arc<dyn DesiredServers>,
    elicitation: Arc<dyn ElicitationHandler>,
    reconnect: Mutex<HashSet<String>>,
    connects: AtomicU64,
    /// Each server's connection attempts so far, by how they ended.
    starts: Mutex<BTreeMap<String, ServerStarts>>,
    changes: watch::Sender<u64>,
    /// When the servers that failed to come up are tried again (at the
    /// first request after it).
    retry_failed_at: Mutex<Option<std::time::Instant>>,
}

/// How long after a server failed to come up it is tried again (at the
/// first request after that).
pub const RETRY_FAILED_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use gatehouse_mcp::server_config::RawServer;
/// use gatehouse_mcp::handler::DeclineAll;
/// use gatehouse_mcp::runtime::McpRuntime;
/// let server = RawServer { command: Some("my-mcp-server".into()), ..RawServer::default() }.check("files")?;
/// let runtime = McpRuntime::new(vec![server], Arc::new(DeclineAll));
/// runtime.refresh_if_dirty().await?;
/// for entry in runtime.snapshot().tools() {
///     println!("{}", entry.qualified);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpRuntime {
    inner: Arc<Inner>,
}

impl McpRuntime {
    /// A runtime over `source`, dirty so the first
    /// [`refresh_if_dirty`](Self::refresh_if_dirty) connects everything.
    pub fn new(source: impl DesiredServers, elicitation: Arc<dyn ElicitationHandler>) -> Self {
        let refresh = RefreshState::new();
        refresh.invalidate();
        let (changes, _) = watch::channel(0);
        McpRuntime {
            inner: Arc::new(Inner {
                refresh,
                snapshot: ArcSwap::from_pointee(Snapshot::default()),
                source: Arc::new(source),
                elicitation,
                reconnect: Mutex::new(HashSet::new()),
                connects: AtomicU64::new(0),
                starts: Mutex::default(),
                changes,
                retry_failed_at: Mutex::new(None),
            }),
        }
    }

    /// The current snapshot. Keep it as long as you need its connections.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
    }

    /// Marks the runtime dirty: config, roots, credentials or a server's
    /// tools changed.
    pub fn invalidate(&self) {
        self.inner.refresh.invalidate();
    }

    /// Whether a refresh is owed.
    pub fn is_dirty(&self) -> bool {
        self.inner.refresh.is_dirty()
    }

    /// Whether a refresh is under way: servers may still be coming up (each
    /// is published as it does).
    pub fn refreshing(&self) -> bool {
        self.inner.refresh.is_running()
    }

    /// Whether [`refresh_if_dirty`](Self::refresh_if_dirty) has work to do
    /// or is doing it: the runtime is dirty, a refresh is under way, or a
    /// connection closed or its credentials changed (which makes it dirty).
    pub fn refresh_owed(&self) -> bool {
        self.note_stale_connections();
        self.is_dirty() || self.refreshing()
    }

    /// Makes the runtime dirty when a connection closed or its credentials
    /// changed.
    fn note_stale_connections(&self) {
        let snapshot = self.inner.snapshot.load();
        if snapshot
            .connections
            .values()
            .any(|connection| !connection.credentials_current())
        {
            tracing::info!("credentials changed; refreshing");
            self.invalidate();
        }
        // A server that exited or hung up is reconnected (the refresh does
        // not reuse closed connections); nothing else would make us dirty.
        if let Some(closed) = snapshot
            .connections
            .values()
            .find(|connection| connection.is_closed())
        {
            tracing::info!(server = closed.name(), "connection closed; reconnecting");
            self.invalidate();
        }
        // Servers that failed to come up are tried again once their wait is
        // over.
        if !snapshot.failures.is_empty()
            && let Ok(mut retry_at) = self.inner.retry_failed_at.lock()
            && retry_at.is_some_and(|at| std::time::Instant::now() >= at)
        {
            *retry_at = None;
            tracing::info!("retrying the servers that failed to come up");
            self.invalidate();
        }
    }

    /// Reconnects `server` at the next refresh even if its config is unchanged.
    pub fn hard_refresh(&self, server: &str) {
        if let Ok(mut reconnect) = self.inner.reconnect.lock() {
            reconnect.insert(server.to_owned());
        }
        self.invalidate();
    }

    /// How many refreshes have published.
    pub fn refreshes(&self) -> u64 {
        self.inner.refresh.published()
    }

    /// How many connections have been opened, in total.
    pub fn connects(&self) -> u64 {
        self.inner.connects.load(Ordering::SeqCst)
    }

    /// Each server's connection attempts so far (a server that fails, or
    /// whose config, credentials or tools change, starts again), by how they
    /// ended.
    pub fn starts(&self) -> BTreeMap<String, ServerStarts> {
        self.inner
            .starts
            .lock()
            .map(|starts| starts.clone())
            .unwrap_or_default()
    }

    /// A receiver that sees a new value whenever a publication changes the
    /// tool catalog or the set of servers up (the gateway forwards
    /// `tools/list_changed`, `resources/list_changed` and
    /// `prompts/list_changed` on it).
    pub fn catalog_changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Refreshes if anything changed; see the module docs. Returns whether
    /// this call ran a refresh.
    pub async fn refresh_if_dirty(&self) -> Result<bool, RuntimeError> {
        let inner = &self.inner;
        self.note_stale_connections();
        let weak = Arc::downgrade(inner);
        inner
            .refresh
            .refresh_if_dirty(|| build_and_publish(inner, weak.clone()))
            .await
    }

    /// Calls a tool by qualified name, refreshing first if the runtime is dirty.
    pub async fn call_tool(
        &self,
        qualified: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, RuntimeError> {
        self.refresh_if_dirty().await?;
        let snapshot = self.snapshot();
        self.call_tool_in(&snapshot, qualified, arguments).await
    }

    /// Calls the tool `qualified` as `snapshot` names it, without
    /// refreshing first (the caller resolved the name in that snapshot).
    pub async fn call_tool_in(
        &self,
        snapshot: &Snapshot,
        qualified: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, RuntimeError> {
        self.call_tool_in_unless(snapshot, qualified, arguments, std::future::pending())
            .await
    }

    /// [`call_tool_in`](Self::call_tool_in), given up when `abandoned`
    /// resolves first (the caller went away): the server is told
    /// ([`Connection::call_tool_unless`]).
    pub async fn call_tool_in_unless(
        &self,
        snapshot: &Snapshot,
        qualified: &str,
        arguments: Option<JsonObject>,
        abandoned: impl std::future::Future<Output = &'static str>,
    ) -> Result<CallToolResult, RuntimeError> {
        let entry = snapshot
            .tool(qualified)
            .ok_or_else(|| RuntimeError::UnknownTool(qualified.to_owned()))?;
        let connection = snapshot
            .connection(&entry.server)
            .ok_or_else(|| RuntimeError::UnknownTool(qualified.to_owned()))?;
        connection
            .call_tool_unless(&entry.tool.name, arguments, abandoned)
            .await
            .map_err(RuntimeError::Call)
    }
}

async fn build_and_publish(inner: &Inner, weak: Weak<Inner>) -> Result<(), RuntimeError> {
    use futures::StreamExt;

    let desired = inner.source.clone().desired().await?;
    let current = inner.snapshot.load_full();
    let reconnect: HashSet<String> = inner
        .reconnect
        .lock()
        .map(|mut set| std::mem::take(&mut *set))
        .unwrap_or_default();
    let hooks = ConnectionHooks {
        elicitation: inner.elicitation.clone(),
        on_tools_changed: Arc::new(move |server: &str| {
            tracing::debug!(server, "tools changed");
            if let Some(inner) = weak.upgrade() {
                inner.refresh.invalidate();
            }
        }),
    };
    let known_tools = |name: &str| -> Vec<Tool> {
        current
            .tools
            .iter()
            .filter(|entry| entry.server == name)
            .map(|entry| entry.tool.clone())
            .collect()
    };
    // What is up so far: kept connections with the tools they had, then
    // each new one as it comes up.
    let mut connections = BTreeMap::new();
    let mut listed: BTreeMap<String, Vec<Tool>> = BTreeMap::new();
    let mut failures = BTreeMap::new();
    // Each server that is new (or whose tools are stale) connects and lists
    // its tools on its own: a slow or hanging one holds nobody else.
    let mut arriving = futures::stream::FuturesUnordered::new();
    for config in desired.into_iter().filter(|config| config.enabled) {
        match current.connections.get(&config.name) {
            Some(existing)
                if *existing.config() == config
                    && !existing.is_closed()
                    && existing.credentials_current()
                    && !reconnect.contains(&config.name) =>
            {
                connections.insert(config.name.clone(), existing.clone());
                listed.insert(config.name.clone(), known_tools(&config.name));
                if existing.tools_stale() {
                    let existing = existing.clone();
                    arriving.push(Box::pin(async move {
                        let tools = existing.list_tools().await;
                        Arrival::Relisted(existing, tools)
                    }) as BoxFuture<'static, Arrival>);
                }
            }
            _ => {
                let hooks = hooks.clone();
                inner.connects.fetch_add(1, Ordering::SeqCst);
                arriving.push(Box::pin(async move {
                    let required = config.required;
                    match Connection::connect(config, hooks).await {
                        Ok(connection) => {
                            let tools = connection.list_tools().await;
                            Arrival::Connected(Arc::new(connection), tools)
                        }
                        Err(error) => Arrival::Failed { required, error },
                    }
                }));
            }
        }
    }
    let mut required_failure = None;
    while let Some(arrival) = arriving.next().await {
        let started = match &arrival {
            Arrival::Failed { error, .. } => Some((error.server().to_owned(), false)),
            Arrival::Connected(connection, _) => Some((connection.name().to_owned(), true)),
            Arrival::Relisted(..) => None,
        };
        if let Some((server, connected)) = started
            && let Ok(mut starts) = inner.starts.lock()
        {
            let counts = starts.entry(server).or_default();
            if connected {
                counts.connected += 1;
            } else {
                counts.failed += 1;
            }
        }
        let (connection, tools) = match arrival {
            Arrival::Failed { required, error } => {
                // Either way the snapshot says it failed, and why (status,
                // readiness and the backend-down alert read it there).
                failures.insert(error.server().to_owned(), error.to_string());
                if required {
                    tracing::error!("required server failed: {}", Escaped(&error.to_string()));
                    required_failure.get_or_insert(error);
                } else {
                    tracing::warn!("skipping optional server: {}", Escaped(&error.to_string()));
                }
                continue;
            }
            Arrival::Connected(connection, tools) | Arrival::Relisted(connection, tools) => {
                (connection, tools)
            }
        };
        let name = connection.name().to_owned();
        let tools = tools.unwrap_or_else(|error| {
            tracing::warn!("{}", Escaped(&error.to_string()));
            failures.insert(name.clone(), error.to_string());
            known_tools(&name)
        });
        connections.insert(name.clone(), connection);
        listed.insert(name, tools);
        // Published as each server comes up (the client hears of it through
        // `tools/list_changed`), unless it is the last: that one is the
        // refresh's own publication below.
        if !arriving.is_empty() {
            publish(inner, &connections, &listed, &failures);
        }
    }
    if let Some(error) = required_failure {
        // What is up stays published; the runtime stays dirty, so the next
        // refresh tries the required server again.
        publish(inner, &connections, &listed, &failures);
        return Err(RuntimeError::RequiredServerFailed(error));
    }
    publish(inner, &connections, &listed, &failures);
    Ok(())
}

/// What a server that was connecting or relisting came back with.
enum Arrival {
    /// A new connection, with its tools (or why they could not be listed).
    Connected(Arc<Connection>, Result<Vec<Tool>, ConnectError>),
    /// A kept connection whose tools were stale, listed again.
    Relisted(Arc<Connection>, Result<Vec<Tool>, ConnectError>),
    /// The connection could not be made.
    Failed {
        /// Whether the server is `required`.
        required: bool,
        /// Why.
        error: ConnectError,
    },
}

/// Publishes a snapshot of `connections` with the tools `listed` for them
/// (by server), and tells catalog watchers when the catalog changed.
fn publish(
    inner: &Inner,
    connections: &BTreeMap<String, Arc<Connection>>,
    listed: &BTreeMap<String, Vec<Tool>>,
    failures: &BTreeMap<String, String>,
) {
    let current = inner.snapshot.load_full();
    let listed: Vec<(&String, &Vec<Tool>)> = listed
        .iter()
        .filter(|(server, _)| connections.contains_key(*server))
        .collect();
    let identities: Vec<(&str, &str)> = listed
        .iter()
        .flat_map(|(server, tools)| {
            tools
                .iter()
                .map(move |tool| (server.as_str(), tool.name.as_ref()))
        })
        .collect();
    let names = qualified_names(&identities);
    let mut tools = Vec::with_capacity(names.len());
    let mut names = names.into_iter();
    for (server, server_tools) in &listed {
        for tool in server_tools.iter() {
            if let Some(qualified) = names.next() {
                tools.push(QualifiedTool {
                    qualified,
                    server: (*server).clone(),
                    tool: tool.clone(),
                });
            }
        }
    }
    let by_name = tools
        .iter()
        .enumerate()
        .map(|(index, entry)| (entry.qualified.clone(), index))
        .collect();
    // The server set counts too: a new server's resources and prompts.
    let catalog_changed =
        !same_catalog(&current.tools, &tools) || !current.connections.keys().eq(connections.keys());
    let generation = current.generation + 1;
    inner.snapshot.store(Arc::new(Snapshot {
        generation,
        connections: connections.clone(),
        tools,
        by_name,
        failures: failures.clone(),
    }));
    if catalog_changed {
        inner.changes.send_replace(generation);
    }
    if !failures.is_empty()
        && let Ok(mut retry_at) = inner.retry_failed_at.lock()
    {
        *retry_at = Some(std::time::Instant::now() + RETRY_FAILED_AFTER);
    }
}

fn same_catalog(before: &[QualifiedTool], after: &[QualifiedTool]) -> bool {
    before.len() == after.len()
        && before
            .iter()
            .zip(after)
            .all(|(a, b)| a.qualified == b.qualified && a.tool == b.tool)
}
