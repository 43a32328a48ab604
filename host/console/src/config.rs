//! `[console]`: where the console serves its page and how its token is
//! found.
//!
//! ```toml
//! [console]
//! listen = "127.0.0.1:8790"          # the page's address (loopback unless allow_remote)
//! token_file = "console.token"       # a 0600 file of this user's, relative to the config
//! token_env = "GATEHOUSE_CONSOLE_TOKEN" # else this variable; else a new token, printed once
//! public_origin = "https://console.example.com" # where a TLS proxy serves it, if one does
//! ```
//!
//! The table's presence is what turns the console on for `gatehouse serve`:
//! its instances hand the questions routed to the console over the console
//! socket (`.gatehouse/console.sock` beside the config).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::web::auth::Token;
use gatehouse_base::private_fs;

/// The default address of the page.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8790";

/// The default variable the token is read from.
pub const DEFAULT_TOKEN_ENV: &str = "GATEHOUSE_CONSOLE_TOKEN";

/// The longest token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// The `[console]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// The page's address (default [`DEFAULT_LISTEN`]).
    pub listen: Option<String>,
    /// Serve the page on an address other than loopback. The page speaks
    /// plain HTTP: put it behind a TLS proxy.
    pub allow_remote: bool,
    /// A file holding the token (this user's, no access for others),
    /// relative to the config file.
    pub token_file: Option<PathBuf>,
    /// The variable holding the token (default [`DEFAULT_TOKEN_ENV`]).
    pub token_env: Option<String>,
    /// The origin a proxy in front serves the console at
    /// (`https://console.example.com`): accepted as `Host` and `Origin`,
    /// and, when it is HTTPS, the session cookie is `Secure`.
    pub public_origin: Option<String>,
}

/// Why the console's settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleConfigError {
    /// The address is not loopback and `allow_remote` is not set.
    #[error(
        "[console] listen = {0:?} is not a loopback address; the page speaks plain HTTP, so set `allow_remote = true` (behind a TLS proxy) or listen on 127.0.0.1"
    )]
    NotLoopback(String),
    /// The token file cannot be used.
    #[error("[console] token_file {}: {problem}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// `public_origin` is not an origin.
    #[error(
        "[console] public_origin = {0:?} is not an origin: give the scheme and host (and port) only, e.g. \"https://console.example.com\""
    )]
    PublicOrigin(String),
    /// The token from the variable is unusable.
    #[error("the console token in ${var}: {problem}")]
    TokenVar {
        /// The variable.
        var: String,
        /// What is wrong.
        problem: String,
    },
}

/// Where the token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// The file.
    File(PathBuf),
    /// The variable.
    Variable(String),
    /// Made at start; the text is to be printed once.
    Generated(String),
}

impl ConsoleConfig {
    /// The page's address, checked.
    pub fn listen(&self) -> Result<String, ConsoleConfigError> {
        let listen = self
            .listen
            .clone()
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        if !self.allow_remote && !gatehouse_base::loopback::is_loopback(&listen) {
            return Err(ConsoleConfigError::NotLoopback(listen));
        }
        Ok(listen)
    }

    /// The public origin, checked: `http` or `https`, a host, and no path,
    /// query or user.
    pub fn public_origin(&self) -> Result<Option<url::Url>, ConsoleConfigError> {
        let Some(text) = &self.public_origin else {
            return Ok(None);
        };
        let refused = || ConsoleConfigError::PublicOrigin(text.clone());
        let url = url::Url::parse(text).map_err(|_| refused())?;
        let plain = matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some()
            && url.username().is_empty()
            && url.password().is_none()
            && url.path() == "/"
            && url.query().is_none()
            && url.fragment().is_none();
        if !plain {
            return Err(refused());
        }
        Ok(Some(url))
    }

    /// The token: from `token_file` (relative to `config_dir`), else the
    /// variable, else a new one.
    pub fn token(&self, config_dir: &Path) -> Result<(Token, TokenOrigin), ConsoleConfigError> {
        if let Some(file) = &self.token_file {
            let path = config_dir.join(file);
            let problem = |problem: String| ConsoleConfigError::TokenFile {
                path: path.clone(),
                problem,
            };
            let bytes =
                private_fs::read(&path, MAX_TOKEN_FILE).map_err(|e| problem(e.to_string()))?;
            let text = String::from_utf8(bytes).map_err(|_| problem("not UTF-8".to_owned()))?;
            let token = Token::new(&text).map_err(problem)?;
            return Ok((token, TokenOrigin::File(path)));
        }
        let var = self
            .token_env
            .clone()
            .unwrap_or_else(|| DEFAULT_TOKEN_ENV.to_owned());
        match std::env::var(&var) {
            Ok(text) if !text.is_empty() => {
                let token = Token::new(&text).map_err(|problem| ConsoleConfigError::TokenVar {
                    var: var.clone(),
                    problem,
                })?;
                Ok((token, TokenOrigin::Variable(var)))
            }
            _ => {
                let (token, text) = Token::generate();
                Ok((token, TokenOrigin::Generated(text)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_unless_allowed() {
        let config = ConsoleConfig::default();
        assert_eq!(config.listen().unwrap(), DEFAULT_LISTEN);
        let remote = ConsoleConfig {
            listen: Some("0.0.0.0:8790".into()),
            ..ConsoleConfig::default()
        };
        let error = remote.listen().unwrap_err().to_string();
        assert!(error.contains("allow_remote"), "{error}");
        let allowed = ConsoleConfig {
            allow_remote: true,
            ..remote
        };
        assert!(allowed.listen().is_ok());
    }

    #[test]
    fn a_public_origin_is_only_an_origin() {
        let with = |origin: &str| ConsoleConfig {
            public_origin: Some(origin.into()),
            ..ConsoleConfig::default()
        };
        assert!(
            with("https://console.example.com")
                .public_origin()
                .unwrap()
                .is_some()
        );
        assert!(
            with("https://console.example.com:8443/")
                .public_origin()
                .is_ok()
        );
        for bad in [
            "console.example.com",
            "https://console.example.com/x",
            "ftp://x",
            "https://u@x",
        ] {
            assert!(with(bad).public_origin().is_err(), "{bad}");
        }
        assert!(ConsoleConfig::default().public_origin().unwrap().is_none());
    }

    #[test]
    fn a_token_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("console.token");
        std::fs::write(&file, "a-long-enough-console-token\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = ConsoleConfig {
            token_file: Some("console.token".into()),
            ..ConsoleConfig::default()
        };
        let error = config.token(dir.path()).unwrap_err().to_string();
        assert!(error.contains("console.token"), "{error}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (token, origin) = config.token(dir.path()).unwrap();
        assert!(token.matches("a-long-enough-console-token"));
        assert_eq!(origin, TokenOrigin::File(file));
    }
}
