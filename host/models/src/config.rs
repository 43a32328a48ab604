//! `[models.NAME]` as written: [`ModelConfig`], its defaults and limits,
//! and [`ModelConfig::check`], which says whether a table is usable (and
//! builds the URL its requests go to).

use std::time::Duration;

use gatehouse_base::escape::escape;
use gatehouse_core::model_budget::ModelBudget;
use reqwest::Url;
use serde::Deserialize;

/// The default `timeout_sec`: [`gatehouse_core::model::DEFAULT_MODEL_TIMEOUT`].
pub const DEFAULT_TIMEOUT_SEC: f64 = 90.0;
/// The default `max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The most `max_attempts` may be.
pub const MAX_ATTEMPTS_LIMIT: u32 = 10;
/// The longest `timeout_sec` may be (a day).
pub const MAX_TIMEOUT_SEC: f64 = 86_400.0;
/// The longest `budget.window_sec` may be (a day).
pub const MAX_BUDGET_WINDOW_SEC: u64 = 86_400;

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
    /// `[models.NAME.budget]`: what the model may spend in a sliding window,
    /// across every module granted it.
    pub budget: BudgetConfig,
}

/// `[models.NAME.budget]` (or `budget = { ... }`): at most `calls` calls and
/// `tokens` tokens (prompt and answer, as the provider reports them) in any
/// `window_sec` seconds; a call past either is refused without being sent,
/// and the review fails closed with the limit named in its audit line.
/// Defaults: 600 calls and 2,000,000 tokens an hour.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Calls per window (0 refuses every call).
    pub calls: u32,
    /// Tokens per window.
    pub tokens: u64,
    /// The window, in seconds (1 to 86,400).
    pub window_sec: u64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        let budget = ModelBudget::default();
        BudgetConfig {
            calls: budget.calls(),
            tokens: budget.tokens(),
            window_sec: budget.window().as_secs(),
        }
    }
}

impl BudgetConfig {
    /// The budget; meaningful once [`ModelConfig::check`] passed.
    pub fn to_budget(&self) -> ModelBudget {
        ModelBudget::new(
            self.calls,
            self.tokens,
            Duration::from_secs(self.window_sec),
        )
    }
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
            budget: BudgetConfig::default(),
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
    /// (the key's variable is read by
    /// [`OpenAiModel::new`](super::OpenAiModel::new)).
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
    pub(super) fn completions_url(&self, name: &str) -> Result<Url, ModelConfigError> {
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
        if !(1..=MAX_BUDGET_WINDOW_SEC).contains(&self.budget.window_sec) {
            return Err(bad(
                "budget.window_sec",
                format!(
                    "{} is out of range: write a number of seconds from 1 to {MAX_BUDGET_WINDOW_SEC} (the default is {})",
                    self.budget.window_sec,
                    BudgetConfig::default().window_sec
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
/// (also IPv4-mapped), as [`gatehouse_base::loopback::is_loopback`] decides.
pub(super) fn is_loopback_url(url: &Url) -> bool {
    url.host_str()
        .is_some_and(gatehouse_base::loopback::is_loopback)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        ModelConfig::new("https://api.example.com/v1", "gpt-test")
    }

    fn check(config: &ModelConfig) -> String {
        config.check("review").expect_err("invalid").to_string()
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
}
