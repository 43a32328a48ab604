//! `gatehouse demo`: the embedded default. Starts three demo MCP servers
//! (one on protocol 2026-07-28),
//! the reference chain (allowlist, then guardian), and a scripted person,
//! drives one elicitation of every kind through the real pipeline, and
//! prints what decided each and how fast.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use futures::future::BoxFuture;
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::context::ApprovalPolicy;
use gatehouse_core::escape::Escaped;
use gatehouse_core::sandbox::{Limits, Sandbox};
use gatehouse_mcp::audit::AuditLog;
use gatehouse_mcp::calls::SessionId;
use gatehouse_mcp::handler::IncomingElicitation;
use gatehouse_mcp::router::{ElicitationSettings, NotAsked, Person, Router, ServerOverrides};
use gatehouse_mcp::runtime::McpRuntime;
use gatehouse_mcp::server_config::RawServer;
use rmcp::model::{ElicitResult, ErrorData};
use serde_json::{Value, json};

/// Run a scripted session through every kind of elicitation and print the
/// decisions. Needs the guests (.ci/build-guests) and demo-server
/// (`cargo build -p gatehouse-example-servers`).
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where the guest components are (default: next to this binary's
    /// target directory, `wasm32-wasip2/guest`).
    #[arg(long)]
    guests: Option<PathBuf>,
    /// The demo-server binary (default: next to this binary).
    #[arg(long)]
    server: Option<PathBuf>,
}

/// The person in the demo: answers forms with a name, consents to URLs.
struct ScriptedPerson;

impl Person for ScriptedPerson {
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, ErrorData>>, NotAsked> {
        let answer = if elicitation.params.get("mode").and_then(Value::as_str) == Some("url") {
            json!({"action": "accept"})
        } else {
            json!({"action": "accept", "content": {"name": "Ada"}})
        };
        Ok(Box::pin(async move {
            serde_json::from_value(answer)
                .map_err(|error| ErrorData::internal_error(error.to_string(), None))
        }))
    }
}

fn approval(tool: &str, params: Value) -> Value {
    json!({
        "message": format!("Allow {tool}?"),
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call",
                  "tool_name": tool, "tool_params": params}
    })
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(demo(args))
}

