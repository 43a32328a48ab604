//! A real OCI registry on loopback for the tests: Debian's `docker-registry`
//! (CNCF distribution 2.8), started with a config written here, with an
//! optional TLS certificate from a CA the test makes and optional basic
//! auth (`htpasswd`, bcrypt).
//!
//! `tests/registry/setup` installs it (`.ci/run` calls it and sets
//! `GATEHOUSE_REGISTRY_TESTS=1`, which makes a missing binary a failure
//! instead of a skip). `GATEHOUSE_DOCKER_REGISTRY` names another binary.
//!
//! Shared by the tests crate and the CLI's tests (`#[path]`), so it uses
//! only std, `tempfile`, `rcgen` and `bcrypt`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The user and password of the basic-auth variant.
pub const USER: &str = "publisher";
/// See [`USER`].
pub const PASSWORD: &str = "correct horse battery staple";

/// How the registry is started.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Serve HTTPS with a certificate for `localhost` and `127.0.0.1`
    /// signed by a CA of this run ([`Registry::ca_pem`]).
    pub tls: bool,
    /// Require basic auth as [`USER`] / [`PASSWORD`].
    pub auth: bool,
}

/// A running registry; stopped when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// Where its config, storage, certificates and log are.
    pub dir: tempfile::TempDir,
    /// The CA's certificate (PEM), for the TLS variant.
    pub ca_pem: Option<String>,
}

/// The registry binary, or `None` (with why) when the tests should skip.
/// Panics when `GATEHOUSE_REGISTRY_TESTS` is set and it is missing.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("GATEHOUSE_DOCKER_REGISTRY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
    if path.is_file() {
        return Some(path);
    }
    if std::env::var_os("GATEHOUSE_REGISTRY_TESTS").is_some() {
        panic!(
            "GATEHOUSE_REGISTRY_TESTS is set but {} is missing: run tests/registry/setup",
            path.display()
        );
    }
    eprintln!(
        "skipped: no {} (run tests/registry/setup, or set GATEHOUSE_DOCKER_REGISTRY)",
        path.display()
    );
    None
}

impl Registry {
    /// Starts a registry, or returns `None` when the binary is missing
    /// and the tests may skip (see [`binary`]).
    pub fn start(options: Options) -> Option<Registry> {
        let binary = binary()?;
        let dir = tempfile::tempdir().expect("registry dir");
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
            root = dir.path().join("storage").display(),
        );
        let mut ca_pem = None;
        if options.tls {
            let (ca, cert, key) = certificates();
            std::fs::write(dir.path().join("cert.pem"), cert).expect("cert");
            std::fs::write(dir.path().join("key.pem"), key).expect("key");
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("cert.pem").display(),
                dir.path().join("key.pem").display()
            ));
            ca_pem = Some(ca);
        }
        if options.auth {
            let hash = bcrypt::hash(PASSWORD, 5).expect("bcrypt");
            std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{hash}\n"))
                .expect("htpasswd");
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: gatehouse-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let registry = Registry {
            child,
            address,
            dir,
            ca_pem,
        };
        registry.wait_listening();
        Some(registry)
    }

    /// What the registry logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Writes the CA to a file and returns its path.
    pub fn ca_file(&self) -> PathBuf {
        let path = self.dir.path().join("ca.pem");
        std::fs::write(&path, self.ca_pem.as_deref().expect("a TLS registry")).expect("ca");
        path
    }

    /// Where the registry keeps a repository's blobs (to corrupt one).
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut stream) = TcpStream::connect(&self.address) {
                // A plain request: a TLS registry answers it with a 400,
                // a plain one with its /v2/ answer; either means it is up.
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.write_all(
                    format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.address).as_bytes(),
                );
                let mut answer = [0u8; 12];
                if stream.read(&mut answer).is_ok_and(|n| n > 0) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "docker-registry did not listen on {}: {}",
            self.address,
            self.log()
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// A CA, and a server certificate and key for `localhost` and `127.0.0.1`
/// signed by it, all PEM.
pub fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "gatehouse test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    let cert = params.signed_by(&key, &issuer).expect("server cert");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A Docker config directory whose `config.json` holds `user:password`
/// for `registry` (what `docker login` writes).
pub fn docker_config(dir: &Path, registry: &str, user: &str, password: &str) -> PathBuf {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::create_dir_all(dir).expect("docker config dir");
    std::fs::write(
        dir.join("config.json"),
        format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#),
    )
    .expect("docker config");
    dir.to_path_buf()
}

/// The Python of `tests/registry/.venv`, where `tests/registry/setup`
/// installs the oras client; `None` (with why) when the tests should skip.
/// Panics when `GATEHOUSE_REGISTRY_TESTS` is set and it is missing.
pub fn oras_python() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("tests/registry/setup").is_file())
        .map(|root| root.join("tests/registry/.venv/bin/python"))?;
    if python.is_file() {
        return Some(python);
    }
    if std::env::var_os("GATEHOUSE_REGISTRY_TESTS").is_some() {
        panic!(
            "GATEHOUSE_REGISTRY_TESTS is set but {} is missing: run tests/registry/setup",
            python.display()
        );
    }
    eprintln!("skipped: no oras client (run tests/registry/setup)");
    None
}

/// Runs `script` with the oras venv's Python and `args`; panics with its
/// output when it fails, returns its stdout.
pub fn oras(python: &Path, script: &str, args: &[&str]) -> String {
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "oras script failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
