//! [`OpenAiModel`], the core's [`Model`] over HTTP: its client, the
//! attempts of one call raced against the deadline and the review's
//! [`Cancel`], and [`build_models`], one grant per `[models.NAME]`.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_base::escape::escape;
use gatehouse_core::model::{Cancel, CompletionRequest, Model, ModelError, ModelGrant, ModelReply};
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use tokio::runtime::Handle;

use super::answer::{Attempt, MAX_RESPONSE_BYTES, classify};
use super::body::request_body;
use super::config::{ModelConfig, ModelConfigError, is_loopback_url};
use super::key::{ApiKey, read_key};
use super::redact::redact;
use super::retry::{backoff, jitter};

/// How long establishing a connection (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an error body read (its message is truncated far below).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

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
                .with_audit_prompts(config.audit_prompts)
                .with_budget(config.budget.to_budget());
            Ok((name.clone(), grant))
        })
        .collect()
}

/// A model behind an OpenAI-compatible `/chat/completions` endpoint: the
/// core's [`Model`] over HTTP (see the [module docs](super) for what is
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
        let key = read_key(name, config)?;
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
            .map(|value| ApiKey::new(name, config, value))
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
