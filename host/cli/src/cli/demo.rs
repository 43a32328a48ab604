//! `gatehouse demo`: the embedded default. Starts four demo MCP servers
//! (one on protocol 2026-07-28),
//! the reference chain (allowlist, then guardian), and a scripted person,
//! drives one elicitation of every kind through the real pipeline, and
//! prints what decided each and how fast.
//!
//! The fourth server, `repo`, is reviewed by a chain of its own: the model
//! guardian (world `model-reviewer`, contract 0.2) granted a model. The model
//! is the conformance kit's scripted one ([`ModelScript`]): no real model is
//! called, and the output says so. Its two approval requests are tied to the
//! agent's call behind them (the related call), as the gateway ties them;
//! the other servers' router has no call registry, so their rows are as they
//! were.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use futures::future::BoxFuture;
use gatehouse_audit::AuditLog;
use gatehouse_base::escape::Escaped;
use gatehouse_conformance::model::{ALLOW_ANSWER, DENY_ANSWER, ModelScript, ScriptedModel, Step};
use gatehouse_core::chain::{Chain, ChainLink};
use gatehouse_core::context::ApprovalPolicy;
use gatehouse_core::model::ModelGrant;
use gatehouse_core::sandbox::{Limits, Sandbox};
use gatehouse_gateway::calls::{CallKind, Calls, SessionId, UpstreamCall};
use gatehouse_gateway::router::{
    ElicitationSettings, NoAnswer, NotAsked, Person, Router, ServerOverrides,
};
use gatehouse_mcp::handler::{ElicitationHandler, IncomingElicitation, Refused};
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
    /// Where the reference modules' compiled code is kept, so that the next
    /// run starts at once (the user's compile cache by default).
    #[command(flatten)]
    compile_cache: super::authoring_cache::AuthoringCacheArgs,
}

/// The person in the demo: answers forms with a name, consents to URLs.
struct ScriptedPerson;

impl Person for ScriptedPerson {
    fn ask(
        &self,
        elicitation: &IncomingElicitation,
        _: Option<SessionId>,
    ) -> Result<BoxFuture<'static, Result<ElicitResult, NoAnswer>>, NotAsked> {
        let answer = if elicitation.params.get("mode").and_then(Value::as_str) == Some("url") {
            json!({"action": "accept"})
        } else {
            json!({"action": "accept", "content": {"name": "Ada"}})
        };
        Ok(Box::pin(async move {
            serde_json::from_value(answer)
                .map_err(|error| NoAnswer::ClientFailed(error.to_string()))
        }))
    }
}

/// The server whose elicitations the model guardian reviews.
const MODEL_SERVER: &str = "repo";

/// The name the stand-in model is granted under (as `[models.NAME]`).
const MODEL_GRANT: &str = "demo";

/// Hands the model server's elicitations to the model router, every other
/// server's to the reference router.
struct ByServer {
    reference: Arc<Router>,
    model: Arc<Router>,
}

impl ByServer {
    fn router(&self, server: &str) -> &Arc<Router> {
        if server == MODEL_SERVER {
            &self.model
        } else {
            &self.reference
        }
    }
}

impl ElicitationHandler for ByServer {
    fn elicit(
        self: Arc<Self>,
        elicitation: IncomingElicitation,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        self.router(&elicitation.server).clone().elicit(elicitation)
    }

    fn completed(&self, server: &str, elicitation_id: &str) {
        self.router(server).completed(server, elicitation_id);
    }

