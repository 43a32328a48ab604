//! `gatehouse review`: route captured `elicitation/create` requests as
//! `gatehouse serve` would under the same settings, run the chain where serve
//! runs it, and print each decision and the MCP answer, as on the wire.
//!
//! The routing is the router's own ([`Effective::route_offline`]): what a
//! setting answers without the chain, strict review under the strict
//! reviewer with only a canonical answer passing, the person. What only a
//! running gateway knows (the agent's calls in flight, bounds on model spend
//! and on elicitations in flight, whether the person can be asked) is not
//! applied, and the output says so. `--chain-only` runs the chain alone
//! under the context given, as a module sees it, without serve's routing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::ValueEnum;
use gatehouse_audit::DecidedBy;
use gatehouse_base::escape::Escaped;
use gatehouse_conformance::model::ModelScript;
use gatehouse_core::answer::ElicitAnswer;
use gatehouse_core::chain::{Chain, ChainReport, Verdict};
use gatehouse_core::config::ModuleConfig;
use gatehouse_core::context::{
    ApprovalPolicy, ApprovalsReviewer, CallKind, GranularPolicy, RelatedCall, ReviewContext,
    ToolCatalog,
};
use gatehouse_core::contract::World;
use gatehouse_core::elicitation::{ElicitationParams, RequestId};
use gatehouse_core::model::{ModelCallRecord, ModelGrant};
use gatehouse_core::request::ReviewRequest;
use gatehouse_core::sandbox::{ModuleReport, Sandbox};
use gatehouse_gateway::config::Config;
use gatehouse_gateway::router::{Effective, Unhandled};
use serde_json::{Value, json};

use super::Format;

/// Exit code when every request was decided.
const DECIDED: u8 = 0;
/// Exit code when some request was deferred to the person (and none failed).
const DEFERRED: u8 = 3;
/// Exit code when some review failed (the answer is the fail-closed decline).
const FAILED: u8 = 4;

/// What a routed review does not apply, said in every report.
const NOT_APPLIED_OFFLINE: &str = "not applied offline: the match of a tool-call approval against the agent's calls in flight (--related-call gives the one call in flight), the bounds on model spend and on elicitations in flight, and whether the person can be asked";

