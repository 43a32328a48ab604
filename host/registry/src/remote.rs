//! Pushing and pulling modules: [`Registry`], over `oci-client`.
//!
//! A pull fetches the manifest, checks it is the Wasm layout
//! ([`layout::check_manifest`]) before any blob is fetched, then fetches the
//! config and the component, each bounded by its declared size and the
//! module limit and verified against its digest, and puts all three in the
//! [`Store`]. Nothing reaches the store unverified, and a failed pull leaves
//! it as it was but for blobs that were complete and correct.
//!
//! Every exchange is bounded: connect and read timeouts, a bound on the
//! whole operation, and a few retries (with a doubling delay) of what a retry
//! can cure: a 5xx or 429 answer, or a connection that failed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;

use crate::access::{Access, AccessError};
use crate::digest::Digest;
use crate::layout::{self, Artifact, LayoutError};
use crate::reference::ModuleRef;
use crate::signature::{self, SignatureLayer};
use crate::store::{Store, StoreError};

/// Pushes and pulls modules as [`Access`] allows.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use gatehouse_registry::{Access, Registry, Store};
///
/// let registry = Registry::new(Access::builder().build())?;
/// let store = Store::open("/var/lib/gatehouse/store")?;
/// let reference = "localhost:5000/team/guardian:1.0".parse()?;
/// let component = std::fs::read("guardian.wasm")?;
/// let pushed = registry.push(&reference, &component).await?;
/// let pulled = registry.pull(&reference, &store).await?;
/// assert_eq!(pulled.manifest_digest, pushed.manifest_digest);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Registry {
    access: Access,
    certificates: Vec<oci_client::client::Certificate>,
}

/// What a push published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The reference pushed to.
    pub reference: ModuleRef,
    /// The manifest's digest (pin with `REF@DIGEST`; signatures sign it).
    pub manifest_digest: Digest,
    /// The component's digest.
    pub layer_digest: Digest,
}

/// What a pull brought into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The reference pulled.
    pub reference: ModuleRef,
    /// The manifest's digest: what the tag resolved to.
    pub manifest_digest: Digest,
    /// The component's digest (its blob in the store).
    pub layer_digest: Digest,
    /// The config's digest.
    pub config_digest: Digest,
    /// The component's size.
    pub size: u64,
}

/// Why a push or pull failed. Each names the reference.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Credentials or CA could not be read.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The registry refused or failed, after any retries.
    #[error("{reference}: {what}: {reason}")]
    Registry {
        /// The reference.
        reference: String,
        /// What was being done.
        what: &'static str,
        /// The registry's answer or the transport's error, escaped.
        reason: String,
    },
    /// The registry has no such manifest or repository.
    #[error("{reference}: {what}: the registry has no such manifest (is the reference right?)")]
    NotFound {
        /// The reference.
        reference: String,
        /// What was being done.
        what: &'static str,
    },
    /// The operation ran past its bound.
    #[error(
        "{reference}: {what}: no answer within {seconds} s (the registry stalls or is unreachable)"
    )]
    Timeout {
        /// The reference.
        reference: String,
        /// What was being done.
        what: &'static str,
        /// The bound.
        seconds: u64,
    },
    /// The manifest is not a Wasm component artifact.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A blob is larger than it was declared or than the limit.
    #[error(
        "{reference}: {what} {digest}: more than {limit} bytes came (the manifest declared {declared})"
    )]
    Oversized {
        /// The reference.
        reference: String,
        /// Which blob.
        what: &'static str,
        /// Its digest.
        digest: Digest,
        /// The bytes accepted.
        limit: u64,
        /// The size declared.
        declared: u64,
    },
    /// Bytes whose digest is not the one asked for.
    #[error(
        "{reference}: {what}: the registry sent bytes whose digest is {actual}, not {expected}"
    )]
    Mismatch {
        /// The reference.
        reference: String,
        /// Which blob.
        what: &'static str,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: Digest,
    },
    /// The store could not keep what came.
    #[error("{reference}: {source}")]
    Store {
        /// The reference.
        reference: String,
        /// The store's error.
        source: StoreError,
    },
}

impl Registry {
    /// A registry client; reads the CA files now, so a bad one is reported
    /// before anything is sent.
    pub fn new(access: Access) -> Result<Registry, RegistryError> {
        let certificates = access.certificates()?;
        Ok(Registry {
            access,
            certificates,
        })
    }

