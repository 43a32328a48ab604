//! `[models.NAME]`: language models reviewer modules may ask, reached over
//! the OpenAI-compatible `POST {endpoint}/chat/completions` API (OpenAI,
//! Ollama, vLLM, llama.cpp's server, LM Studio, Azure OpenAI's v1 API, ...).
//!
//! ```toml
//! [models.review]
//! endpoint = "https://api.openai.com/v1"   # the base URL; requests go to {endpoint}/chat/completions
//! model = "gpt-4o-mini"
//! api_key_env_var = "OPENAI_API_KEY"       # optional: the NAME of the variable holding the key
//! timeout_sec = 90                         # the budget of one review's model calls together
//! max_attempts = 3                         # HTTP requests per call, retries included (1..=10)
//! max_output_tokens = 800                  # optional cap on what a module may ask for
//! temperature = 0                          # optional, 0..=2
//! audit_prompts = false                    # whether the audit line keeps the prompt text
//! json_schema = true                       # send the module's output schema as a response_format
//! ```
//!
//! [`build_models`] turns the tables into one [`ModelGrant`] each, backed by
//! an [`OpenAiModel`]: the core's [`Model`] over HTTP.
//!
//! # Time and failure
//!
//! [`Model::complete`] runs on the review's blocking thread and drives its
//! HTTP requests on the tokio runtime whose [`Handle`] the model was built
//! with. Every attempt races the call's deadline ([`ModelError::Timeout`])
//! and the review's [`Cancel`] ([`ModelError::Cancelled`]); either drops the
//! request in flight, which closes its connection. Between attempts the
//! model waits an exponential backoff with jitter (250 ms, 500 ms, 1 s, ...
//! up to 8 s, each between half and all of that), or the provider's
//! `Retry-After` when a 429 names a longer wait; a wait that would end at or
//! past the deadline is not started: the call fails at once with the last
//! attempt's error rather than sleeping into a [`ModelError::Timeout`].
//!
//! What is retried, up to `max_attempts` requests in all:
//! - transport failures: no connection, a reset or closed connection, an
//!   answer cut short ([`ModelError::Transient`] when they persist);
//! - HTTP 408 and 5xx ([`ModelError::Transient`]);
//! - HTTP 429 ([`ModelError::RateLimited`]);
//! - output that cannot be used: a body that is not JSON or over 1 MiB, no
//!   `choices`, no `content`, or, when the request has an output schema, a
//!   content with no JSON object in it (neither the whole text nor the span
//!   from its first `{` to its last `}` parses as one). When every attempt
//!   gave such output the call fails as [`ModelError::Transient`], quoting
//!   the start of the last answer.
//!
//! What is not retried: any other 4xx ([`ModelError::Rejected`], with the
//! provider's message, truncated to 500 bytes), a redirect (3xx: the
//! endpoint is configured wrong; redirects are never followed, so neither
//! the key nor the prompt goes anywhere else), a refusal (`message.refusal`,
//! [`ModelError::Rejected`]), an output schema that is not JSON
//! ([`ModelError::Rejected`], no request sent), and an answer the provider's
//! content filter stopped (`finish_reason: content_filter`), which is
//! returned as a [`Completion`] for the module to judge.
//!
//! # The key
//!
//! `api_key_env_var` names the variable; its value is read when the model is
//! built ([`build_models`], [`OpenAiModel::new`]) and sent as
//! `Authorization: Bearer KEY` (a header marked sensitive). It is never
//! logged, and it is cut out of any provider message before that message
//! reaches an error or a log. Text from the provider goes through
//! [`gatehouse_core::escape`] before it is put in an error or logged.
//!
//! Plain `http` is allowed to a loopback host (`localhost`, 127.0.0.0/8,
//! `::1`: a local Ollama or llama.cpp). To any other host it is refused when
//! `api_key_env_var` is set (the key would cross the network in clear: use
//! https, or reach the endpoint through a loopback tunnel), and allowed
//! with a warning in the log otherwise (the prompts still cross in clear).
//!
//! # Proxies and TLS
//!
//! https uses rustls with the platform's trust store (reqwest's `rustls`
//! feature). An endpoint on a loopback host is always reached directly;
//! any other goes through the proxy the environment names (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, as curl reads them), since a
//! hosted API is often only reachable that way. The connection attempt is
//! bounded by 10 s (and by the deadline).

use std::collections::BTreeMap;
use std::error::Error as _;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_core::escape::escape;
use gatehouse_core::model::{
    Cancel, Completion, CompletionRequest, FinishReason, Model, ModelError, ModelGrant, ModelReply,
};
use reqwest::Url;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION, RETRY_AFTER,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::runtime::Handle;

/// The default `timeout_sec`: [`gatehouse_core::model::DEFAULT_MODEL_TIMEOUT`].
pub const DEFAULT_TIMEOUT_SEC: f64 = 90.0;
/// The default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The most `max_attempts` may be.
pub const MAX_ATTEMPTS_LIMIT: u32 = 10;
/// The longest `timeout_sec` may be (a day).
pub const MAX_TIMEOUT_SEC: f64 = 86_400.0;
/// The largest answer body read; a larger one is unusable output.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The most of a provider's error message kept in an error, in bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 500;
/// The first backoff between attempts (before jitter); it doubles after
/// every attempt.
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// The longest backoff between attempts (before jitter).
pub const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// How long establishing a connection (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The `name` of the `json_schema` response format sent with an output
/// schema.
pub const RESPONSE_FORMAT_NAME: &str = "answer";