/// Review elicitation requests with a chain of modules, routed as `gatehouse
/// serve` routes them.
///
/// Each --request file holds the `params` of an `elicitation/create` request
/// exactly as on the wire (with `_meta`), or the whole JSON-RPC message.
/// The routing settings are --config's `[elicitations]` (for --server, with
/// its `[elicitations.servers.NAME]` overrides), then the context file's and
/// the flags'. A request a setting answers, or that serve puts to the person,
/// is not shown to the chain; a strict request is reviewed under the strict
/// reviewer and only a canonical answer passes.
/// Exit code: 0 every request decided, 3 some left to the person,
/// 4 some review failed or strict review got no canonical answer (answered
/// with the fail-closed decline), 1 bad input.
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
    /// override it. Its approval_policy, approvals_reviewer and
    /// auto_approve_prompts override --config's `[elicitations]`, as the
    /// flags of those names do.
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
    #[command(flatten)]
    compile_cache: super::authoring_cache::AuthoringCacheArgs,
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
    /// The approval policy (over --config's for the server).
    #[arg(long, value_enum)]
    approval_policy: Option<PolicyArg>,
    /// Who answers approvals: `[elicitations] approvals_reviewer`, which a
    /// server's own override (--server-reviewer, or --config's
    /// `[elicitations.servers.NAME]`) beats and strict review ignores.
    #[arg(long, value_enum)]
    reviewer: Option<ReviewerArg>,
    /// The server's own `approvals_reviewer`
    /// (`[elicitations.servers.NAME]`): `user` declines its strict requests
    /// unreviewed.
    #[arg(long, value_enum)]
    server_reviewer: Option<ReviewerArg>,
    /// The server's permission profile auto-approves prompts.
    #[arg(long)]
    auto_approve_prompts: bool,
    /// Run the chain alone on every request, under the settings given, as a
    /// module sees it: without serve's routing (no answer by a setting, no
    /// strict filter), to replay a module's own logic. The report says that
    /// serve may answer otherwise.
    #[arg(long)]
    chain_only: bool,
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
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let built = build_chain(&args, &config)?;
    let catalog = match &args.tools {
        Some(path) => Some(
            ToolCatalog::from_wire(&read_json(path)?)
                .with_context(|| format!("{}: not a tools/list result", path.display()))?,
        ),
        None => None,
    };
    let (base_context, context_keys) = base_context(&args)?;
    let settings = settings(&args, &config, &base_context, &context_keys);
    let on_unhandled = config.elicitations.on_unhandled;
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
        // The request the chain is shown under `under`, as the router
        // builds it: the context with the settings it runs under.
        let request_under = |under: &Effective| {
            let mut context = context.clone();
            context.approval_policy = under.approval_policy;
            context.approvals_reviewer = under.approvals_reviewer;
            context.auto_approve_prompts = under.auto_approve_prompts;
            ReviewRequest::new(params.clone(), context)
        };
        // A script starts over for every request: fresh scripted models.
        let review = |request: &ReviewRequest| match &built.script {
            Some(script) => refreshed(&built.chain, script).review(request),
            None => built.chain.review(request),
        };
        let served = if args.chain_only {
            let request = request_under(&settings);
            Served::chain_alone(review(&request), &request)
        } else {
            let routed = settings.route_offline(&params, |under| review(&request_under(under)));
            Served {
                report: routed.report,
                strict: routed.strict,
                answer: routed.answer,
                by: routed.by,
                reason: routed.reason,
                routed: true,
            }
        };
        code = code.max(served.exit_code());
        let under = if served.strict {
            settings.for_strict_review()
        } else {
            settings
        };
        let request = request_under(&under);
        match args.format {
            Format::Text => print_text(path, &request, &served, on_unhandled),
            Format::Json => println!(
                "{}",
                gatehouse_base::escape::to_json_string(&json_report(
                    path, &request, &served, &under
                ))?
            ),
        }
    }
    drop(built);
    Ok(ExitCode::from(code))
}

/// What one request comes to: serve's routing and the chain's part in it
/// (`Effective::route_offline`), or, with `--chain-only`, the chain's alone.
struct Served {
    /// The chain's report; `None` when serve answers or asks the person
    /// without running it.
    report: Option<ChainReport>,
    /// The chain ran as strict review.
    strict: bool,
    /// The answer; `None` when the person decides.
    answer: Option<ElicitAnswer>,
    /// Who decides, as serve's audit line says it.
    by: DecidedBy,
    /// Why, as serve's audit line says it.
    reason: String,
    /// Serve's routing was applied (not `--chain-only`).
    routed: bool,
}

impl Served {
    /// The chain's report alone, answered as a host that puts every request
    /// to its modules answers it (`ChainReport::answer_for`).
    fn chain_alone(report: ChainReport, request: &ReviewRequest) -> Served {
        let (by, reason) = match &report.verdict {
            Verdict::Decided { .. } => (DecidedBy::Guest, "decided by the chain"),
            Verdict::Failed { .. } => (DecidedBy::Failure, "a module failed; failed closed"),
            Verdict::Deferred => (DecidedBy::Person, "every module deferred"),
        };
        Served {
            answer: report.answer_for(request),
            report: Some(report),
            strict: false,
            by,
            reason: reason.to_owned(),
            routed: false,
        }
    }