    /// The access this client was made with.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Publishes `component` at `reference` in the Wasm layout.
    pub async fn push(
        &self,
        reference: &ModuleRef,
        component: &[u8],
    ) -> Result<Pushed, RegistryError> {
        let artifact = Artifact::from_component(component)?;
        self.bounded(
            reference,
            "push",
            self.push_artifact(reference, component, &artifact),
        )
        .await
    }

    /// Pulls the module `reference` names into `store` (see the module
    /// docs); a reference with a digest is verified against it.
    pub async fn pull(
        &self,
        reference: &ModuleRef,
        store: &Store,
    ) -> Result<Pulled, RegistryError> {
        self.bounded(reference, "pull", self.pull_into(reference, store))
            .await
    }

    /// The manifest digest `reference` resolves to now (its tag's), without
    /// fetching the component.
    pub async fn resolve(&self, reference: &ModuleRef) -> Result<Digest, RegistryError> {
        self.bounded(reference, "resolve", async {
            let (client, auth) = self.client(reference).await?;
            let (bytes, _) = self.manifest(&client, &auth, reference).await?;
            Ok(Digest::of(&bytes))
        })
        .await
    }

    /// The cosign signatures stored for the artifact `manifest` in
    /// `reference`'s repository (`sha256-HEX.sig`); none when there are none.
    /// Each payload is fetched bounded and verified against its digest.
    pub async fn signatures(
        &self,
        reference: &ModuleRef,
        manifest: &Digest,
    ) -> Result<Vec<SignatureLayer>, RegistryError> {
        let tagged = reference.with_tag(&signature::signature_tag(manifest));
        self.bounded(&tagged, "fetch the signatures", async {
            let (client, auth) = self.client(&tagged).await?;
            let Some(existing) = self.signature_manifest(&client, &auth, &tagged).await? else {
                return Ok(Vec::new());
            };
            let mut layers = Vec::new();
            for layer in existing.layers.iter().take(signature::MAX_SIGNATURES) {
                let Some(signature) = layer
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(signature::SIGNATURE_ANNOTATION))
                else {
                    continue;
                };
                if layer.media_type != signature::PAYLOAD_MEDIA_TYPE {
                    continue;
                }
                let Ok(digest) = layer.digest.parse::<Digest>() else {
                    continue;
                };
                let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
                if size > signature::MAX_PAYLOAD_BYTES {
                    continue;
                }
                let blob = layout::Blob { digest, size };
                let payload = self
                    .blob(&client, &tagged, "signature payload", &blob)
                    .await?;
                if Digest::of(&payload) != blob.digest {
                    continue;
                }
                layers.push(SignatureLayer {
                    payload,
                    signature: signature.clone(),
                });
            }
            Ok(layers)
        })
        .await
    }

    /// Adds `layer`, a signature of the artifact `manifest`, to those stored
    /// in `reference`'s repository (as cosign does: one more layer in the
    /// `sha256-HEX.sig` manifest).
    pub async fn push_signature(
        &self,
        reference: &ModuleRef,
        manifest: &Digest,
        layer: &SignatureLayer,
    ) -> Result<(), RegistryError> {
        let tagged = reference.with_tag(&signature::signature_tag(manifest));
        self.bounded(&tagged, "push the signature", async {
            let (client, auth) = self.client(&tagged).await?;
            client
                .store_auth_if_needed(tagged.oci().resolve_registry(), &auth)
                .await;
            let mut manifest = self
                .signature_manifest(&client, &auth, &tagged)
                .await?
                .unwrap_or_default();
            let payload_digest = Digest::of(&layer.payload);
            let already = manifest.layers.iter().any(|existing| {
                existing.digest == payload_digest.to_string()
                    && existing
                        .annotations
                        .as_ref()
                        .and_then(|annotations| annotations.get(signature::SIGNATURE_ANNOTATION))
                        == Some(&layer.signature)
            });
            if already {
                return Ok(());
            }
            let payload_digest_text = payload_digest.to_string();
            self.retrying(&tagged, "push the signature payload", || {
                client.push_blob(tagged.oci(), layer.payload.clone(), &payload_digest_text)
            })
            .await?;
            manifest.layers.push(oci_client::manifest::OciDescriptor {
                media_type: signature::PAYLOAD_MEDIA_TYPE.to_owned(),
                digest: payload_digest.to_string(),
                size: i64::try_from(layer.payload.len()).unwrap_or(i64::MAX),
                annotations: Some(
                    [(
                        signature::SIGNATURE_ANNOTATION.to_owned(),
                        layer.signature.clone(),
                    )]
                    .into(),
                ),
                ..Default::default()
            });
            // The config cosign writes: the layers as the rootfs.
            let config = serde_json::to_vec(&serde_json::json!({
                "architecture": "",
                "created": "0001-01-01T00:00:00Z",
                "history": [{"created": "0001-01-01T00:00:00Z"}],
                "os": "",
                "rootfs": {
                    "type": "layers",
                    "diff_ids": manifest.layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
                },
                "config": {},
            }))
            .unwrap_or_default();
            let config_digest = Digest::of(&config).to_string();
            self.retrying(&tagged, "push the signature config", || {
                client.push_blob(tagged.oci(), config.clone(), &config_digest)
            })
            .await?;
            manifest.schema_version = 2;
            manifest.media_type = Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_owned());
            manifest.config = oci_client::manifest::OciDescriptor {
                media_type: signature::CONFIG_MEDIA_TYPE.to_owned(),
                digest: config_digest.clone(),
                size: i64::try_from(config.len()).unwrap_or(i64::MAX),
                ..Default::default()
            };
            let body = serde_json::to_vec(&manifest).unwrap_or_default();
            let content_type =
                http::HeaderValue::from_static(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE);
            self.retrying(&tagged, "push the signature manifest", || {
                client.push_manifest_raw(tagged.oci(), body.clone(), content_type.clone())
            })
            .await?;
            Ok(())
        })
        .await
    }

    /// The `.sig` manifest at `tagged`, or `None` when the registry has
    /// none.
    async fn signature_manifest(
        &self,
        client: &oci_client::Client,
        auth: &RegistryAuth,
        tagged: &ModuleRef,
    ) -> Result<Option<oci_client::manifest::OciImageManifest>, RegistryError> {
        let accepted = [oci_client::manifest::OCI_IMAGE_MEDIA_TYPE];
        let fetched = self
            .retrying(tagged, "fetch the signatures", || {
                client.pull_manifest_raw(tagged.oci(), auth, &accepted)
            })
            .await;
        let bytes = match fetched {
            Ok((bytes, _)) => bytes,
            Err(RegistryError::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        if bytes.len() > layout::MAX_MANIFEST_BYTES {
            return Err(RegistryError::Registry {
                reference: shown(tagged),
                what: "fetch the signatures",
                reason: format!("the manifest is over {} bytes", layout::MAX_MANIFEST_BYTES),
            });
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| RegistryError::Registry {
                reference: shown(tagged),
                what: "fetch the signatures",
                reason: format!("not an OCI image manifest ({err})"),
            })
    }

    async fn bounded<T>(
        &self,
        reference: &ModuleRef,
        what: &'static str,
        operation: impl Future<Output = Result<T, RegistryError>>,
    ) -> Result<T, RegistryError> {
        tokio::time::timeout(self.access.operation_timeout, operation)
            .await
            .map_err(|_| RegistryError::Timeout {
                reference: shown(reference),
                what,
                seconds: self.access.operation_timeout.as_secs(),
            })?
    }

    async fn push_artifact(
        &self,
        reference: &ModuleRef,
        component: &[u8],
        artifact: &Artifact,
    ) -> Result<Pushed, RegistryError> {
        let (client, auth) = self.client(reference).await?;
        let oci = reference.oci();
        client
            .store_auth_if_needed(oci.resolve_registry(), &auth)
            .await;
        for (what, bytes, digest) in [
            ("push the component", component, &artifact.layer_digest),
            (
                "push the config",
                artifact.config_bytes.as_slice(),
                &artifact.config_digest,
            ),
        ] {
            let digest = digest.to_string();
            self.retrying(reference, what, || {
                client.push_blob(oci, bytes.to_vec(), &digest)
            })
            .await?;
        }
        let content_type = http::HeaderValue::from_static(layout::MANIFEST_MEDIA_TYPE);
        self.retrying(reference, "push the manifest", || {
            client.push_manifest_raw(oci, artifact.manifest_bytes.clone(), content_type.clone())
        })
        .await?;
        Ok(Pushed {
            reference: reference.clone(),
            manifest_digest: artifact.manifest_digest.clone(),
            layer_digest: artifact.layer_digest.clone(),
        })
    }

    async fn pull_into(
        &self,
        reference: &ModuleRef,
        store: &Store,
    ) -> Result<Pulled, RegistryError> {
        let (client, auth) = self.client(reference).await?;
        let (manifest_bytes, manifest_digest) = self.manifest(&client, &auth, reference).await?;
        let checked = layout::check_manifest(
            &reference.to_string(),
            &manifest_bytes,
            self.access.max_module_bytes.min(store.max_blob_bytes()),
        )?;
        // The blobs by the pinned reference, so a tag moved meanwhile cannot
        // change what the manifest named.
        let pinned = reference.pinned(&manifest_digest);
        for (what, blob) in [("config", &checked.config), ("component", &checked.layer)] {
            // Already there and whole (a read verifies, and drops a
            // corrupted entry so it is fetched again).
            if store.get(&blob.digest).is_ok() {
                continue;
            }
            let bytes = self.blob(&client, &pinned, what, blob).await?;
            self.keep(reference, store, what, &blob.digest, &bytes)?;
        }
        self.keep(
            reference,
            store,
            "manifest",
            &manifest_digest,
            &manifest_bytes,
        )?;
        Ok(Pulled {
            reference: reference.clone(),
            manifest_digest,
            layer_digest: checked.layer.digest,
            config_digest: checked.config.digest,
            size: checked.layer.size,
        })
    }

    fn keep(
        &self,
        reference: &ModuleRef,
        store: &Store,
        what: &'static str,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<(), RegistryError> {
        store
            .put_verified(digest, bytes)
            .map_err(|source| match source {
                StoreError::Mismatch { actual, .. } => RegistryError::Mismatch {
                    reference: shown(reference),
                    what,
                    expected: digest.to_string(),
                    actual,
                },
                source => RegistryError::Store {
                    reference: shown(reference),
                    source,
                },
            })
    }

    /// The manifest's bytes and digest, the digest checked against the
    /// reference's when it pins one.
    async fn manifest(
        &self,
        client: &oci_client::Client,
        auth: &RegistryAuth,
        reference: &ModuleRef,
    ) -> Result<(Vec<u8>, Digest), RegistryError> {
        let accepted = [
            layout::MANIFEST_MEDIA_TYPE,
            oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
            oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
        ];
        let (bytes, _) = self
            .retrying(reference, "fetch the manifest", || {
                client.pull_manifest_raw(reference.oci(), auth, &accepted)
            })
            .await?;
        let digest = Digest::of(&bytes);
        if let Some(expected) = reference.digest()
            && *expected != digest
        {
            return Err(RegistryError::Mismatch {
                reference: shown(reference),
                what: "manifest",
                expected: expected.to_string(),
                actual: digest,
            });
        }
        Ok((bytes.to_vec(), digest))
    }

    async fn blob(
        &self,
        client: &oci_client::Client,
        pinned: &ModuleRef,
        what: &'static str,
        blob: &layout::Blob,
    ) -> Result<Vec<u8>, RegistryError> {
        let descriptor = oci_client::manifest::OciDescriptor {
            digest: blob.digest.to_string(),
            size: i64::try_from(blob.size).unwrap_or(i64::MAX),
            ..Default::default()
        };
        let limit = blob.size;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut sink = Bounded::new(limit);
            let result = client.pull_blob(pinned.oci(), &descriptor, &mut sink).await;
            if sink.overflowed {
                return Err(RegistryError::Oversized {
                    reference: shown(pinned),
                    what,
                    digest: blob.digest.clone(),
                    limit,
                    declared: blob.size,
                });
            }
            match result {
                Ok(()) => return Ok(sink.bytes),
                Err(OciDistributionError::DigestError(_)) => {
                    return Err(RegistryError::Mismatch {
                        reference: shown(pinned),
                        what,
                        expected: blob.digest.to_string(),
                        actual: Digest::of(&sink.bytes),
                    });
                }
                Err(err) if attempt < self.access.attempts && retryable(&err) => {
                    self.pause(attempt).await;
                }
                Err(err) => {
                    return Err(registry_error(pinned, "fetch the blob", &err));
                }
            }
        }
    }

    async fn retrying<T, F, Fut>(
        &self,
        reference: &ModuleRef,
        what: &'static str,
        mut request: F,
    ) -> Result<T, RegistryError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, OciDistributionError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match request().await {
                Ok(value) => return Ok(value),
                Err(err) if attempt < self.access.attempts && retryable(&err) => {
                    tracing::debug!(
                        reference = %shown(reference),
                        what,
                        attempt,
                        error = %gatehouse_base::escape::escape(&err.to_string()),
                        "registry request failed; retrying"
                    );
                    self.pause(attempt).await;
                }
                Err(err) => return Err(registry_error(reference, what, &err)),
            }
        }
    }

    async fn pause(&self, attempt: u32) {
        let factor = 1u32 << attempt.saturating_sub(1).min(6);
        tokio::time::sleep(self.access.retry_delay.saturating_mul(factor)).await;
    }

    /// A client for `reference`'s registry and its credentials. HTTPS unless
    /// plain HTTP is allowed there and the registry does not speak TLS.
    async fn client(
        &self,
        reference: &ModuleRef,
    ) -> Result<(oci_client::Client, RegistryAuth), RegistryError> {
        let auth = self.access.credentials(reference.registry())?;
        let https = self.client_with(ClientProtocol::Https);
        if !self.access.allows_plain_http(reference.registry()) {
            return Ok((https, auth));
        }
        match https
            .auth(reference.oci(), &auth, oci_client::RegistryOperation::Pull)
            .await
        {
            // A TLS failure that is about the certificate means the registry
            // speaks TLS: that is reported, never answered by plain HTTP.
            Err(OciDistributionError::RequestError(err))
                if (err.is_connect() || err.is_request())
                    && !error_chain(&err)
                        .to_ascii_lowercase()
                        .contains("certificate") =>
            {
                tracing::debug!(
                    registry = %gatehouse_base::escape::escape(reference.registry()),
                    "no TLS there; plain HTTP (loopback or listed insecure)"
                );
                Ok((self.client_with(ClientProtocol::Http), auth))
            }
            _ => Ok((https, auth)),
        }
    }

    fn client_with(&self, protocol: ClientProtocol) -> oci_client::Client {
        oci_client::Client::new(ClientConfig {
            protocol,
            extra_root_certificates: self.certificates.clone(),
            platform_resolver: None,
            connect_timeout: Some(self.access.connect_timeout),
            read_timeout: Some(self.access.read_timeout),
            user_agent: concat!("gatehouse/", env!("CARGO_PKG_VERSION")),
            max_concurrent_download: 1,
            max_concurrent_upload: 1,
            ..ClientConfig::default()
        })
    }
}