/// The most of an error body read (its message is truncated far below).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// The most of an unusable answer quoted in the error.
const MAX_QUOTED_ANSWER_BYTES: usize = 200;
/// The longest `Retry-After` taken as a number (a longer one cannot fit a
/// review's budget anyway).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// One `[models.NAME]` table as written; [`ModelConfig::check`] says whether
/// it is usable. Every field has a default, so a missing `endpoint` or
/// `model` is reported by `check` naming the table, like any other mistake.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// The OpenAI-compatible base URL (`https://api.openai.com/v1`,
    /// `http://localhost:11434/v1`, an Azure v1 base URL, ...); requests go
    /// to `{endpoint}/chat/completions`, with any query string kept.
    pub endpoint: String,
    /// The model as the endpoint names it (`gpt-4o-mini`, `llama3.2`, ...).
    pub model: String,
    /// The name of the environment variable holding the API key, read when
    /// the model is built; unset here: no `Authorization` header.
    pub api_key_env_var: Option<String>,
    /// Seconds one review's model calls may take together (default 90;
    /// fractions allowed).
    pub timeout_sec: f64,
    /// HTTP requests one call may make, retries included (default 3,
    /// 1..=10).
    pub max_attempts: u32,
    /// The most output tokens a module may ask for; the request's own limit
    /// is lowered to it. Unset: the module's limit, or none.
    pub max_output_tokens: Option<u32>,
    /// The sampling temperature, 0..=2; unset: the endpoint's default.
    pub temperature: Option<f64>,
    /// Whether the audit line keeps the prompt text (default false).
    pub audit_prompts: bool,
    /// Whether to send a request's output schema as
    /// `response_format: {type: "json_schema", ...}` (default true); false
    /// for endpoints that refuse it.
    pub json_schema: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            endpoint: String::new(),
            model: String::new(),
            api_key_env_var: None,
            timeout_sec: DEFAULT_TIMEOUT_SEC,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_output_tokens: None,
            temperature: None,
            audit_prompts: false,
            json_schema: true,
        }
    }
}

/// Why a `[models.NAME]` table cannot be used. Each names the table and the
/// field; none carries the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelConfigError {
    /// The table's name has characters outside `[a-zA-Z0-9_-]`, or is empty.
    #[error("[models.{0}]: model names may use only letters, digits, `_` and `-`")]
    BadName(String),
    /// A field is missing or has a bad value.
    #[error("[models.{model}] {field}: {problem}")]
    BadValue {
        /// The table's name.
        model: String,
        /// The field.
        field: &'static str,
        /// What is wrong and what to write instead.
        problem: String,
    },
    /// `api_key_env_var` names a variable that is not set.
    #[error(
        "[models.{model}] api_key_env_var: names {variable}, which is not set; set {variable} to the endpoint's API key, or remove api_key_env_var for an endpoint that needs none"
    )]
    KeyNotSet {
        /// The table's name.
        model: String,
        /// The variable.
        variable: String,
    },
    /// The variable is set, but its value cannot be sent as a key.
    #[error(
        "[models.{model}] api_key_env_var: the value of {variable} cannot be the key: {problem}"
    )]
    BadKey {
        /// The table's name.
        model: String,
        /// The variable.
        variable: String,
        /// What is wrong (never the value).
        problem: &'static str,
    },
    /// The HTTP client could not be made.
    #[error("[models.{model}]: cannot make the HTTP client: {message}")]
    Client {
        /// The table's name.
        model: String,
        /// Why.
        message: String,
    },
}

/// Whether `name` is a valid `[models.NAME]` name: letters, digits, `_`, `-`.
pub fn is_valid_model_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

impl ModelConfig {
    /// A config of `endpoint` and `model` with every other field at its
    /// default.
    pub fn new(endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        ModelConfig {
            endpoint: endpoint.into(),
            model: model.into(),
            ..ModelConfig::default()
        }
    }

    /// Checks the table `[models.NAME]` without looking at the environment
    /// (the key's variable is read by [`OpenAiModel::new`]).
    pub fn check(&self, name: &str) -> Result<(), ModelConfigError> {
        self.completions_url(name).map(drop)
    }

    /// The wall-clock budget of one review's model calls (`timeout_sec`);
    /// meaningful once [`check`](Self::check) passed.
    pub fn timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.timeout_sec)
            .unwrap_or(gatehouse_core::model::DEFAULT_MODEL_TIMEOUT)
    }

    /// Checks every field and returns `{endpoint}/chat/completions`.
    fn completions_url(&self, name: &str) -> Result<Url, ModelConfigError> {
        if !is_valid_model_name(name) {
            return Err(ModelConfigError::BadName(name.to_owned()));
        }
        let bad = |field: &'static str, problem: String| ModelConfigError::BadValue {
            model: name.to_owned(),
            field,
            problem,
        };
        if self.model.trim().is_empty() {
            return Err(bad(
                "model",
                "missing; write the model's name as the endpoint knows it, e.g. model = \"gpt-4o-mini\" or \"llama3.2\"".to_owned(),
            ));
        }
        if let Some(variable) = &self.api_key_env_var
            && (variable.is_empty() || variable.contains(['=', '\0']))
        {
            return Err(bad(
                "api_key_env_var",
                format!(
                    "{variable:?} is not an environment variable name; write the NAME of the variable that holds the key, e.g. \"OPENAI_API_KEY\""
                ),
            ));
        }
        if !self.timeout_sec.is_finite()
            || self.timeout_sec <= 0.0
            || self.timeout_sec > MAX_TIMEOUT_SEC
        {
            return Err(bad(
                "timeout_sec",
                format!(
                    "{} is not a number of seconds above 0 and at most {MAX_TIMEOUT_SEC} (the default is {DEFAULT_TIMEOUT_SEC})",
                    self.timeout_sec
                ),
            ));
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&self.max_attempts) {
            return Err(bad(
                "max_attempts",
                format!(
                    "{} is out of range: it counts HTTP requests, retries included, from 1 (no retry) to {MAX_ATTEMPTS_LIMIT} (the default is {DEFAULT_MAX_ATTEMPTS})",
                    self.max_attempts
                ),
            ));
        }
        if self.max_output_tokens == Some(0) {
            return Err(bad(
                "max_output_tokens",
                "must be at least 1; leave it out for no cap".to_owned(),
            ));
        }
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(bad(
                "temperature",
                format!(
                    "{temperature} is out of range: write a number from 0 to 2, or leave it out for the endpoint's default"
                ),
            ));
        }
        let endpoint = self.endpoint.trim();
        if endpoint.is_empty() {
            return Err(bad(
                "endpoint",
                "missing; write the OpenAI-compatible base URL, e.g. \"https://api.openai.com/v1\" or \"http://localhost:11434/v1\" (Ollama)".to_owned(),
            ));
        }
        let url = Url::parse(endpoint).map_err(|error| {
            bad(
                "endpoint",
                format!(
                    "{:?} is not a URL ({error}); write the base URL, e.g. \"https://api.openai.com/v1\"",
                    escape(endpoint)
                ),
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad(
                "endpoint",
                format!(
                    "the scheme {:?} is not supported: write an http or https URL, e.g. \"https://api.openai.com/v1\"",
                    escape(url.scheme())
                ),
            ));
        }
        if url.host().is_none() {
            return Err(bad("endpoint", "has no host".to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "endpoint",
                "must not carry credentials (user:password@); put the key in the variable api_key_env_var names".to_owned(),
            ));
        }
        if url.fragment().is_some() {
            return Err(bad(
                "endpoint",
                "must not have a fragment (#...)".to_owned(),
            ));
        }
        let path = url.path().trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            return Err(bad(
                "endpoint",
                format!(
                    "is the base URL, without /chat/completions (it is added): write \"{}\"",
                    escape(&{
                        let mut base = url.clone();
                        base.set_path(path.trim_end_matches("/chat/completions"));
                        base.to_string()
                    })
                ),
            ));
        }
        if url.scheme() == "http" && !is_loopback_url(&url) && self.api_key_env_var.is_some() {
            return Err(bad(
                "endpoint",
                "is plain http to a host that is not loopback, and api_key_env_var is set: the key would cross the network in clear; use https, or reach the endpoint through a loopback address (an SSH tunnel, a local proxy)".to_owned(),
            ));
        }
        let mut completions = url.clone();
        completions.set_path(&format!("{path}/chat/completions"));
        Ok(completions)
    }
}

