//! How gatehouse reaches a registry: TLS (with the operator's CAs), where
//! plain HTTP is allowed, the credentials, and the bounds on every exchange.
//!
//! Plain HTTP is allowed only to a loopback registry or to a host the
//! operator lists as `insecure`; there HTTPS is tried first and HTTP only when
//! the registry does not speak TLS, as Docker does. Anywhere else a registry
//! is HTTPS, verified against the platform's roots and any CA file named.
//!
//! Credentials come, for each registry, from `GATEHOUSE_REGISTRY_USERNAME`
//! and `GATEHOUSE_REGISTRY_PASSWORD` when both are set, else from the Docker
//! config (`$DOCKER_CONFIG/config.json`, default `~/.docker/config.json`,
//! with its credential helpers), else none.
//!
//! ```
//! use std::time::Duration;
//! use gatehouse_registry::Access;
//!
//! let access = Access::builder()
//!     .insecure(["registry.lab.internal:5000"])
//!     .attempts(3)
//!     .operation_timeout(Duration::from_secs(60))
//!     .build();
//! assert!(access.allows_plain_http("localhost:5000"));
//! assert!(access.allows_plain_http("registry.lab.internal:5000"));
//! assert!(!access.allows_plain_http("registry.example.com"));
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable with a registry user name.
pub const USERNAME_VAR: &str = "GATEHOUSE_REGISTRY_USERNAME";
/// The environment variable with that user's password or token.
pub const PASSWORD_VAR: &str = "GATEHOUSE_REGISTRY_PASSWORD";

/// Default bound on one push or pull, retries included.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(120);
/// Default bound on connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on a read that makes no progress.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of tries of a request that failed for a reason a retry
/// can cure (a 5xx, 429, a connection that broke).
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// Default bound on a module's size.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 << 20;

/// Reaching registries: build with [`Access::builder`].
#[derive(Debug, Clone)]
pub struct Access {
    pub(crate) insecure: Vec<String>,
    pub(crate) ca_files: Vec<PathBuf>,
    pub(crate) ca_pems: Vec<Vec<u8>>,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) max_module_bytes: u64,
    pub(crate) docker_config: Option<PathBuf>,
    pub(crate) environment: bool,
}

/// Builds an [`Access`].
#[derive(Debug, Clone)]
pub struct AccessBuilder {
    access: Access,
}

/// Why credentials or a CA could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A CA file that could not be read or is not PEM certificates.
    #[error("CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The Docker config or its helper failed for this registry.
    #[error("credentials for {registry} from {source_name}: {reason}")]
    Credentials {
        /// The registry.
        registry: String,
        /// Where they were looked up.
        source_name: String,
        /// What went wrong.
        reason: String,
    },
}

impl Default for Access {
    fn default() -> Self {
        Access {
            insecure: Vec::new(),
            ca_files: Vec::new(),
            ca_pems: Vec::new(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
            retry_delay: Duration::from_millis(250),
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
            docker_config: None,
            environment: true,
        }
    }
}

impl Access {
    /// A builder with the defaults above.
    pub fn builder() -> AccessBuilder {
        AccessBuilder {
            access: Access::default(),
        }
    }

    /// Whether plain HTTP may be used with `registry` (`HOST[:PORT]`).
    pub fn allows_plain_http(&self, registry: &str) -> bool {
        gatehouse_base::loopback::is_loopback(registry)
            || self
                .insecure
                .iter()
                .any(|listed| listed == registry || listed == crate::reference::host_of(registry))
    }

    /// The bound on a module's size.
    pub fn max_module_bytes(&self) -> u64 {
        self.max_module_bytes
    }

    /// The credentials for `registry`, as described in the module docs.
    pub fn credentials(
        &self,
        registry: &str,
    ) -> Result<oci_client::secrets::RegistryAuth, AccessError> {
        use oci_client::secrets::RegistryAuth;
        if self.environment
            && let (Some(user), Some(password)) = (
                std::env::var_os(USERNAME_VAR),
                std::env::var_os(PASSWORD_VAR),
            )
        {
            return Ok(RegistryAuth::Basic(
                user.to_string_lossy().into_owned(),
                password.to_string_lossy().into_owned(),
            ));
        }
        let Some(path) = self.docker_config_file() else {
            return Ok(RegistryAuth::Anonymous);
        };
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(RegistryAuth::Anonymous);
            }
            Err(err) => {
                return Err(AccessError::Credentials {
                    registry: registry.to_owned(),
                    source_name: path.display().to_string(),
                    reason: err.to_string(),
                });
            }
        };
        use docker_credential::{CredentialRetrievalError as E, DockerCredential};
        match docker_credential::get_credential_from_reader(file, registry) {
            Ok(DockerCredential::UsernamePassword(user, password)) => {
                Ok(RegistryAuth::Basic(user, password))
            }
            Ok(DockerCredential::IdentityToken(_)) => Err(AccessError::Credentials {
                registry: registry.to_owned(),
                source_name: path.display().to_string(),
                reason: "an identity token (an OAuth login) is not supported; log in with a user name and a password or access token".to_owned(),
            }),
            Err(E::NoCredentialConfigured) => Ok(RegistryAuth::Anonymous),
            Err(err) => Err(AccessError::Credentials {
                registry: registry.to_owned(),
                source_name: path.display().to_string(),
                reason: gatehouse_base::escape::escape(&err.to_string()).into_owned(),
            }),
        }
    }

    fn docker_config_file(&self) -> Option<PathBuf> {
        if let Some(path) = &self.docker_config {
            return Some(path.clone());
        }
        if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
            return Some(Path::new(&dir).join("config.json"));
        }
        std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker/config.json"))
    }

    /// The extra roots, read from the CA files.
    pub(crate) fn certificates(&self) -> Result<Vec<oci_client::client::Certificate>, AccessError> {
        let mut certificates = Vec::new();
        let pems = self
            .ca_files
            .iter()
            .map(|path| {
                std::fs::read(path)
                    .map(|bytes| (path.clone(), bytes))
                    .map_err(|err| AccessError::CaFile {
                        path: path.clone(),
                        reason: err.to_string(),
                    })
            })
            .chain(
                self.ca_pems
                    .iter()
                    .map(|pem| Ok((PathBuf::from("(given)"), pem.clone()))),
            );
        for pem in pems {
            let (path, bytes) = pem?;
            let text = String::from_utf8_lossy(&bytes);
            if !text.contains("-----BEGIN CERTIFICATE-----") {
                return Err(AccessError::CaFile {
                    path,
                    reason: "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".to_owned(),
                });
            }
            certificates.push(oci_client::client::Certificate {
                encoding: oci_client::client::CertificateEncoding::Pem,
                data: bytes,
            });
        }
        Ok(certificates)
    }
}

