//! Signatures in cosign's key-based format: for an artifact whose manifest
//! digest is `sha256:HEX`, the same repository holds the tag
//! `sha256-HEX.sig`, an OCI manifest whose layers are "simple signing"
//! payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each
//! with its ECDSA signature (base64, DER) in the annotation
//! `dev.cosignproject.cosign/signature`. The payload names the manifest
//! digest it signs, so a signature cannot be moved to other bytes.
//!
//! Keys are cosign's: a PEM public key, and a private key in cosign's
//! encrypted format (`ENCRYPTED SIGSTORE PRIVATE KEY` or `ENCRYPTED COSIGN
//! PRIVATE KEY`, scrypt and secretbox), read and written with the
//! `sigstore` crate. ECDSA P-256 with SHA-256, as cosign generates.
//!
//! ```
//! use gatehouse_registry::signature::{self, PublicKey, SigningKey};
//! use gatehouse_registry::{Digest, ModuleRef};
//!
//! let key = SigningKey::generate()?;
//! let trusted = PublicKey::from_pem("release", key.public_pem().as_bytes())?;
//! let reference: ModuleRef = "localhost:5000/team/guardian:1".parse()?;
//! let manifest = Digest::of(b"a manifest");
//! let layer = key.sign(&reference, &manifest)?;
//! let signer = signature::verify(&manifest, &[layer], &[trusted])?;
//! assert_eq!(signer.name, "release");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sigstore::crypto::signing_key::{SigStoreKeyPair, SigStoreSigner};
use sigstore::crypto::{CosignVerificationKey, Signature, SigningScheme};

use crate::digest::Digest;
use crate::reference::ModuleRef;

/// The media type of a signature layer's payload.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The config media type of the signature manifest.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The largest payload read.
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// The most signature layers looked at.
pub const MAX_SIGNATURES: usize = 64;

/// The tag holding the signatures of the artifact `manifest`.
pub fn signature_tag(manifest: &Digest) -> String {
    format!("sha256-{}.sig", manifest.hex())
}

/// One signature: its payload and the base64 signature over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    /// The simple-signing payload, as signed.
    pub payload: Vec<u8>,
    /// The signature, base64 (the annotation's value).
    pub signature: String,
}

/// A trusted public key, with the name the `[trust]` policy gives it.
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// The policy's name for it.
    pub name: String,
    /// `sha256:` of its DER (SubjectPublicKeyInfo), to tell keys apart.
    pub fingerprint: String,
    key: CosignVerificationKey,
}

/// Who signed, as verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The key's name in the policy.
    pub name: String,
    /// The key's fingerprint.
    pub fingerprint: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "key {} ({})", self.name, self.fingerprint)
    }
}

/// A private key to sign with.
pub struct SigningKey {
    signer: SigStoreSigner,
    public_pem: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("public_pem", &self.public_pem)
            .finish_non_exhaustive()
    }
}

/// Why a key could not be read, or a signature made or verified.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// A key that could not be read.
    #[error("key {name}: {reason}")]
    Key {
        /// The key's name or file.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Signing failed.
    #[error("signing failed: {0}")]
    Sign(String),
    /// No signature verified with any trusted key.
    #[error("{0}")]
    Unverified(String),
}

#[derive(Serialize, Deserialize)]
struct Payload {
    critical: Critical,
    #[serde(default)]
    optional: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The simple-signing payload for `manifest` in `reference`'s repository.
pub fn payload(reference: &ModuleRef, manifest: &Digest) -> Vec<u8> {
    let payload = Payload {
        critical: Critical {
            identity: Identity {
                docker_reference: reference.name(),
            },
            image: Image {
                docker_manifest_digest: manifest.to_string(),
            },
            kind: PAYLOAD_TYPE.to_owned(),
        },
        optional: None,
    };
    serde_json::to_vec(&payload).unwrap_or_default()
}

impl PublicKey {
    /// A PEM public key (as `cosign generate-key-pair` writes `cosign.pub`).
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<PublicKey, SignatureError> {
        let key = CosignVerificationKey::try_from_pem(pem).map_err(|err| SignatureError::Key {
            name: name.to_owned(),
            reason: format!("not a public key in PEM: {err}"),
        })?;
        let der = pem_body(pem).ok_or_else(|| SignatureError::Key {
            name: name.to_owned(),
            reason: "no PEM block in it".to_owned(),
        })?;
        Ok(PublicKey {
            name: name.to_owned(),
            fingerprint: Digest::of(&der).to_string(),
            key,
        })
    }