async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let exe_dir = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let guests = args
        .guests
        .or_else(|| std::env::var_os("GATEHOUSE_GUESTS_DIR").map(PathBuf::from))
        .unwrap_or_else(|| exe_dir.join("../wasm32-wasip2/guest"));
    let server = args.server.unwrap_or_else(|| exe_dir.join("demo-server"));
    if !server.exists() {
        bail!(
            "{}: not found; build it with `cargo build -p gatehouse-example-servers`",
            server.display()
        );
    }
    let sandbox = Sandbox::new(Limits::default())?;
    let load = |name: &str| {
        sandbox
            .load_file(guests.join(format!("gatehouse_{name}.wasm")), None)
            .map(|module| Arc::new(module.renamed(name)))
            .with_context(|| "build the guests with .ci/build-guests".to_owned())
    };
    let chain = Chain::new(vec![
        ChainLink::new(load("allowlist")?).with_config(
            json!({"rules": [{"mode": "url", "url": "https://tracker.example.com/*", "decision": "accept"}]}).to_string(),
        ),
        ChainLink::new(load("guardian")?).with_config(json!({"allow": [{"server": "git", "tool": "read_*"}]}).to_string()),
    ]);
    let mut settings = ElicitationSettings::default();
    settings.servers.insert(
        "locked".to_owned(),
        ServerOverrides {
            approval_policy: Some(ApprovalPolicy::Never),
            ..ServerOverrides::default()
        },
    );
    let audit = Arc::new(AuditLog::in_memory());
    let router = Arc::new(Router::new(
        chain,
        settings,
        audit.clone(),
        Arc::new(ScriptedPerson),
        64,
    ));
    // `next` speaks protocol 2026-07-28: its elicitations come back as
    // input requests inside tool results.
    let servers = [
        ("git", None),
        ("locked", None),
        ("next", Some("2026-07-28")),
    ]
    .into_iter()
    .map(|(name, protocol)| {
        let mut args = vec!["--name".to_owned(), name.to_owned()];
        if let Some(protocol) = protocol {
            args.extend(["--protocol".to_owned(), protocol.to_owned()]);
        }
        RawServer {
            command: Some(server.display().to_string()),
            args,
            protocol_version: protocol.map(str::to_owned),
            ..RawServer::default()
        }
        .check(name)
    })
    .collect::<Result<Vec<_>, _>>()?;
    let mcp = McpRuntime::new(servers, Arc::new(router.clone()));
    let catalog = mcp.clone();
    router.set_catalog_source(move |name| catalog.snapshot().catalog_for(name));
    mcp.refresh_if_dirty().await?;

    let script: Vec<(&str, &str, Value)> = vec![
        (
            "approved by review (read-only tool)",
            "git__elicit_raw",
            json!({"params": approval("read_file", json!({"path": "README.md"}))}),
        ),
        (
            "denied by review (destructive tool)",
            "git__delete_branch",
            json!({"branch": "main"}),
        ),
        (
            "declined for bad metadata",
            "git__elicit_raw",
            json!({"params": approval("read_file", json!("not an object"))}),
        ),
        (
            "declined by policy (never)",
            "locked__delete_branch",
            json!({"branch": "main"}),
        ),
        (
            "deferred to the person, answered",
            "git__ask_name",
            json!({}),
        ),
        (
            "URL mode, allowed by policy",
            "git__open_url",
            json!({"url": "https://tracker.example.com/login"}),
        ),
        (
            "URL mode, deferred to the person",
            "git__open_url",
            json!({"url": "https://elsewhere.example.org/"}),
        ),
        (
            "input request in a tool result (2026)",
            "next__delete_branch",
            json!({"branch": "main"}),
        ),
        (
            "nested schema refused (-32602)",
            "git__elicit_raw",
            json!({"params": {"message": "?", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}}}),
        ),
    ];
    let mut server_answers = Vec::new();
    for (_, tool, arguments) in &script {
        let result = mcp.call_tool(tool, arguments.as_object().cloned()).await?;
        let wire = serde_json::to_value(&result).unwrap_or_default();
        let text = wire["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        server_answers.push(text);
    }
    let lines: Vec<Value> = audit
        .lines()
        .iter()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    println!(
        "{:<2} {:<37} {:<7} {:<7} {:<10} {:<22} {:>9}  answer",
        "#", "scenario", "server", "mode", "decided by", "module: outcome", "latency"
    );
    for (index, ((scenario, _, _), line)) in script.iter().zip(&lines).enumerate() {
        let steps = line["steps"].as_array().cloned().unwrap_or_default();
        let deciding = steps
            .last()
            .map(|step| {
                format!(
                    "{}: {}",
                    step["module"].as_str().unwrap_or("?"),
                    step["outcome"].as_str().unwrap_or("?")
                )
            })
            .unwrap_or_else(|| "-".to_owned());
        let answer = match line["answer"].get("error") {
            Some(error) => format!("error {}", error["code"]),
            None => line["answer"]["action"].as_str().unwrap_or("?").to_owned(),
        };
        // Audit fields and server replies are the servers' and modules'
        // words: escaped.
        println!(
            "{:<2} {:<37} {:<7} {:<7} {:<10} {:<22} {:>6.3} ms  {}",
            index + 1,
            scenario,
            Escaped(line["server"].as_str().unwrap_or("?")),
            Escaped(line["mode"].as_str().unwrap_or("?")),
            Escaped(line["decided_by"].as_str().unwrap_or("?")),
            Escaped(&deciding),
            line["latency_us"].as_f64().unwrap_or(0.0) / 1000.0,
            Escaped(&answer),
        );
    }
    println!("\nWhat each server received:");
    for (index, text) in server_answers.iter().enumerate() {
        println!(
            "{:<2} {}",
            index + 1,
            Escaped(text.lines().next().unwrap_or_default())
        );
    }
    if lines.len() != script.len() {
        bail!("{} elicitations, {} audit lines", script.len(), lines.len());
    }
    Ok(ExitCode::SUCCESS)
}