/// Whether `url`'s host is loopback: `localhost`, 127.0.0.0/8 or `::1`
/// (also IPv4-mapped), as [`crate::gateway::http::is_loopback`] decides.
fn is_loopback_url(url: &Url) -> bool {
    url.host_str()
        .is_some_and(crate::gateway::http::is_loopback)
}

/// One [`ModelGrant`] per `[models.NAME]`, each an [`OpenAiModel`] with the
/// table's timeout and `audit_prompts`. Reads each table's key variable now.
/// `handle` is the runtime the requests run on: a multi-thread runtime's
/// (the models are asked from blocking threads, which do not drive a
/// current-thread runtime).
pub fn build_models(
    configs: &BTreeMap<String, ModelConfig>,
    handle: Handle,
) -> Result<BTreeMap<String, ModelGrant>, ModelConfigError> {
    configs
        .iter()
        .map(|(name, config)| {
            let model = OpenAiModel::new(name, config, handle.clone())?;
            let grant = ModelGrant::new(name.as_str(), Arc::new(model))
                .with_timeout(config.timeout())
                .with_audit_prompts(config.audit_prompts);
            Ok((name.clone(), grant))
        })
        .collect()
}

/// The key, kept out of `Debug` and marked sensitive in the header.
#[derive(Clone)]
struct ApiKey {
    secret: String,
    header: HeaderValue,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// A model behind an OpenAI-compatible `/chat/completions` endpoint: the
/// core's [`Model`] over HTTP (see the [module docs](self) for what is
/// retried and how errors are classified).
///
/// [`Model::complete`] blocks on the runtime handle it was built with, so
/// it must be called from a blocking thread (`spawn_blocking`, a thread of
/// its own), never from async code.
pub struct OpenAiModel {
    name: String,
    config: ModelConfig,
    url: Url,
    key: Option<ApiKey>,
    client: reqwest::Client,
    handle: Handle,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("model", &self.config.model)
            .field("key", &self.key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// The model of table `[models.NAME]`, its key read from the variable
    /// `api_key_env_var` names (an unset variable is an error naming both).
    pub fn new(name: &str, config: &ModelConfig, handle: Handle) -> Result<Self, ModelConfigError> {
        let key = match &config.api_key_env_var {
            None => None,
            Some(variable) => match std::env::var(variable) {
                Ok(value) => Some(value),
                Err(std::env::VarError::NotPresent) => {
                    return Err(ModelConfigError::KeyNotSet {
                        model: name.to_owned(),
                        variable: variable.clone(),
                    });
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(ModelConfigError::BadKey {
                        model: name.to_owned(),
                        variable: variable.clone(),
                        problem: "it is not valid UTF-8",
                    });
                }
            },
        };
        Self::with_key(name, config, key, handle)
    }

    /// The model of table `[models.NAME]` with the key given here (for
    /// embedders that keep keys elsewhere); `api_key_env_var` is not read.
    pub fn with_key(
        name: &str,
        config: &ModelConfig,
        key: Option<String>,
        handle: Handle,
    ) -> Result<Self, ModelConfigError> {
        let url = config.completions_url(name)?;
        let key = key
            .map(|value| {
                let secret = value.trim().to_owned();
                let problem = if secret.is_empty() {
                    Some("it is empty")
                } else if !secret.bytes().all(|byte| byte.is_ascii_graphic()) {
                    Some("it must be printable ASCII without spaces")
                } else {
                    None
                };
                let bad = |problem| ModelConfigError::BadKey {
                    model: name.to_owned(),
                    variable: config.api_key_env_var.clone().unwrap_or_default(),
                    problem,
                };
                if let Some(problem) = problem {
                    return Err(bad(problem));
                }
                let mut header = HeaderValue::from_str(&format!("Bearer {secret}"))
                    .map_err(|_| bad("it must be printable ASCII without spaces"))?;
                header.set_sensitive(true);
                Ok(ApiKey { secret, header })
            })
            .transpose()?;
        let loopback = is_loopback_url(&url);
        if url.scheme() == "http" && !loopback {
            tracing::warn!(
                model = name,
                endpoint = %escape(url.as_str()),
                "[models.{name}] sends prompts over plain http to a host that is not loopback; use https"
            );
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")));
        if loopback {
            builder = builder.no_proxy();
        }
        let client = {
            let _entered = handle.enter();
            builder.build()
        }
        .map_err(|error| ModelConfigError::Client {
            model: name.to_owned(),
            message: describe(&error.without_url()),
        })?;
        Ok(OpenAiModel {
            name: name.to_owned(),
            config: config.clone(),
            url,
            key,
            client,
            handle,
        })
    }

    /// The table's name (`[models.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table as configured.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The URL requests are sent to: `{endpoint}/chat/completions`.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The attempts of one call, until one answers, one fails for good, the
    /// attempts run out, the deadline passes or `cancel` fires.
    async fn run(
        &self,
        body: Vec<u8>,
        wants_json: bool,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        let sleep_deadline = tokio::time::Instant::from_std(deadline);
        let max_attempts = self.config.max_attempts.max(1);
        let mut attempts = 0;
        loop {
            if cancel.is_cancelled() {
                return ModelReply::failed(ModelError::Cancelled, attempts);
            }
            if Instant::now() >= deadline {
                return ModelReply::failed(ModelError::Timeout, attempts);
            }
            attempts += 1;
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return ModelReply::failed(ModelError::Cancelled, attempts),
                () = tokio::time::sleep_until(sleep_deadline) => return ModelReply::failed(ModelError::Timeout, attempts),
                outcome = self.attempt(body.clone(), wants_json) => outcome,
            };
            let (error, retry_after) = match outcome {
                Attempt::Answered(completion) => {
                    return ModelReply {
                        result: Ok(completion),
                        attempts,
                    };
                }
                Attempt::Failed(error) => {
                    tracing::warn!(
                        model = %self.name,
                        attempt = attempts,
                        error = %error,
                        "[models.{}] failed; not retried", self.name
                    );
                    return ModelReply::failed(error, attempts);
                }
                Attempt::Retry { error, retry_after } => (error, retry_after),
            };
            if attempts >= max_attempts {
                tracing::warn!(
                    model = %self.name,
                    attempt = attempts,
                    error = %error,
                    "[models.{}] failed; no attempt left", self.name
                );
                return ModelReply::failed(error, attempts);
            }
            let delay = backoff(attempts, jitter()).max(retry_after.unwrap_or_default());
            if Instant::now() + delay >= deadline {
                tracing::warn!(
                    model = %self.name,
                    attempt = attempts,
                    error = %error,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "[models.{}] failed; the next attempt cannot start before the deadline", self.name
                );
                return ModelReply::failed(error, attempts);
            }
            tracing::warn!(
                model = %self.name,
                attempt = attempts,
                error = %error,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "[models.{}] failed; retrying", self.name
            );
            tokio::select! {
                biased;
                () = cancel.cancelled() => return ModelReply::failed(ModelError::Cancelled, attempts),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One HTTP request and what it came to.
    async fn attempt(&self, body: Vec<u8>, wants_json: bool) -> Attempt {
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body);
        if let Some(key) = &self.key {
            request = request.header(AUTHORIZATION, key.header.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return self.transport_failure(error),
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let limit = if (200..300).contains(&status) {
            MAX_RESPONSE_BYTES
        } else {
            MAX_ERROR_BODY_BYTES
        };
        let (bytes, truncated) = match read_capped(response, limit).await {
            Ok(read) => read,
            Err(error) => return self.transport_failure(error),
        };
        classify(
            status,
            &headers,
            &bytes,
            truncated,
            wants_json,
            self.key.as_ref().map(|key| key.secret.as_str()),
        )
    }

    /// A request that failed below HTTP: retried, unless reqwest could not
    /// even build it.
    fn transport_failure(&self, error: reqwest::Error) -> Attempt {
        let is_builder = error.is_builder();
        let message = redact(
            &describe(&error.without_url()),
            self.key.as_ref().map(|key| key.secret.as_str()),
        );
        if is_builder {
            return Attempt::Failed(ModelError::Rejected(format!(
                "cannot make the request: {message}"
            )));
        }
        Attempt::Retry {
            error: ModelError::Transient(message),
            retry_after: None,
        }
    }
}

impl Model for OpenAiModel {
    fn complete(
        &self,
        request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        let body = match request_body(&self.config, request) {
            Ok(body) => body.to_string().into_bytes(),
            Err(error) => return ModelReply::failed(error, 0),
        };
        self.handle
            .block_on(self.run(body, request.output_schema.is_some(), deadline, cancel))
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
enum Attempt {
    /// An answer.
    Answered(Completion),
    /// A failure another attempt might not have: retry while attempts and
    /// time are left, waiting at least `retry_after`.
    Retry {
        error: ModelError,
        retry_after: Option<Duration>,
    },
    /// A failure another attempt would repeat.
    Failed(ModelError),
}

/// The JSON body of a request: `model`, `messages`, `max_tokens` (the lower
/// of the request's and the config's), `temperature`, and, with an output
/// schema and `json_schema = true`, a `json_schema` response format
/// (`strict: false`: the schema may leave properties optional).
fn request_body(config: &ModelConfig, request: &CompletionRequest) -> Result<Value, ModelError> {
    let mut body = json!({
        "model": config.model,
        "messages": request.messages,
    });
    let max_tokens = match (request.max_output_tokens, config.max_output_tokens) {
        (Some(asked), Some(cap)) => Some(asked.min(cap)),
        (asked, cap) => asked.or(cap),
    };
    if let Some(max_tokens) = max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    if let Some(temperature) = config.temperature {
        body["temperature"] = json!(temperature);
    }
    if config.json_schema
        && let Some(schema) = &request.output_schema
    {
        let schema: Value = serde_json::from_str(schema).map_err(|error| {
            ModelError::Rejected(format!("the output schema is not JSON: {error}"))
        })?;
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {
                "name": RESPONSE_FORMAT_NAME,
                "schema": schema,
                "strict": false,
            },
        });
    }
    Ok(body)
}

/// The backoff before attempt `attempt + 1`: [`BACKOFF_BASE`] doubled per
/// attempt up to [`BACKOFF_MAX`], then between half and all of that by
/// `jitter` (0..1; "equal jitter").
fn backoff(attempt: u32, jitter: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let full = BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_MAX);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    full / 2 + (full / 2).mul_f64(jitter)
}

/// A uniform number in 0..1 for the backoff's jitter.
fn jitter() -> f64 {
    // 53 random bits make an f64 in 0..1 exactly.
    getrandom::u64().map_or(0.5, |bits| (bits >> 11) as f64 / (1u64 << 53) as f64)
}

/// Reads at most `limit` bytes of the body; whether more was left unread.
async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok((bytes, true));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, false))
}

/// What an HTTP answer comes to (see the [module docs](self)).
fn classify(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    truncated: bool,
    wants_json: bool,
    key: Option<&str>,
) -> Attempt {
    match status {
        200..=299 => {
            if truncated {
                return Attempt::Retry {
                    error: ModelError::Transient(format!(
                        "the answer is larger than {MAX_RESPONSE_BYTES} bytes"
                    )),
                    retry_after: None,
                };
            }
            parse_answer(body, wants_json, key)
        }
        300..=399 => {
            let location = headers
                .get(LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(|location| {
                    format!(
                        " to {}",
                        truncate(&escape(location), MAX_ERROR_MESSAGE_BYTES)
                    )
                })
                .unwrap_or_default();
            Attempt::Failed(ModelError::Rejected(format!(
                "HTTP {status}: the endpoint redirects{location}; set endpoint to the base URL it leads to (redirects are not followed)"
            )))
        }
        408 => Attempt::Retry {
            error: ModelError::Transient(status_message(status, body, key)),
            retry_after: None,
        },
        429 => Attempt::Retry {
            error: ModelError::RateLimited(status_message(status, body, key)),
            retry_after: retry_after(headers),
        },
        400..=499 => Attempt::Failed(ModelError::Rejected(status_message(status, body, key))),
        _ => Attempt::Retry {
            error: ModelError::Transient(status_message(status, body, key)),
            retry_after: None,
        },
    }
}

/// `HTTP 400: <the provider's message>`, the message taken from an OpenAI
/// error body (`error.message`) or the body's text, without the key,
/// escaped and truncated.
fn status_message(status: u16, body: &[u8], key: Option<&str>) -> String {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|value| {
            [
                value.pointer("/error/message"),
                value.get("error"),
                value.get("message"),
                value.get("detail"),
            ]
            .into_iter()
            .flatten()
            .find_map(|value| value.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| text.trim().to_owned());
    if message.is_empty() {
        return format!("HTTP {status}");
    }
    format!(
        "HTTP {status}: {}",
        provider_text(&message, MAX_ERROR_MESSAGE_BYTES, key)
    )
}

/// A provider's text made fit for an error and a log: the key cut out,
/// escaped, at most `limit` bytes (and a marker when cut).
fn provider_text(text: &str, limit: usize, key: Option<&str>) -> String {
    let redacted = redact(text, key);
    truncate(&escape(&redacted), limit)
}

/// `text` with every occurrence of the key replaced.
fn redact(text: &str, key: Option<&str>) -> String {
    match key {
        Some(key) if !key.is_empty() && text.contains(key) => text.replace(key, "[redacted]"),
        _ => text.to_owned(),
    }
}

/// At most `limit` bytes of `text`, cut at a character boundary, with `…`
/// when cut.
fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `Retry-After` as a number of seconds (an HTTP date is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// A 2xx body: `choices[0].message.content` and the rest, or why it cannot
/// be used.
fn parse_answer(body: &[u8], wants_json: bool, key: Option<&str>) -> Attempt {
    let unusable = |problem: String| Attempt::Retry {
        error: ModelError::Transient(problem),
        retry_after: None,
    };
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        return unusable(format!(
            "the answer is not JSON: {}",
            provider_text(text.trim(), MAX_QUOTED_ANSWER_BYTES, key)
        ));
    };
    let Some(choice) = value.pointer("/choices/0") else {
        let detail = value
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map(|message| format!(": {}", provider_text(message, MAX_ERROR_MESSAGE_BYTES, key)))
            .unwrap_or_default();
        return unusable(format!("the answer has no choices{detail}"));
    };
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    };
    let message = choice.get("message");
    let content = match message.and_then(|message| message.get("content")) {
        Some(Value::String(text)) => Some(text.clone()),
        // Content parts: the text ones, joined.
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<String>(),
        ),
        _ => None,
    };
    let Some(text) =
        content.filter(|text| !text.is_empty() || finish_reason == FinishReason::ContentFilter)
    else {
        if let Some(refusal) = message
            .and_then(|message| message.get("refusal"))
            .and_then(Value::as_str)
        {
            return Attempt::Failed(ModelError::Rejected(format!(
                "the model refused: {}",
                provider_text(refusal, MAX_ERROR_MESSAGE_BYTES, key)
            )));
        }
        return unusable("the answer has no content".to_owned());
    };
    if wants_json && finish_reason != FinishReason::ContentFilter && !contains_json_object(&text) {
        return unusable(format!(
            "the answer holds no JSON object: {}",
            provider_text(text.trim(), MAX_QUOTED_ANSWER_BYTES, key)
        ));
    }
    let tokens = |field: &str| {
        value
            .pointer(&format!("/usage/{field}"))
            .and_then(Value::as_u64)
            .map(|count| u32::try_from(count).unwrap_or(u32::MAX))
    };
    Attempt::Answered(Completion {
        text,
        model: value
            .get("model")
            .and_then(Value::as_str)
            .filter(|model| !model.is_empty())
            .map(str::to_owned)
            .unwrap_or_default(),
        finish_reason,
        input_tokens: tokens("prompt_tokens"),
        output_tokens: tokens("completion_tokens"),
    })
}

/// Whether `text` is a JSON object, or holds one from its first `{` to its
/// last `}` (how the reviewer parses a model's answer).
fn contains_json_object(text: &str) -> bool {
    let is_object =
        |text: &str| matches!(serde_json::from_str::<Value>(text), Ok(Value::Object(_)));
    if is_object(text.trim()) {
        return true;
    }
    match (text.find('{'), text.rfind('}')) {
        (Some(start), Some(end)) if start < end => is_object(&text[start..=end]),
        _ => false,
    }
}

/// An error and its sources, `: `-joined, each once.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    escape(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_core::model::Message;

