//! The API key: read from the variable `api_key_env_var` names, checked,
//! and kept out of `Debug` output (its header is marked sensitive).

use std::fmt;

use reqwest::header::HeaderValue;

use super::config::{ModelConfig, ModelConfigError};

/// The key, kept out of `Debug` and marked sensitive in the header.
#[derive(Clone)]
pub(super) struct ApiKey {
    pub(super) secret: String,
    pub(super) header: HeaderValue,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl ApiKey {
    /// `value` as the key of table `[models.NAME]`: trimmed, and refused
    /// when empty or not printable ASCII without spaces (the error names the
    /// variable, never the value).
    pub(super) fn new(
        name: &str,
        config: &ModelConfig,
        value: String,
    ) -> Result<Self, ModelConfigError> {
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
    }
}

/// The value of the variable `api_key_env_var` names, if it names one (an
/// unset variable is an error naming both).
pub(super) fn read_key(
    name: &str,
    config: &ModelConfig,
) -> Result<Option<String>, ModelConfigError> {
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
    Ok(key)
}
