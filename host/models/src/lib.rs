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
//! budget = { calls = 600, tokens = 2000000, window_sec = 3600 }  # spend per sliding window, all modules together
//! ```
//!
//! [`build_models`] turns the tables into one [`ModelGrant`] each, backed by
//! an [`OpenAiModel`]: the core's [`Model`] over HTTP.
//!
//! By job: `config` is the table ([`ModelConfig`], its defaults and
//! [`check`](ModelConfig::check)); `body` builds a request's JSON;
//! `provider` is the [`OpenAiModel`] (its client, the attempts of one call)
//! and [`build_models`]; `key` reads and guards the API key; `retry` is the
//! wait between attempts (backoff, `Retry-After`); `answer` says what an
//! HTTP answer comes to; `redact` makes a provider's text fit for an error
//! or a log.
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
//! [`gatehouse_base::escape`] before it is put in an error or logged.
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
//!
//! [`Cancel`]: gatehouse_core::model::Cancel
//! [`Completion`]: gatehouse_core::model::Completion
//! [`Handle`]: tokio::runtime::Handle
//! [`Model`]: gatehouse_core::model::Model
//! [`Model::complete`]: gatehouse_core::model::Model::complete
//! [`ModelError::Cancelled`]: gatehouse_core::model::ModelError::Cancelled
//! [`ModelError::RateLimited`]: gatehouse_core::model::ModelError::RateLimited
//! [`ModelError::Rejected`]: gatehouse_core::model::ModelError::Rejected
//! [`ModelError::Timeout`]: gatehouse_core::model::ModelError::Timeout
//! [`ModelError::Transient`]: gatehouse_core::model::ModelError::Transient
//! [`ModelGrant`]: gatehouse_core::model::ModelGrant

mod answer;
mod body;
mod config;
mod key;
mod provider;
mod redact;
mod retry;

pub use answer::{MAX_ERROR_MESSAGE_BYTES, MAX_RESPONSE_BYTES};
pub use body::RESPONSE_FORMAT_NAME;
pub use config::{
    BudgetConfig, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_SEC, MAX_ATTEMPTS_LIMIT,
    MAX_BUDGET_WINDOW_SEC, MAX_TIMEOUT_SEC, ModelConfig, ModelConfigError, is_valid_model_name,
};
pub use provider::{CONNECT_TIMEOUT, OpenAiModel, build_models};
pub use retry::{BACKOFF_BASE, BACKOFF_MAX};

/// What `tracing` writes, captured for the unit tests (`tests/support/capture.rs`).
#[cfg(test)]
#[path = "../../../tests/support/capture.rs"]
mod capture;