    fn config() -> ModelConfig {
        ModelConfig::new("https://api.example.com/v1", "gpt-test")
    }

    fn check(config: &ModelConfig) -> String {
        config.check("review").expect_err("invalid").to_string()
    }

    #[test]
    fn the_body_carries_the_model_messages_and_the_lower_token_limit() {
        let mut request = CompletionRequest::new(vec![
            Message::system("policy"),
            Message::user("is `ls` safe?"),
        ]);
        let body = request_body(&config(), &request).expect("a body");
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "policy"},
                    {"role": "user", "content": "is `ls` safe?"},
                ],
            })
        );
        let mut capped = config();
        capped.max_output_tokens = Some(300);
        capped.temperature = Some(0.0);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            300
        );
        assert_eq!(
            request_body(&capped, &request).expect("a body")["temperature"],
            0.0
        );
        request.max_output_tokens = Some(100);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            100
        );
        request.max_output_tokens = Some(5000);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            300
        );
        assert_eq!(
            request_body(&config(), &request).expect("a body")["max_tokens"],
            5000
        );
    }

    #[test]
    fn an_output_schema_becomes_a_non_strict_json_schema_response_format() {
        let mut request = CompletionRequest::new(vec![Message::user("x")]);
        request.output_schema = Some(r#"{"type":"object","required":["outcome"]}"#.to_owned());
        let body = request_body(&config(), &request).expect("a body");
        assert_eq!(
            body["response_format"],
            json!({
                "type": "json_schema",
                "json_schema": {
                    "name": RESPONSE_FORMAT_NAME,
                    "schema": {"type": "object", "required": ["outcome"]},
                    "strict": false,
                },
            })
        );
        let mut plain = config();
        plain.json_schema = false;
        assert!(
            request_body(&plain, &request)
                .expect("a body")
                .get("response_format")
                .is_none()
        );
        request.output_schema = Some("{not json".to_owned());
        let error = request_body(&config(), &request).expect_err("a bad schema");
        assert!(
            matches!(&error, ModelError::Rejected(message) if message.contains("output schema")),
            "{error}"
        );
    }

    #[test]
    fn backoff_doubles_within_its_jitter_and_stops_at_the_cap() {
        for (attempt, full) in [
            (1, 250),
            (2, 500),
            (3, 1000),
            (4, 2000),
            (5, 4000),
            (6, 8000),
            (7, 8000),
        ] {
            let full = Duration::from_millis(full);
            assert_eq!(backoff(attempt, 0.0), full / 2, "attempt {attempt}");
            assert_eq!(backoff(attempt, 1.0), full, "attempt {attempt}");
            let middle = backoff(attempt, 0.5);
            assert!(
                middle > full / 2 && middle < full,
                "attempt {attempt}: {middle:?}"
            );
        }
        for attempt in [0, 40, u32::MAX] {
            assert!(backoff(attempt, 1.0) <= BACKOFF_MAX, "attempt {attempt}");
        }
        for wild in [-1.0, 2.0, f64::NAN, f64::INFINITY] {
            let delay = backoff(2, wild);
            assert!(
                delay >= Duration::from_millis(250) && delay <= Duration::from_millis(500),
                "{wild}"
            );
        }
        for _ in 0..100 {
            let jitter = jitter();
            assert!((0.0..1.0).contains(&jitter), "{jitter}");
        }
    }

    #[test]
    fn the_completions_url_is_the_endpoint_plus_chat_completions() {
        for (endpoint, url) in [
            (
                "https://api.openai.com/v1",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://api.openai.com/v1/",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "http://localhost:11434/v1//",
                "http://localhost:11434/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8080",
                "http://127.0.0.1:8080/chat/completions",
            ),
            (
                "https://x.openai.azure.com/openai/deployments/gpt4?api-version=2024-10-21",
                "https://x.openai.azure.com/openai/deployments/gpt4/chat/completions?api-version=2024-10-21",
            ),
        ] {
            let config = ModelConfig::new(endpoint, "m");
            assert_eq!(config.completions_url("m").expect(endpoint).as_str(), url);
        }
    }

    #[test]
    fn check_names_the_table_and_the_field() {
        let cases: Vec<(ModelConfig, &str)> = vec![
            (
                ModelConfig::new("https://a/v1", ""),
                "[models.review] model: missing",
            ),
            (
                ModelConfig::new("", "m"),
                "[models.review] endpoint: missing",
            ),
            (
                ModelConfig::new("not a url", "m"),
                "[models.review] endpoint: \"not a url\" is not a URL",
            ),
            (
                ModelConfig::new("ftp://a/v1", "m"),
                "[models.review] endpoint: the scheme \"ftp\"",
            ),
            (
                ModelConfig::new("https://u:p@a/v1", "m"),
                "[models.review] endpoint: must not carry credentials",
            ),
            (
                ModelConfig::new("https://a/v1/chat/completions", "m"),
                "[models.review] endpoint: is the base URL, without /chat/completions (it is added): write \"https://a/v1\"",
            ),
            (
                ModelConfig {
                    max_attempts: 0,
                    ..config()
                },
                "[models.review] max_attempts: 0 is out of range",
            ),
            (
                ModelConfig {
                    max_attempts: 11,
                    ..config()
                },
                "[models.review] max_attempts: 11",
            ),
            (
                ModelConfig {
                    timeout_sec: 0.0,
                    ..config()
                },
                "[models.review] timeout_sec:",
            ),
            (
                ModelConfig {
                    timeout_sec: f64::NAN,
                    ..config()
                },
                "[models.review] timeout_sec:",
            ),
            (
                ModelConfig {
                    temperature: Some(2.5),
                    ..config()
                },
                "[models.review] temperature: 2.5 is out of range",
            ),
            (
                ModelConfig {
                    temperature: Some(-0.1),
                    ..config()
                },
                "[models.review] temperature:",
            ),
            (
                ModelConfig {
                    max_output_tokens: Some(0),
                    ..config()
                },
                "[models.review] max_output_tokens:",
            ),
            (
                ModelConfig {
                    api_key_env_var: Some("A=B".to_owned()),
                    ..config()
                },
                "[models.review] api_key_env_var: \"A=B\" is not an environment variable name",
            ),
            (
                ModelConfig {
                    api_key_env_var: Some("KEY".to_owned()),
                    ..ModelConfig::new("http://10.0.0.5:8000/v1", "m")
                },
                "[models.review] endpoint: is plain http to a host that is not loopback, and api_key_env_var is set",
            ),
        ];
        for (config, expected) in cases {
            let message = check(&config);
            assert!(message.starts_with(expected), "{expected}\n{message}");
        }
        assert_eq!(
            config()
                .check("bad name")
                .expect_err("a bad name")
                .to_string(),
            "[models.bad name]: model names may use only letters, digits, `_` and `-`"
        );
        // Loopback http may carry a key; other http may not, but is allowed without one.
        for endpoint in [
            "http://localhost:1/v1",
            "http://127.0.0.2:1/v1",
            "http://[::1]:1/v1",
        ] {
            let with_key = ModelConfig {
                api_key_env_var: Some("KEY".to_owned()),
                ..ModelConfig::new(endpoint, "m")
            };
            assert_eq!(with_key.check("local"), Ok(()), "{endpoint}");
        }
        assert_eq!(
            ModelConfig::new("http://10.0.0.5:8000/v1", "m").check("lan"),
            Ok(())
        );
        assert_eq!(config().timeout(), Duration::from_secs(90));
    }

    #[test]
    fn models_tables_parse_with_defaults_and_refuse_unknown_keys() {
        use crate::config::Config;
        use std::path::Path;
        let text = "[models.review]\nendpoint = \"http://localhost:11434/v1\"\nmodel = \"llama3.2\"\n\n[models.strict]\nendpoint = \"https://api.openai.com/v1\"\nmodel = \"gpt-4o-mini\"\napi_key_env_var = \"OPENAI_API_KEY\"\ntimeout_sec = 30\nmax_attempts = 1\nmax_output_tokens = 800\ntemperature = 0\naudit_prompts = true\njson_schema = false\n";
        let config = Config::parse(text, Path::new("g.toml")).expect("parses");
        let review = &config.models["review"];
        assert_eq!(
            review,
            &ModelConfig::new("http://localhost:11434/v1", "llama3.2")
        );
        assert_eq!(review.timeout_sec, 90.0);
        assert_eq!(review.max_attempts, 3);
        assert!(review.json_schema && !review.audit_prompts);
        let strict = &config.models["strict"];
        assert_eq!(strict.timeout(), Duration::from_secs(30));
        assert_eq!(strict.max_attempts, 1);
        assert_eq!(strict.max_output_tokens, Some(800));
        assert_eq!(strict.temperature, Some(0.0));
        assert!(strict.audit_prompts && !strict.json_schema);
        for (text, expected) in [
            (
                "[models.review]\nendpoint = \"https://a/v1\"\nmodel = \"m\"\napi_key = \"sk-x\"\n",
                "api_key",
            ),
            (
                "[models.review]\nendpoint = \"https://a/v1\"\n",
                "[models.review] model: missing",
            ),
            (
                "[models.review]\nendpoint = \"gopher://a\"\nmodel = \"m\"\n",
                "[models.review] endpoint:",
            ),
            (
                "[models.review]\nendpoint = \"https://a/v1\"\nmodel = \"m\"\nmax_attempts = 0\n",
                "[models.review] max_attempts:",
            ),
        ] {
            let message = Config::parse(text, Path::new("g.toml"))
                .expect_err(text)
                .to_string();
            assert!(message.starts_with("g.toml:"), "{message}");
            assert!(message.contains(expected), "{expected}\n{message}");
        }
    }

    fn answer(content: Value, finish_reason: &str) -> Vec<u8> {
        json!({
            "model": "served-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        })
        .to_string()
        .into_bytes()
    }

    fn retried(attempt: &Attempt) -> Option<&ModelError> {
        match attempt {
            Attempt::Retry { error, .. } => Some(error),
            _ => None,
        }
    }

    #[test]
    fn answers_are_parsed_and_unusable_ones_retried() {
        let none = HeaderMap::new();
        let Attempt::Answered(completion) = classify(
            200,
            &none,
            &answer(json!(r#"{"outcome":"allow"}"#), "stop"),
            false,
            true,
            None,
        ) else {
            panic!("an answer");
        };
        assert_eq!(completion.text, r#"{"outcome":"allow"}"#);
        assert_eq!(completion.model, "served-model");
        assert_eq!(completion.finish_reason, FinishReason::Stop);
        assert_eq!(
            (completion.input_tokens, completion.output_tokens),
            (Some(12), Some(3))
        );
        for (reason, expected) in [
            ("length", FinishReason::Length),
            ("content_filter", FinishReason::ContentFilter),
            ("tool_calls", FinishReason::Other),
        ] {
            let Attempt::Answered(completion) =
                classify(200, &none, &answer(json!("{}"), reason), false, true, None)
            else {
                panic!("{reason}");
            };
            assert_eq!(completion.finish_reason, expected);
        }
        // Prose around the object is fine; no object at all is not, with a schema.
        let fenced = answer(json!("Sure:\n```json\n{\"outcome\":\"deny\"}\n```"), "stop");
        assert!(matches!(
            classify(200, &none, &fenced, false, true, None),
            Attempt::Answered(_)
        ));
        let prose = answer(json!("I think it is fine."), "stop");
        let error = retried(&classify(200, &none, &prose, false, true, None)).cloned();
        assert!(
            matches!(&error, Some(ModelError::Transient(message)) if message.contains("no JSON object") && message.contains("I think")),
            "{error:?}"
        );
        assert!(matches!(
            classify(200, &none, &prose, false, false, None),
            Attempt::Answered(_)
        ));
        // A filtered answer is the module's to judge.
        let filtered = answer(json!(""), "content_filter");
        assert!(matches!(
            classify(200, &none, &filtered, false, true, None),
            Attempt::Answered(_)
        ));
        for (body, problem) in [
            (b"<html>busy</html>".to_vec(), "not JSON"),
            (br#"{"choices":[]}"#.to_vec(), "no choices"),
            (
                br#"{"error":{"message":"overloaded"}}"#.to_vec(),
                "no choices: overloaded",
            ),
            (
                br#"{"choices":[{"message":{"content":null}}]}"#.to_vec(),
                "no content",
            ),
        ] {
            let error = retried(&classify(200, &none, &body, false, true, None)).cloned();
            assert!(
                matches!(&error, Some(ModelError::Transient(message)) if message.contains(problem)),
                "{problem}: {error:?}"
            );
        }
        let too_big = retried(&classify(200, &none, b"{", true, false, None)).cloned();
        assert!(
            matches!(too_big, Some(ModelError::Transient(message)) if message.contains("larger than"))
        );
        let refusal =
            br#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that."}}]}"#;
        assert_eq!(
            classify(200, &none, refusal, false, true, None),
            Attempt::Failed(ModelError::Rejected(
                "the model refused: I can't help with that.".to_owned()
            ))
        );
        let parts = answer(
            json!([{"type": "text", "text": "{\"outcome\":"}, {"type": "text", "text": "\"allow\"}"}]),
            "stop",
        );
        let Attempt::Answered(completion) = classify(200, &none, &parts, false, true, None) else {
            panic!("content parts");
        };
        assert_eq!(completion.text, r#"{"outcome":"allow"}"#);
    }

    #[test]
    fn statuses_are_classified_and_messages_truncated_escaped_and_redacted() {
        let none = HeaderMap::new();
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-secret-123.","type":"invalid_request_error"}}"#;
        assert_eq!(
            classify(401, &none, body, false, true, Some("sk-secret-123")),
            Attempt::Failed(ModelError::Rejected(
                "HTTP 401: Incorrect API key provided: [redacted].".to_owned()
            ))
        );
        assert!(
            matches!(classify(400, &none, b"", false, true, None), Attempt::Failed(ModelError::Rejected(m)) if m == "HTTP 400")
        );
        assert!(
            matches!(retried(&classify(500, &none, b"oops", false, true, None)), Some(ModelError::Transient(m)) if m == "HTTP 500: oops")
        );
        assert!(matches!(
            retried(&classify(503, &none, b"", false, true, None)),
            Some(ModelError::Transient(_))
        ));
        assert!(matches!(
            retried(&classify(408, &none, b"", false, true, None)),
            Some(ModelError::Transient(_))
        ));
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(
            classify(
                429,
                &headers,
                br#"{"error":{"message":"slow down"}}"#,
                false,
                true,
                None
            ),
            Attempt::Retry {
                error: ModelError::RateLimited("HTTP 429: slow down".to_owned()),
                retry_after: Some(Duration::from_secs(7)),
            }
        );
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert!(matches!(
            classify(429, &headers, b"", false, true, None),
            Attempt::Retry {
                retry_after: None,
                ..
            }
        ));
        headers.insert(
            LOCATION,
            HeaderValue::from_static("https://elsewhere/v1/chat/completions"),
        );
        assert!(matches!(
            classify(301, &headers, b"", false, true, None),
            Attempt::Failed(ModelError::Rejected(m)) if m.contains("redirects to https://elsewhere/v1/chat/completions")
        ));
        let hostile = "\u{1b}]0;pwned\u{7}\r\nINFO all fine ".repeat(100);
        let Attempt::Failed(ModelError::Rejected(message)) =
            classify(403, &none, hostile.as_bytes(), false, true, None)
        else {
            panic!("a rejection");
        };
        assert!(
            !message.contains(['\u{1b}', '\r', '\n', '\u{7}']),
            "{message}"
        );
        assert!(
            message.contains(r"\u{1b}]0;pwned\u{7}\r\nINFO"),
            "{message}"
        );
        assert!(
            message.len() <= "HTTP 403: ".len() + MAX_ERROR_MESSAGE_BYTES + '…'.len_utf8(),
            "{}",
            message.len()
        );
        assert!(message.ends_with('…'));
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate("abc", 3), "abc");
    }

    #[test]
    fn json_objects_are_found_whole_or_between_the_outer_braces() {
        assert!(contains_json_object(r#" {"outcome":"allow"} "#));
        assert!(contains_json_object(
            "Answer: {\"outcome\": \"deny\", \"x\": {\"y\": 1}} done"
        ));
        assert!(!contains_json_object("no braces"));
        assert!(!contains_json_object("} backwards {"));
        assert!(!contains_json_object("[1, 2]"));
        assert!(!contains_json_object("{truncated: "));
    }

    /// One answer on a loopback port: `status` and `body`, to every request.
    fn answering(runtime: &tokio::runtime::Runtime, status: u16, body: String) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let address = listener.local_addr().expect("an address");
        runtime.spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut chunk = [0u8; 4096];
                // Enough for the head and the small body these tests send.
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(read) => request.extend_from_slice(&chunk[..read]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        format!("http://{address}/v1")
    }

    #[test]
    fn failures_are_logged_escaped_and_without_the_key() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let key = "sk-logged-never-4242";
        let endpoint = answering(
            &runtime,
            500,
            format!("boom {key}\u{1b}[2J\r\nINFO forged line"),
        );
        let config = ModelConfig {
            max_attempts: 1,
            ..ModelConfig::new(endpoint, "m")
        };
        let model = OpenAiModel::with_key(
            "review",
            &config,
            Some(key.to_owned()),
            runtime.handle().clone(),
        )
        .expect("a model");
        let request = CompletionRequest::new(vec![Message::user("x")]);
        let (reply, log) = crate::capture::logged(tracing::Level::WARN, || {
            model.complete(
                &request,
                Instant::now() + Duration::from_secs(10),
                &Cancel::new(),
            )
        });
        assert_eq!(
            reply,
            ModelReply::failed(
                ModelError::Transient(
                    r"HTTP 500: boom [redacted]\u{1b}[2J\r\nINFO forged line".to_owned()
                ),
                1
            )
        );
        assert!(
            log.contains("[models.review] failed; no attempt left"),
            "{log}"
        );
        assert!(
            log.contains(r"boom [redacted]\u{1b}[2J\r\nINFO forged line"),
            "{log}"
        );
        assert!(!log.contains(key), "{log}");
        assert!(!log.contains('\u{1b}'), "{log}");
        assert_eq!(log.lines().count(), 1, "{log}");
    }

    #[test]
    fn the_key_stays_out_of_debug_output() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let model = OpenAiModel::with_key(
            "review",
            &config(),
            Some("sk-very-secret".to_owned()),
            runtime.handle().clone(),
        )
        .expect("a model");
        let debug = format!("{model:?}");
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
        for bad in ["", "  ", "sk with space", "sk-\u{7f}"] {
            let error = OpenAiModel::with_key(
                "review",
                &config(),
                Some(bad.to_owned()),
                runtime.handle().clone(),
            )
            .expect_err(bad)
            .to_string();
            assert!(
                error.starts_with("[models.review] api_key_env_var:"),
                "{error}"
            );
            assert!(bad.trim().is_empty() || !error.contains(bad), "{error}");
        }
    }
}