    /// Both routers write the one log: what a connection refuses before
    /// routing is audited there too.
    fn refused(&self, refused: Refused) {
        self.reference.refused(refused);
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
    let guests = super::guests_dir(args.guests)?;
    let server = args.server.unwrap_or_else(|| exe_dir.join("demo-server"));
    if !server.exists() {
        bail!(
            "{}: not found; build it with `cargo build -p gatehouse-example-servers`",
            server.display()
        );
    }
    let sandbox = args
        .compile_cache
        .apply(Sandbox::builder().limits(Limits::default()))
        .build()?;
    let load = |name: &str| {
        sandbox
            .load_file(guests.join(format!("gatehouse_{name}.wasm")), None)
            .map(|module| Arc::new(module.renamed(&name.replace('_', "-"))))
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
    // The model-reviewed server's chain: the model guardian, granted the
    // kit's scripted model. It answers allow to the first review and deny to
    // the second (the guardian asks once per review), at once, offline.
    let stand_in: Arc<ScriptedModel> = Arc::new(
        ModelScript::new(
            MODEL_GRANT,
            vec![
                Step::Answer(ALLOW_ANSWER.to_owned()),
                Step::Answer(DENY_ANSWER.to_owned()),
            ],
        )?
        .model(),
    );
    let model_guardian = load("model_guardian")?;
    let model_link = ChainLink::new(model_guardian.clone())
        .with_model(ModelGrant::new(MODEL_GRANT, stand_in.clone()));
    model_link.check_grant()?;
    let calls = Arc::new(Calls::default());
    let model_router = Arc::new(Router::new(
        Chain::new(vec![model_link]),
        ElicitationSettings::default(),
        audit.clone(),
        Arc::new(ScriptedPerson),
        64,
    ));
    model_router.set_calls(calls.clone());
    let agent = SessionId::next();
    // `next` speaks protocol 2026-07-28: its elicitations come back as
    // input requests inside tool results.
    let servers = [
        ("git", None),
        ("locked", None),
        ("next", Some("2026-07-28")),
        (MODEL_SERVER, None),
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
    let mcp = McpRuntime::new(
        servers,
        Arc::new(ByServer {
            reference: router.clone(),
            model: model_router.clone(),
        }),
    );
    for router in [&router, &model_router] {
        let catalog = mcp.clone();
        router.set_catalog_source(move |name| {
            gatehouse_gateway::catalog::tool_catalog(&catalog.snapshot(), name)
        });
    }
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
        (
            "model-reviewed: delete scratch/demo",
            "repo__delete_branch",
            json!({"branch": "scratch/demo"}),
        ),
        (
            "model-reviewed: delete main",
            "repo__delete_branch",
            json!({"branch": "main"}),
        ),
    ];
    let mut server_answers = Vec::new();
    for (_, tool, arguments) in &script {
        // The agent's call behind the model server's elicitation, in flight
        // while it asks, as the gateway records it: the related call.
        let _related = tool.strip_prefix(&format!("{MODEL_SERVER}__")).map(|name| {
            calls.begin(
                UpstreamCall::new(agent, CallKind::ToolCall, MODEL_SERVER, *tool, name)
                    .with_arguments(Some(arguments.clone())),
            )
        });
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
        "{:<2} {:<37} {:<7} {:<7} {:<10} {:<23} {:>9}  answer",
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
            "{:<2} {:<37} {:<7} {:<7} {:<10} {:<23} {:>6.3} ms  {}",
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
    print_model_review(
        &script,
        &lines,
        model_guardian.world().name(),
        model_guardian.contract_version(),
    );
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
    if stand_in.calls() != 2 {
        bail!(
            "the model guardian asked its model {} times, not once per review",
            stand_in.calls()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The model-reviewed rows, spelled out: which module decided, what the model
/// answered, and what the audit line recorded of the call.
fn print_model_review(
    script: &[(&str, &str, Value)],
    lines: &[Value],
    world: &str,
    contract: &str,
) {
    let rows: Vec<(usize, &str, &Value, &Value)> = script
        .iter()
        .zip(lines)
        .enumerate()
        .filter(|(_, (_, line))| line["server"] == MODEL_SERVER)
        .map(|(index, ((_, tool, arguments), line))| (index + 1, *tool, arguments, line))
        .collect();
    let (Some((first, ..)), Some((last, ..))) = (rows.first(), rows.last()) else {
        return;
    };
    println!(
        "\nModel-reviewed (rows {first}-{last}): server `{MODEL_SERVER}`, reviewed by the model guardian \
         (world {world}, contract {contract}), granted model `{MODEL_GRANT}`"
    );
    println!(
        "   model: scripted stand-in (no real model is called; point [models.NAME] at OpenAI, Ollama or vLLM for a real one)"
    );
    println!(
        "   its script (the conformance kit's ModelScript): answer allow, then deny; the guardian asks it once per review"
    );
    for (row, tool, arguments, line) in rows {
        match line["session"].as_u64() {
            Some(session) => println!(
                "{row:<2} agent's call: {tool} {arguments} (session {session}), the related call the module saw"
            ),
            None => println!("{row:<2} agent's call: none tied to the elicitation"),
        }
        let steps = line["steps"].as_array().cloned().unwrap_or_default();
        let Some(step) = steps.last() else {
            println!("   no module ran");
            continue;
        };
        println!(
            "   decided by module {}: {}; answer sent: {}",
            Escaped(step["module"].as_str().unwrap_or("?")),
            Escaped(step["outcome"].as_str().unwrap_or("?")),
            Escaped(line["answer"]["action"].as_str().unwrap_or("?")),
        );
        let calls = step["model_calls"].as_array().cloned().unwrap_or_default();
        if calls.is_empty() {
            println!("   the model was not asked");
        }
        for call in &calls {
            let answer: Value = call["answer"]
                .as_str()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default();
            match call["error"].as_str() {
                Some(error) => println!("   model verdict: none (error {})", Escaped(error)),
                None => println!(
                    "   model verdict: {} (risk {}): {}",
                    Escaped(answer["outcome"].as_str().unwrap_or("?")),
                    Escaped(answer["risk_level"].as_str().unwrap_or("?")),
                    Escaped(answer["rationale"].as_str().unwrap_or("?")),
                ),
            }
            let sha = call["prompt_sha256"].as_str().unwrap_or("?");
            println!(
                "   audit: model call recorded: grant {}, model {}, attempts {}, prompt sha256 {}...",
                Escaped(call["grant"].as_str().unwrap_or("?")),
                Escaped(call["model"].as_str().unwrap_or("?")),
                call["attempts"],
                Escaped(sha.get(..12).unwrap_or(sha)),
            );
        }
    }
}