/// Whether a retry can cure `err`.
fn retryable(err: &OciDistributionError) -> bool {
    match err {
        OciDistributionError::ServerError { code, .. } => *code >= 500 || *code == 429,
        OciDistributionError::RequestError(err) => {
            err.is_connect()
                || err.is_timeout()
                || err.is_body()
                || err
                    .status()
                    .is_some_and(|status| status.is_server_error() || status.as_u16() == 429)
        }
        _ => false,
    }
}

fn registry_error(
    reference: &ModuleRef,
    what: &'static str,
    err: &OciDistributionError,
) -> RegistryError {
    use oci_client::errors::OciErrorCode;
    let not_found = match err {
        OciDistributionError::ServerError { code: 404, .. } => true,
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|error| {
                matches!(
                    error.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            })
        }
        _ => false,
    };
    if not_found {
        return RegistryError::NotFound {
            reference: shown(reference),
            what,
        };
    }
    let reason = match err {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => format!(
            "the registry refused the credentials (none, or wrong ones): log in with `docker login {}`, or set {} and {}",
            reference.registry(),
            crate::access::USERNAME_VAR,
            crate::access::PASSWORD_VAR
        ),
        OciDistributionError::ServerError { code, message, .. } => {
            format!("the registry answered HTTP {code}: {}", message.trim())
        }
        err => error_chain(err),
    };
    RegistryError::Registry {
        reference: shown(reference),
        what,
        reason: gatehouse_base::escape::escape(&gatehouse_base::cut::cut(&reason, 600))
            .into_owned(),
    }
}

/// `err` and its sources, one after another.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut reason = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !reason.contains(&text) {
            reason.push_str(": ");
            reason.push_str(&text);
        }
        source = inner.source();
    }
    reason
}

fn shown(reference: &ModuleRef) -> String {
    gatehouse_base::escape::escape(&reference.to_string()).into_owned()
}

/// A writer that keeps at most `limit` bytes and notes when more came.
struct Bounded {
    bytes: Vec<u8>,
    limit: u64,
    overflowed: bool,
}

impl Bounded {
    fn new(limit: u64) -> Bounded {
        Bounded {
            bytes: Vec::with_capacity(usize::try_from(limit.min(1 << 20)).unwrap_or(0)),
            limit,
            overflowed: false,
        }
    }
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.bytes.len() as u64 + buf.len() as u64 > self.limit {
            self.overflowed = true;
            return Poll::Ready(Err(std::io::Error::other("blob larger than declared")));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