    fn verifies(&self, layer: &SignatureLayer) -> bool {
        self.key
            .verify_signature(
                Signature::Base64Encoded(layer.signature.trim().as_bytes()),
                &layer.payload,
            )
            .is_ok()
    }
}

fn pem_body(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let body: String = text
        .lines()
        .skip_while(|line| !line.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|line| !line.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

impl SigningKey {
    /// A new ECDSA P-256 key.
    pub fn generate() -> Result<SigningKey, SignatureError> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .map_err(|err| SignatureError::Sign(err.to_string()))?;
        SigningKey::from_signer(signer)
    }

    /// A private key in cosign's encrypted PEM format, with its password.
    pub fn from_encrypted_pem(
        name: &str,
        pem: &[u8],
        password: &[u8],
    ) -> Result<SigningKey, SignatureError> {
        let pair = SigStoreKeyPair::from_encrypted_pem(pem, password).map_err(|err| {
            SignatureError::Key {
                name: name.to_owned(),
                reason: format!(
                    "cannot decrypt it (wrong password, or not a cosign private key): {err}"
                ),
            }
        })?;
        let signer = pair
            .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
            .map_err(|err| SignatureError::Key {
                name: name.to_owned(),
                reason: format!("not an ECDSA P-256 key: {err}"),
            })?;
        SigningKey::from_signer(signer)
    }

    fn from_signer(signer: SigStoreSigner) -> Result<SigningKey, SignatureError> {
        let public_pem = signer
            .to_sigstore_keypair()
            .and_then(|pair| pair.public_key_to_pem())
            .map_err(|err| SignatureError::Sign(err.to_string()))?;
        Ok(SigningKey { signer, public_pem })
    }

    /// The private key in cosign's encrypted format.
    pub fn to_encrypted_pem(&self, password: &[u8]) -> Result<String, SignatureError> {
        let pem = self
            .signer
            .to_sigstore_keypair()
            .and_then(|pair| pair.private_key_to_encrypted_pem(password))
            .map_err(|err| SignatureError::Sign(err.to_string()))?;
        Ok(pem.to_string())
    }

    /// The public key, PEM.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// A signature of `manifest` in `reference`'s repository.
    pub fn sign(
        &self,
        reference: &ModuleRef,
        manifest: &Digest,
    ) -> Result<SignatureLayer, SignatureError> {
        let payload = payload(reference, manifest);
        let signature = self
            .signer
            .sign(&payload)
            .map_err(|err| SignatureError::Sign(err.to_string()))?;
        Ok(SignatureLayer {
            payload,
            signature: base64::engine::general_purpose::STANDARD.encode(signature),
        })
    }
}

/// The first of `keys` that signed `manifest` in one of `layers`: a layer
/// counts only when its payload is a cosign simple-signing payload naming
/// exactly `manifest`, and its signature verifies with the key.
pub fn verify(
    manifest: &Digest,
    layers: &[SignatureLayer],
    keys: &[PublicKey],
) -> Result<Signer, SignatureError> {
    let mut seen = 0usize;
    let mut other_digest = 0usize;
    for layer in layers.iter().take(MAX_SIGNATURES) {
        let Ok(payload) = serde_json::from_slice::<Payload>(&layer.payload) else {
            continue;
        };
        if payload.critical.kind != PAYLOAD_TYPE {
            continue;
        }
        seen += 1;
        if payload.critical.image.docker_manifest_digest != manifest.to_string() {
            other_digest += 1;
            continue;
        }
        if let Some(key) = keys.iter().find(|key| key.verifies(layer)) {
            return Ok(Signer {
                name: key.name.clone(),
                fingerprint: key.fingerprint.clone(),
            });
        }
    }
    let names = keys
        .iter()
        .map(|key| key.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Err(SignatureError::Unverified(if seen == 0 {
        format!(
            "{manifest} is not signed (no cosign signature at {})",
            signature_tag(manifest)
        )
    } else if other_digest == seen {
        format!(
            "the {seen} signature(s) at {} sign another digest, not {manifest}",
            signature_tag(manifest)
        )
    } else {
        format!(
            "none of the {seen} signature(s) of {manifest} verifies with a trusted key ({names})"
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> ModuleRef {
        "localhost:5000/team/guardian:1".parse().expect("reference")
    }

    #[test]
    fn a_signature_verifies_only_for_its_digest_and_its_key() {
        let key = SigningKey::generate().expect("key");
        let other = SigningKey::generate().expect("key");
        let trusted = PublicKey::from_pem("release", key.public_pem().as_bytes()).expect("pem");
        let manifest = Digest::of(b"m");
        let layer = key.sign(&reference(), &manifest).expect("sign");
        assert_eq!(
            verify(
                &manifest,
                std::slice::from_ref(&layer),
                std::slice::from_ref(&trusted)
            )
            .expect("verifies")
            .name,
            "release"
        );
        // Another digest: the payload names the signed one.
        let err = verify(
            &Digest::of(b"n"),
            std::slice::from_ref(&layer),
            std::slice::from_ref(&trusted),
        )
        .expect_err("moved");
        assert!(err.to_string().contains("another digest"), "{err}");
        // Another key.
        let stranger = other.sign(&reference(), &manifest).expect("sign");
        let err =
            verify(&manifest, &[stranger], std::slice::from_ref(&trusted)).expect_err("untrusted");
        assert!(err.to_string().contains("trusted key (release)"), "{err}");
        // A payload edited after signing.
        let mut edited = layer.clone();
        edited.payload = String::from_utf8(edited.payload)
            .expect("utf-8")
            .replace("team/guardian", "team/evil")
            .into_bytes();
        assert!(verify(&manifest, &[edited], std::slice::from_ref(&trusted)).is_err());
        // Nothing at all.
        let err = verify(&manifest, &[], &[trusted]).expect_err("unsigned");
        assert!(err.to_string().contains("is not signed"), "{err}");
    }

    #[test]
    fn a_key_round_trips_through_cosigns_encrypted_format() {
        let key = SigningKey::generate().expect("key");
        let pem = key.to_encrypted_pem(b"pw").expect("encrypt");
        assert!(pem.contains("ENCRYPTED SIGSTORE PRIVATE KEY"), "{pem}");
        let again = SigningKey::from_encrypted_pem("k", pem.as_bytes(), b"pw").expect("decrypt");
        assert_eq!(again.public_pem(), key.public_pem());
        let err = SigningKey::from_encrypted_pem("k", pem.as_bytes(), b"wrong").expect_err("wrong");
        assert!(err.to_string().contains("wrong password"), "{err}");
        assert!(PublicKey::from_pem("bad", b"not pem").is_err());
    }
}