impl AccessBuilder {
    /// Hosts (`HOST` or `HOST:PORT`) that may be reached over plain HTTP
    /// besides loopback.
    pub fn insecure<S: Into<String>>(mut self, hosts: impl IntoIterator<Item = S>) -> Self {
        self.access
            .insecure
            .extend(hosts.into_iter().map(Into::into));
        self
    }

    /// A PEM file of CA certificates to trust beside the platform's.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.access.ca_files.push(path.into());
        self
    }

    /// PEM CA certificates to trust beside the platform's.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.access.ca_pems.push(pem.into());
        self
    }

    /// The bound on one push or pull, retries included.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.access.operation_timeout = timeout;
        self
    }

    /// The bound on connecting.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.access.connect_timeout = timeout;
        self
    }

    /// The bound on a read that makes no progress.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.access.read_timeout = timeout;
        self
    }

    /// How many times a request is tried (at least once).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.access.attempts = attempts.max(1);
        self
    }

    /// The wait before the first retry (doubled for each later one).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.access.retry_delay = delay;
        self
    }

    /// The bound on a module's size.
    pub fn max_module_bytes(mut self, bytes: u64) -> Self {
        self.access.max_module_bytes = bytes;
        self
    }

    /// Read Docker credentials from this file instead of
    /// `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`.
    pub fn docker_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.access.docker_config = Some(path.into());
        self
    }

    /// Whether `GATEHOUSE_REGISTRY_USERNAME`/`_PASSWORD` are read (default
    /// yes; tests that must not see the caller's environment turn it off).
    pub fn environment(mut self, read: bool) -> Self {
        self.access.environment = read;
        self
    }

    /// The access.
    pub fn build(self) -> Access {
        self.access
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::secrets::RegistryAuth;

    fn docker_config(body: &str) -> (tempfile::TempDir, Access) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, body).expect("write");
        let access = Access::builder()
            .docker_config(&path)
            .environment(false)
            .build();
        (dir, access)
    }

    #[test]
    fn docker_config_credentials_are_found_per_registry() {
        // base64("alice:s3cret")
        let (_dir, access) =
            docker_config(r#"{"auths": {"localhost:5000": {"auth": "YWxpY2U6czNjcmV0"}}}"#);
        match access.credentials("localhost:5000").expect("found") {
            RegistryAuth::Basic(user, password) => {
                assert_eq!((user.as_str(), password.as_str()), ("alice", "s3cret"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            access.credentials("other:5000").expect("none"),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn a_broken_docker_config_is_named_in_the_error() {
        let (_dir, access) = docker_config("{not json");
        let err = access.credentials("localhost:5000").expect_err("broken");
        assert!(err.to_string().contains("config.json"), "{err}");
        let (_dir, access) =
            docker_config(r#"{"auths": {"localhost:5000": {"identitytoken": "t"}}}"#);
        let err = access.credentials("localhost:5000").expect_err("token");
        assert!(err.to_string().contains("identity token"), "{err}");
    }

    #[test]
    fn a_missing_docker_config_means_anonymous() {
        let access = Access::builder()
            .docker_config("/nonexistent/config.json")
            .environment(false)
            .build();
        assert!(matches!(
            access.credentials("localhost:5000").expect("anonymous"),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn plain_http_only_for_loopback_and_the_insecure_list() {
        let access = Access::builder().insecure(["lab.internal"]).build();
        for (registry, allowed) in [
            ("localhost:5000", true),
            ("127.0.0.1:5000", true),
            ("[::1]:5000", true),
            ("lab.internal:5000", true),
            ("lab.internal", true),
            ("lab.internal.evil.com", false),
            ("localhost.evil.com:5000", false),
            ("10.0.0.1:5000", false),
        ] {
            assert_eq!(access.allows_plain_http(registry), allowed, "{registry}");
        }
    }

    #[test]
    fn a_ca_file_that_is_not_pem_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "hello").expect("write");
        let err = Access::builder()
            .ca_file(&path)
            .build()
            .certificates()
            .expect_err("not pem");
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }
}
