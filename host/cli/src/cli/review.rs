//! `gatehouse review`: run captured `elicitation/create` requests through a
//! chain and print each decision and the MCP answer, as on the wire.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::ValueEnum;
use gatehouse_conformance::model::ModelScript;
use gatehouse_core::chain::{Chain, ChainReport, Verdict};
use gatehouse_core::config::ModuleConfig;
use gatehouse_core::context::{
    ApprovalPolicy, ApprovalsReviewer, CallKind, GranularPolicy, RelatedCall, ReviewContext,
    ToolCatalog,
};
use gatehouse_core::contract::World;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::escape::Escaped;
use gatehouse_core::model::{ModelCallRecord, ModelGrant};
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
    /// auto_approve_prompts, session_id, turn_id, related_call); flags
    /// override it.
    #[arg(long, value_name = "C.json")]
    context: Option<PathBuf>,
    /// The model granted to the model-reviewers among --module, replacing the
    /// model every [[review.modules]] entry of --config names:
    /// `stub:allow|deny|error|timeout|malformed|rejected|rate-limited|cancelled`
    /// or `script:PATH` (a JSON list of {"answer": "TEXT"} or
    /// {"error": "timeout|transient|rate-limited|rejected|cancelled"} steps,
    /// used in order, the last repeated, from the start for each request),
    /// neither of which leaves this process; or NAME, a [models.NAME] of
    /// --config, which does.
    #[arg(long, value_name = "stub:MODE|script:PATH|NAME")]
    model: Option<String>,
    /// The own limits of every --module (the modules of --config have
    /// theirs in their entries).
    #[command(flatten)]
    limits: super::module_limits::ModuleLimitsArgs,
    /// The agent's call the elicitation belongs to (what a model-reviewer
    /// reads from the `call` interface), as JSON text or @FILE:
    /// {"session_id": "1", "kind": "tool-call|resource-read|prompt-get",
    /// "qualified_name": "github__delete_branch", "name": "delete_branch",
    /// "arguments": {...}, "id": "7"}; arguments and id are optional. It
    /// replaces the context file's `related_call` and sets the session.
    #[arg(long, value_name = "JSON|@FILE")]
    related_call: Option<String>,
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
    let built = build_chain(&args)?;
    let chain = &built.chain;
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
        // A script starts over for every request: fresh scripted models.
        let report = match &built.script {
            Some(script) => refreshed(chain, script).review(&request),
            None => chain.review(&request),
        };
        code = code.max(match report.verdict {
            Verdict::Decided { .. } => DECIDED,
            Verdict::Deferred => DEFERRED,
            Verdict::Failed { .. } => FAILED,
        });
        match args.format {
            Format::Text => print_text(path, &request, &report),
            Format::Json => println!(
                "{}",
                gatehouse_core::escape::to_json_string(&json_report(path, &request, &report))?
            ),
        }
    }
    drop(built);
    Ok(ExitCode::from(code))
}

/// The chain, and what it needs kept alive while it reviews.
struct BuiltChain {
    chain: Chain,
    /// The `--model` script, when `--model` is a stub or a script: its
    /// links get a fresh model for every request.
    script: Option<ModelScript>,
    /// The runtime a configured model's HTTP requests run on. The reviews
    /// themselves run on this thread, outside it (`OpenAiModel::complete`
    /// blocks on it).
    _runtime: Option<tokio::runtime::Runtime>,
    _sandbox: Sandbox,
}

/// The models the chain may be granted, by name, and the `--model` grant's
/// name when one replaces the config's.
struct Models {
    grants: BTreeMap<String, ModelGrant>,
    chosen: Option<String>,
    script: Option<ModelScript>,
    runtime: Option<tokio::runtime::Runtime>,
}

