//! `gatehouse review`: run captured `elicitation/create` requests through a
//! chain and print each decision and the MCP answer, as on the wire.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::ValueEnum;
use gatehouse_core::chain::{Chain, ChainLink, ChainReport, Verdict};
use gatehouse_core::context::{
    ApprovalPolicy, ApprovalsReviewer, GranularPolicy, ReviewContext, ToolCatalog,
};
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::escape::Escaped;
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{ModuleReport, Sandbox};
use gatehouse_mcp::config::Config;
use serde_json::{Value, json};

use super::Format;

/// Exit code when every request was decided.
const DECIDED: u8 = 0;
/// Exit code when some request was deferred to the person (and none failed).
const DEFERRED: u8 = 3;
/// Exit code when some review failed (the answer is the fail-closed decline).
const FAILED: u8 = 4;

/// Review elicitation requests with a chain of modules.
///
/// Each --request file holds the `params` of an `elicitation/create` request
/// exactly as on the wire (with `_meta`), or the whole JSON-RPC message.
/// Exit code: 0 every request decided, 3 some deferred to the person,
/// 4 some review failed (answered with the fail-closed decline), 1 bad input.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// A reviewer component; repeat for a chain (run in the order given,
    /// after any modules from --config).
    #[arg(long = "module", value_name = "M.wasm")]
    modules: Vec<PathBuf>,
    /// Configuration (JSON text, or @FILE) for the module at the same position
    /// among --module; modules without one get `{}`.
    #[arg(long = "module-config", value_name = "JSON|@FILE")]
    module_configs: Vec<String>,
    /// A gatehouse.toml whose [review] section gives the chain and limits.
    #[arg(long, value_name = "gatehouse.toml")]
    config: Option<PathBuf>,
    /// A request file; repeat to review several.
    #[arg(long = "request", value_name = "R.json", required = true)]
    requests: Vec<PathBuf>,
    /// The server's `tools/list` result as on the wire (for identity binding).
    #[arg(long, value_name = "T.json")]
    tools: Option<PathBuf>,
    /// A JSON file with context fields (server_name, request_id,
    /// protocol_version, approval_policy, approvals_reviewer,
    /// auto_approve_prompts, session_id, turn_id); flags override it.
    #[arg(long, value_name = "C.json")]
    context: Option<PathBuf>,
    /// The server's name.
    #[arg(long)]
    server: Option<String>,
    /// The request id (an integer, or any other text for a string id).
    #[arg(long)]
    request_id: Option<String>,
    /// The negotiated MCP protocol version.
    #[arg(long)]
    protocol_version: Option<String>,
    /// The approval policy.
    #[arg(long, value_enum)]
    approval_policy: Option<PolicyArg>,
    /// Who answers approvals.
    #[arg(long, value_enum)]
    reviewer: Option<ReviewerArg>,
    /// The server's permission profile auto-approves prompts.
    #[arg(long)]
    auto_approve_prompts: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PolicyArg {
    Untrusted,
    OnRequest,
    /// `granular` with every flag on.
    Granular,
    /// `granular` with `mcp_elicitations = false`.
    GranularNoElicitations,
    Never,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ReviewerArg {
    User,
    AutoReview,
}

pub fn run(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    let (sandbox, chain) = build_chain(&args)?;
    let catalog = match &args.tools {
        Some(path) => Some(
            ToolCatalog::from_wire(&read_json(path)?)
                .with_context(|| format!("{}: not a tools/list result", path.display()))?,
        ),
        None => None,
    };
    let base_context = base_context(&args)?;
    let mut code = DECIDED;
    for path in &args.requests {
        let (params, wire_id) = read_request(path)?;
        let mut context = base_context.clone();
        if args.request_id.is_none()
            && let Some(id) = wire_id
        {
            context.request_id = id;
        }
        if let Some(catalog) = &catalog {
            context.catalog = catalog.entry_for(&params);
        }
        let request = ReviewRequest::new(params, context);
        let report = chain.review(&request);
        code = code.max(match report.verdict {
            Verdict::Decided { .. } => DECIDED,
            Verdict::Deferred => DEFERRED,
            Verdict::Failed { .. } => FAILED,
        });
        match args.format {
            Format::Text => print_text(path, &request, &report),
            Format::Json => println!(
                "{}",
                gatehouse_core::escape::to_json_string(&json_report(path, &report))?
            ),
        }
    }
    drop(sandbox);
    Ok(ExitCode::from(code))
}

fn build_chain(args: &ReviewArgs) -> anyhow::Result<(Sandbox, Chain)> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if config.review.modules.is_empty() && args.modules.is_empty() {
        bail!("no reviewer modules: give --module M.wasm or a --config with [[review.modules]]");
    }
    if args.module_configs.len() > args.modules.len() {
        bail!(
            "{} --module-config values for {} --module files",
            args.module_configs.len(),
            args.modules.len()
        );
    }
    let sandbox = Sandbox::new(config.review.limits.to_limits())?;
    let mut links = gatehouse_mcp::reload::build_checked_chain(&config, &sandbox, None)?
        .links()
        .to_vec();
    for (index, path) in args.modules.iter().enumerate() {
        let module = sandbox.load_file(path, None)?;
        let mut link = ChainLink::new(Arc::new(module)).with_on_failure(config.review.on_failure);
        if let Some(text) = args.module_configs.get(index) {
            link = link.with_config(module_config(text)?);
        }
        links.push(link);
    }
    Ok((sandbox, Chain::new(links)))
}

