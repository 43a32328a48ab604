//! A streamable-HTTP server as an rmcp transport: the configured headers
//! and those read from the environment (`env_http_headers`), the bearer
//! token from `bearer_token_env_var`, a client that keeps no idle
//! connections and follows only same-origin redirects, and responses passed
//! through [`RescuingHttpClient`] so an `elicitation/create` rmcp cannot
//! decode still reaches the router with its id.

use std::collections::HashMap;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::ConnectError;
use crate::rescue::RescuingHttpClient;
use crate::server_config::{ServerConfig, Transport};

/// The transport for `config`'s HTTP server; a `Config` error names what in
/// the configuration (or the environment it points at) is wrong.
pub(super) fn transport(
    config: &ServerConfig,
    sent_under: super::sent_under::SentUnder,
) -> Result<StreamableHttpClientTransport<RescuingHttpClient<reqwest::Client>>, ConnectError> {
    let Transport::Http {
        url,
        bearer_token_env_var,
        headers,
        env_headers,
    } = &config.transport
    else {
        return Err(ConnectError::Config {
            server: config.name.clone(),
            message: "not an HTTP server".to_owned(),
        });
    };
    let config_error = |message: String| ConnectError::Config {
        server: config.name.clone(),
        message,
    };
    let mut custom = HashMap::new();
    let mut add = |name: &str, value: &str| -> Result<(), ConnectError> {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|error| config_error(format!("header name {name:?}: {error}")))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|error| config_error(format!("header {name:?}: {error}")))?;
        custom.insert(header, value);
        Ok(())
    };
    for (name, value) in headers {
        add(name, value)?;
    }
    for (name, variable) in env_headers {
        let value = std::env::var(variable).map_err(|_| {
            config_error(format!(
                "env_http_headers.{name}: environment variable {variable} is not set"
            ))
        })?;
        add(name, &value)?;
    }
    let mut transport_config =
        StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
    if let Some(variable) = bearer_token_env_var {
        let token = std::env::var(variable).map_err(|_| {
            config_error(format!(
                "bearer_token_env_var: environment variable {variable} is not set"
            ))
        })?;
        transport_config = transport_config.auth_header(token);
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|error| config_error(format!("building the HTTP client: {error}")))?;
    Ok(StreamableHttpClientTransport::with_client(
        RescuingHttpClient::new(client).with_sent_under(sent_under),
        transport_config,
    ))
}

/// Follows only same-origin 307 and 308 redirects (which keep the method and
/// body), at most ten: a cross-origin hop would replay the session id and the
/// configured headers to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() <= 10 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}