    /// 3 when the person decides, 4 when the answer is a fail-closed
    /// decline, else 0.
    fn exit_code(&self) -> u8 {
        match (&self.answer, self.by) {
            (None, _) => DEFERRED,
            (Some(_), DecidedBy::Failure) => FAILED,
            (Some(_), _) => DECIDED,
        }
    }
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

fn build_chain(args: &ReviewArgs, config: &Config) -> anyhow::Result<BuiltChain> {
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
    let models = models(args, config)?;
    let module_limits = args.limits.to_module_limits();
    // The author's compile cache, as `inspect` and `conformance` use it: a
    // build they compiled is not compiled again here.
    let sandbox = args
        .compile_cache
        .apply(
            Sandbox::builder().limits(
                config
                    .review
                    .to_limits()
                    .to_builder()
                    .room_for(&module_limits)
                    .build(),
            ),
        )
        .build()?;
    let mut links = Vec::with_capacity(config.review.modules.len() + args.modules.len());
    let mut components = gatehouse_gateway::component::Components::new(config);
    for (index, spec) in config.review.modules.iter().enumerate() {
        // Shadow modules never decide; `gatehouse serve` records them.
        if spec.mode == gatehouse_core::config::ModuleMode::Shadow {
            continue;
        }
        let component = components.get(index, spec)?;
        let name = spec.name.clone().unwrap_or(component.default_name);
        let module = sandbox
            .load_bytes_with(
                &name,
                &component.source,
                &component.bytes,
                component.sha256.as_deref(),
                &spec.module_limits(),
            )
            .with_context(|| format!("review.modules[{index}]"))?;
        let module = match component.locked.and_then(|locked| locked.signer) {
            Some(signer) => module.signed_by(signer),
            None => module,
        };
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
            config: config_value,
            model: models
                .chosen
                .clone()
                .filter(|_| module.world() == World::ModelReviewer),
            ..ModuleConfig::file(path)
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
    models.grants = gatehouse_models::build_models(&configured, runtime.handle().clone())?;
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

/// The context every request starts from (the context file, then the
/// flags), and the keys the context file sets.
fn base_context(args: &ReviewArgs) -> anyhow::Result<(ReviewContext, Vec<String>)> {
    let (mut context, keys) = match &args.context {
        Some(path) => {
            let value = read_json(path)?;
            let keys = value
                .as_object()
                .map(|object| object.keys().cloned().collect())
                .unwrap_or_default();
            let context = serde_json::from_value::<ReviewContext>(value)
                .with_context(|| format!("{}: not a valid review context", path.display()))?;
            (context, keys)
        }
        None => (ReviewContext::default(), Vec::new()),
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
    if let Some(text) = &args.related_call {
        context = context.with_related_call(related_call(text)?);
    }
    Ok((context, keys))
}

/// The routing settings for the context's server, as serve would have them:
/// --config's `[elicitations]` with that server's overrides
/// (`ElicitationSettings::for_server`), then what the context file sets
/// (`context_keys`), then the flags. An `approvals_reviewer` of the context
/// file or `--reviewer` is the global setting, which the server's own
/// override (`--server-reviewer` or the config's) beats.
fn settings(
    args: &ReviewArgs,
    config: &Config,
    context: &ReviewContext,
    context_keys: &[String],
) -> Effective {
    let mut settings = config.elicitations.for_server(&context.server_name);
    let set = |key: &str| context_keys.iter().any(|set| set == key);
    if set("approval_policy") {
        settings.approval_policy = context.approval_policy;
    }
    if set("auto_approve_prompts") {
        settings.auto_approve_prompts = context.auto_approve_prompts;
    }
    let mut global_reviewer = set("approvals_reviewer").then_some(context.approvals_reviewer);
    if let Some(policy) = args.approval_policy {
        settings.approval_policy = match policy {
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
    if args.auto_approve_prompts {
        settings.auto_approve_prompts = true;
    }
    if let Some(reviewer) = args.reviewer {
        global_reviewer = Some(reviewer.into());
    }
    if let Some(reviewer) = global_reviewer
        && settings.server_reviewer.is_none()
    {
        settings.approvals_reviewer = reviewer;
    }
    if let Some(reviewer) = args.server_reviewer {
        settings.server_reviewer = Some(reviewer.into());
        settings.approvals_reviewer = reviewer.into();
    }
    settings
}

impl From<ReviewerArg> for ApprovalsReviewer {
    fn from(reviewer: ReviewerArg) -> Self {
        match reviewer {
            ReviewerArg::User => ApprovalsReviewer::User,
            ReviewerArg::AutoReview => ApprovalsReviewer::AutoReview,
        }
    }
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
fn print_text(path: &Path, request: &ReviewRequest, served: &Served, on_unhandled: Unhandled) {
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
    println!(
        "  settings: approval_policy {}, approvals_reviewer {}, auto_approve_prompts {}",
        setting_text(json!(context.approval_policy)),
        setting_text(json!(context.approvals_reviewer)),
        context.auto_approve_prompts
    );
    if served.routed {
        println!("  routing: as gatehouse serve; {NOT_APPLIED_OFFLINE}");
    } else {
        println!(
            "  routing: not applied (--chain-only): the chain alone; gatehouse serve may answer otherwise"
        );
    }
    match &served.report {
        None if served.answer.is_some() => {
            println!("  chain: not run; gatehouse serve answers by its settings alone")
        }
        None => println!("  chain: not run; gatehouse serve puts this to the person"),
        Some(report) => {
            if served.strict {
                println!(
                    "  strict review: only a canonical automated answer passes, else the strict decline"
                );
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
        }
    }
    println!(
        "  decided by: {} ({})",
        decided_by_name(served.by),
        Escaped(&served.reason)
    );
    match &served.answer {
        Some(answer) => println!("  answer: {}", Escaped(&answer.to_wire().to_string())),
        None => println!(
            "  answer: none; the person decides (gatehouse serve asks the upstream client whose call made the server ask; without one that can be asked, on_unhandled = {} answers)",
            unhandled_name(on_unhandled)
        ),
    }
}

/// A setting as the config spells it: a string bare, anything else as JSON.
fn setting_text(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// `decided_by` as the audit line spells it.
fn decided_by_name(by: DecidedBy) -> String {
    setting_text(json!(by))
}

/// `on_unhandled` as the config spells it.
fn unhandled_name(on_unhandled: Unhandled) -> &'static str {
    match on_unhandled {
        Unhandled::Decline => "decline",
        Unhandled::Cancel => "cancel",
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

/// One JSON document per request: the routing, the settings the chain ran
/// (or would have run) under, the steps, who decided and why (as serve's
/// audit line says it), and the answer (`null` when the person decides).
fn json_report(path: &Path, request: &ReviewRequest, served: &Served, under: &Effective) -> Value {
    let verdict = served.report.as_ref().map(|report| match &report.verdict {
        Verdict::Decided { step, .. } => json!({"kind": "decided", "step": step}),
        Verdict::Failed { step, failure } => {
            json!({"kind": "failed", "step": step, "code": failure.code(), "detail": failure.to_string()})
        }
        Verdict::Deferred => json!({"kind": "deferred"}),
    });
    let routing = if served.routed {
        json!({"applied": true, "strict_review": served.strict, "chain_ran": served.report.is_some(),
               "not_applied": NOT_APPLIED_OFFLINE})
    } else {
        json!({"applied": false, "note": "--chain-only: the chain alone; gatehouse serve may answer otherwise"})
    };
    let mut value = json!({
        "request": path.display().to_string(),
        "routing": routing,
        "settings": {
            "approval_policy": under.approval_policy,
            "approvals_reviewer": under.approvals_reviewer,
            "server_reviewer": under.server_reviewer,
            "auto_approve_prompts": under.auto_approve_prompts,
            "auto_deny": under.auto_deny,
        },
        "steps": served.report.as_ref().map_or_else(|| json!([]), steps_json),
        "verdict": verdict,
        "decided_by": served.by,
        "reason": served.reason,
        "answer": served.answer.as_ref().map(ElicitAnswer::to_wire),
    });
    if let Some(call) = &request.context().related_call {
        value["related_call"] = json!(call);
    }
    value
}