/// Reads `@FILE` or takes the text, and checks it is JSON.
pub fn module_config(text: &str) -> anyhow::Result<String> {
    let (origin, text) = match text.strip_prefix('@') {
        Some(path) => (
            path.to_owned(),
            std::fs::read_to_string(path)
                .with_context(|| format!("{path}: cannot read the module config"))?,
        ),
        None => ("--module-config".to_owned(), text.to_owned()),
    };
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("{origin}: module config is not valid JSON"))?;
    Ok(value.to_string())
}

fn base_context(args: &ReviewArgs) -> anyhow::Result<ReviewContext> {
    let mut context = match &args.context {
        Some(path) => serde_json::from_value::<ReviewContext>(read_json(path)?)
            .with_context(|| format!("{}: not a valid review context", path.display()))?,
        None => ReviewContext::default(),
    };
    if let Some(server) = &args.server {
        context.server_name = server.clone();
    }
    if let Some(id) = &args.request_id {
        context.request_id = match id.parse::<i64>() {
            Ok(number) => RequestId::Number(number),
            Err(_) => RequestId::Text(id.clone()),
        };
    }
    if let Some(version) = &args.protocol_version {
        context.protocol_version = version.clone();
    }
    if let Some(policy) = args.approval_policy {
        context.approval_policy = match policy {
            PolicyArg::Untrusted => ApprovalPolicy::Untrusted,
            PolicyArg::OnRequest => ApprovalPolicy::OnRequest,
            PolicyArg::Granular => ApprovalPolicy::Granular(GranularPolicy::default()),
            PolicyArg::GranularNoElicitations => ApprovalPolicy::Granular(GranularPolicy {
                mcp_elicitations: false,
                ..GranularPolicy::default()
            }),
            PolicyArg::Never => ApprovalPolicy::Never,
        };
    }
    if let Some(reviewer) = args.reviewer {
        context.approvals_reviewer = match reviewer {
            ReviewerArg::User => ApprovalsReviewer::User,
            ReviewerArg::AutoReview => ApprovalsReviewer::AutoReview,
        };
    }
    if args.auto_approve_prompts {
        context.auto_approve_prompts = true;
    }
    Ok(context)
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))
}

/// A request file: bare params, or a whole JSON-RPC `elicitation/create`
/// message whose id becomes the request id.
fn read_request(path: &Path) -> anyhow::Result<(ElicitationParams, Option<RequestId>)> {
    let value = read_json(path)?;
    ElicitationParams::from_captured(&value).with_context(|| path.display().to_string())
}

fn step_summary(step: &ModuleReport) -> (String, String, String) {
    match &step.result {
        Ok(outcome) => (
            outcome.decision.name().to_owned(),
            outcome
                .risk
                .map_or_else(|| "-".to_owned(), |risk| format!("{risk:?}").to_lowercase()),
            outcome.rationale.clone().unwrap_or_default(),
        ),
        Err(failure) => (
            format!("FAILED ({})", failure.code()),
            "-".to_owned(),
            failure.to_string(),
        ),
    }
}

/// Prints a report for people. Rationales, failures, ids and answers come
/// from guests and captured requests: every piece is escaped.
fn print_text(path: &Path, request: &ReviewRequest, report: &ChainReport) {
    let context = request.context();
    println!(
        "{}  [{} mode, server {}, id {}]",
        Escaped(&path.display().to_string()),
        request.params().elicitation.mode(),
        Escaped(&context.server_name),
        Escaped(&context.request_id.to_string())
    );
    for step in &report.steps {
        let (decision, risk, rationale) = step_summary(step);
        println!(
            "  {:<12} {:<22} {:<7} {:>9.3} ms  {}",
            Escaped(&step.module),
            Escaped(&decision),
            risk,
            step.elapsed.as_secs_f64() * 1000.0,
            Escaped(&rationale.replace('\n', " "))
        );
    }
    match report.answer() {
        Some(answer) => println!("  answer: {}", Escaped(&answer.to_wire().to_string())),
        None => println!("  answer: none; every module deferred: the person decides"),
    }
}

fn json_report(path: &Path, report: &ChainReport) -> Value {
    let verdict = match &report.verdict {
        Verdict::Decided { step, .. } => json!({"kind": "decided", "step": step}),
        Verdict::Failed { step, failure } => {
            json!({"kind": "failed", "step": step, "code": failure.code(), "detail": failure.to_string()})
        }
        Verdict::Deferred => json!({"kind": "deferred"}),
    };
    json!({
        "request": path.display().to_string(),
        "steps": report.steps,
        "verdict": verdict,
        "answer": report.answer().map(|answer| answer.to_wire()),
    })
}