fn build_chain(args: &ReviewArgs) -> anyhow::Result<BuiltChain> {
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
    let models = models(args, &config)?;
    let module_limits = args.limits.to_module_limits();
    let sandbox = Sandbox::new(
        config
            .review
            .to_limits()
            .to_builder()
            .room_for(&module_limits)
            .build(),
    )?;
    let mut links = Vec::with_capacity(config.review.modules.len() + args.modules.len());
    for (index, spec) in config.review.modules.iter().enumerate() {
        let path = config.base_dir().join(&spec.path);
        let name = spec.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_else(|| "module".to_owned())
        });
        let module = sandbox
            .load_file_with(&path, spec.sha256.as_deref(), &spec.module_limits())
            .with_context(|| format!("review.modules[{index}]"))?
            .renamed(&name);
        let mut spec = spec.clone();
        if spec.model.is_some()
            && let Some(chosen) = &models.chosen
        {
            spec.model = Some(chosen.clone());
        }
        let link = spec
            .link(Arc::new(module), config.review.on_failure, &models.grants)
            .with_context(|| format!("review.modules[{index}]"))?;
        links.push(link);
    }
    for (index, path) in args.modules.iter().enumerate() {
        let module = sandbox.load_file_with(path, None, &module_limits)?;
        let config_value = args
            .module_configs
            .get(index)
            .map(|text| module_config(text).and_then(|text| Ok(serde_json::from_str(&text)?)))
            .transpose()?;
        let spec = ModuleConfig {
            path: path.clone(),
            name: None,
            sha256: None,
            on_failure: None,
            config: config_value,
            model: models
                .chosen
                .clone()
                .filter(|_| module.world() == World::ModelReviewer),
            limits: Default::default(),
        };
        let link = spec
            .link(Arc::new(module), config.review.on_failure, &models.grants)
            .with_context(|| {
                format!(
                    "{}: grant it a model with --model stub:MODE, script:PATH or the NAME of a [models.NAME] in --config",
                    path.display()
                )
            })?;
        links.push(link);
    }
    Ok(BuiltChain {
        chain: Chain::new(links),
        script: models.script,
        _runtime: models.runtime,
        _sandbox: sandbox,
    })
}

/// The models of `--model` and `--config`. A stub or a script replaces
/// every grant and needs no runtime; a NAME is built from its
/// `[models.NAME]`; without `--model`, every `[models.NAME]` of the config
/// is built, as `gatehouse serve` builds them.
fn models(args: &ReviewArgs, config: &Config) -> anyhow::Result<Models> {
    let mut models = Models {
        grants: BTreeMap::new(),
        chosen: None,
        script: None,
        runtime: None,
    };
    let configured = match args.model.as_deref() {
        Some(spec) if ModelScript::is_spec(spec) => {
            let script = ModelScript::from_spec(spec)?;
            models
                .grants
                .insert(script.name().to_owned(), script.grant());
            models.chosen = Some(script.name().to_owned());
            models.script = Some(script);
            return Ok(models);
        }
        Some(name) => {
            let Some(model) = config.models.get(name) else {
                let defined = config
                    .models
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                bail!(
                    "--model {}: not stub:MODE or script:PATH, and no [models.{}] is defined{}; expected {}, or the NAME of a [models.NAME] in --config",
                    Escaped(name),
                    Escaped(name),
                    if defined.is_empty() {
                        match &args.config {
                            Some(path) => format!(" in {}", path.display()),
                            None => " (no --config)".to_owned(),
                        }
                    } else {
                        format!(" (defined: {defined})")
                    },
                    gatehouse_conformance::model::SPEC_FORMS
                );
            };
            models.chosen = Some(name.to_owned());
            BTreeMap::from([(name.to_owned(), model.clone())])
        }
        None => config.models.clone(),
    };
    if configured.is_empty() {
        return Ok(models);
    }
    // The models' HTTP requests run on this runtime's worker; the reviews
    // call them from this thread, outside it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gatehouse-model")
        .enable_all()
        .build()
        .context("cannot start the runtime the models' requests run on")?;
    models.grants = gatehouse_mcp::model::build_models(&configured, runtime.handle().clone())?;
    models.runtime = Some(runtime);
    Ok(models)
}

/// `chain` with a fresh model of `script` for each link granted it, so that
/// the script starts over.
fn refreshed(chain: &Chain, script: &ModelScript) -> Chain {
    Chain::new(
        chain
            .links()
            .iter()
            .cloned()
            .map(|link| match &link.model {
                Some(grant) if grant.name() == script.name() => link.with_model(script.grant()),
                _ => link,
            })
            .collect(),
    )
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
    if let Some(text) = &args.related_call {
        context = context.with_related_call(related_call(text)?);
    }
    Ok(context)
}

/// `--related-call`: JSON text or `@FILE`, in [`RelatedCall`]'s shape.
fn related_call(text: &str) -> anyhow::Result<RelatedCall> {
    let (origin, text) = match text.strip_prefix('@') {
        Some(path) => (
            path.to_owned(),
            std::fs::read_to_string(path)
                .with_context(|| format!("{path}: cannot read the related call"))?,
        ),
        None => ("--related-call".to_owned(), text.to_owned()),
    };
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{origin}: not a related call: expected {{\"session_id\": \"1\", \"kind\": \"tool-call|resource-read|prompt-get\", \"qualified_name\": \"...\", \"name\": \"...\", \"arguments\": {{...}}, \"id\": \"...\"}}"
        )
    })
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
    if let Some(call) = &context.related_call {
        println!("  related call: {}", related_summary(call));
    }
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
        for (index, call) in step.model_calls.iter().enumerate() {
            println!("    model call {}: {}", index + 1, model_call_summary(call));
        }
    }
    match report.answer_for(request) {
        Some(answer) => println!("  answer: {}", Escaped(&answer.to_wire().to_string())),
        None => println!("  answer: none; every module deferred: the person decides"),
    }
}

/// One line about the related call, escaped.
fn related_summary(call: &RelatedCall) -> String {
    let kind = match call.kind {
        CallKind::ToolCall => "tool-call",
        CallKind::ResourceRead => "resource-read",
        CallKind::PromptGet => "prompt-get",
    };
    let mut text = format!(
        "{kind} {} ({}), session {}",
        Escaped(&call.qualified_name),
        Escaped(&call.name),
        Escaped(&call.session_id)
    );
    if let Some(id) = &call.id {
        text.push_str(&format!(", id {}", Escaped(id)));
    }
    if let Some(arguments) = &call.arguments {
        text.push_str(&format!(
            ", arguments {}",
            Escaped(&clip(&arguments.to_string(), MAX_SHOWN_CHARS))
        ));
    }
    text
}

/// The most characters of a model's answer (or the arguments) a text report
/// shows; the JSON report has all of it.
const MAX_SHOWN_CHARS: usize = 300;

/// One line about a model call, escaped: grant, model, attempts, tokens,
/// latency, and the answer or the error. Never the prompt.
fn model_call_summary(call: &ModelCallRecord) -> String {
    let tokens = |count: Option<u32>| count.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let model = if call.model.is_empty() {
        String::new()
    } else {
        format!(" ({})", Escaped(&call.model))
    };
    let outcome = match (&call.answer, &call.error) {
        (Some(answer), _) => format!(
            "answer {}",
            Escaped(&clip(answer, MAX_SHOWN_CHARS).replace('\n', " "))
        ),
        (None, Some(error)) => format!("error {}", Escaped(error)),
        (None, None) => "no answer".to_owned(),
    };
    format!(
        "grant {}{model}, {} attempt{}, tokens {} in / {} out, {:.3} ms: {outcome}",
        Escaped(&call.grant),
        call.attempts,
        if call.attempts == 1 { "" } else { "s" },
        tokens(call.input_tokens),
        tokens(call.output_tokens),
        call.latency_us as f64 / 1000.0,
    )
}

/// At most `max` characters of `text`, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut clipped: String = text.chars().take(max).collect();
        clipped.push('…');
        clipped
    }
}

/// The steps as JSON, without the prompt text a grant with `audit_prompts`
/// recorded: the report shows the model calls, never the prompt.
fn steps_json(report: &ChainReport) -> Value {
    let mut steps = serde_json::to_value(&report.steps).unwrap_or(Value::Null);
    if let Some(steps) = steps.as_array_mut() {
        for step in steps {
            if let Some(calls) = step.get_mut("model_calls").and_then(Value::as_array_mut) {
                for call in calls.iter_mut().filter_map(Value::as_object_mut) {
                    call.remove("prompt");
                }
            }
        }
    }
    steps
}

fn json_report(path: &Path, request: &ReviewRequest, report: &ChainReport) -> Value {
    let verdict = match &report.verdict {
        Verdict::Decided { step, .. } => json!({"kind": "decided", "step": step}),
        Verdict::Failed { step, failure } => {
            json!({"kind": "failed", "step": step, "code": failure.code(), "detail": failure.to_string()})
        }
        Verdict::Deferred => json!({"kind": "deferred"}),
    };
    let mut value = json!({
        "request": path.display().to_string(),
        "steps": steps_json(report),
        "verdict": verdict,
        "answer": report.answer_for(request).map(|answer| answer.to_wire()),
    });
    if let Some(call) = &request.context().related_call {
        value["related_call"] = json!(call);
    }
    value
}
