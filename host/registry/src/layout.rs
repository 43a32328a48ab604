//! The artifact layout of a Wasm component in an OCI registry, as the
//! Bytecode Alliance's `wkg oci` and `oras` write it: an OCI image manifest
//! whose config has the media type `application/vnd.wasm.config.v0+json`
//! and whose one layer, `application/wasm`, is the component.
//!
//! [`check_manifest`] is the gate every pulled manifest passes before any
//! blob is fetched: anything else (several layers, another media type, a
//! size beyond the limit, a digest that is not sha256) is refused, naming
//! the reference and what is wrong.
//!
//! ```
//! use gatehouse_registry::layout::{self, Artifact};
//! // The smallest component: its preamble and nothing else.
//! let component = b"\0asm\x0d\0\x01\0".to_vec();
//! let artifact = Artifact::from_component(&component)?;
//! let manifest = layout::check_manifest("localhost:5000/empty:1", &artifact.manifest_bytes, 1 << 20)?;
//! assert_eq!(manifest.layer.digest, gatehouse_registry::Digest::of(&component));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::digest::Digest;

pub use oci_wasm::{
    WASM_LAYER_MEDIA_TYPE as LAYER_MEDIA_TYPE,
    WASM_MANIFEST_CONFIG_MEDIA_TYPE as CONFIG_MEDIA_TYPE,
    WASM_MANIFEST_MEDIA_TYPE as MANIFEST_MEDIA_TYPE,
};

/// The most bytes a manifest may have (an artifact's manifest is under a
/// kilobyte; the distribution spec lets registries refuse over 4 MiB).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// The most bytes a config may have.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A component laid out for a push: the config and manifest bytes, and the
/// digests the registry will know them by.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The config blob (`application/vnd.wasm.config.v0+json`).
    pub config_bytes: Vec<u8>,
    /// The manifest, exactly as pushed (its digest is the artifact's).
    pub manifest_bytes: Vec<u8>,
    /// The manifest's digest: what a tag resolves to and a signature signs.
    pub manifest_digest: Digest,
    /// The component's digest (the one layer).
    pub layer_digest: Digest,
    /// The config's digest.
    pub config_digest: Digest,
}

/// A manifest that passed [`check_manifest`]: where its two blobs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedManifest {
    /// The component layer.
    pub layer: Blob,
    /// The config.
    pub config: Blob,
}

/// One blob a manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes, as the manifest declares it.
    pub size: u64,
}

/// Why a component could not be laid out, or a manifest is refused.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The bytes are not a component `wkg` could describe.
    #[error("not a Wasm component (its WIT could not be read for the artifact's config): {0}")]
    NotAComponent(String),
    /// A manifest that is not the Wasm layout.
    #[error("{reference}: the manifest is not a Wasm component artifact: {reason}")]
    Manifest {
        /// The reference, escaped.
        reference: String,
        /// What is wrong.
        reason: String,
    },
}

impl Artifact {
    /// Lays `component` out: its config as `wkg` writes it (the component's
    /// world, imports and exports) and the manifest.
    pub fn from_component(component: &[u8]) -> Result<Artifact, LayoutError> {
        // A component's preamble: the magic, then layer 1 version 0x0d. A
        // core module (version 1) is no reviewer.
        if !component.starts_with(b"\0asm\x0d\0\x01\0") {
            return Err(LayoutError::NotAComponent(
                "the file does not start with a component's preamble (a core module, or not Wasm)"
                    .to_owned(),
            ));
        }
        let (config, _) = oci_wasm::WasmConfig::from_raw_component(component.to_vec(), None)
            .map_err(|err| LayoutError::NotAComponent(format!("{err:#}")))?;
        let config = oci_wasm::ToConfig::to_config(&config)
            .map_err(|err| LayoutError::NotAComponent(format!("{err:#}")))?;
        let layer = oci_client::client::ImageLayer::new(
            component.to_vec(),
            LAYER_MEDIA_TYPE.to_owned(),
            None,
        );
        let mut manifest = oci_client::manifest::OciImageManifest::build(&[layer], &config, None);
        manifest.media_type = Some(MANIFEST_MEDIA_TYPE.to_owned());
        let manifest_bytes = serde_json::to_vec(&manifest)
            .map_err(|err| LayoutError::NotAComponent(err.to_string()))?;
        Ok(Artifact {
            manifest_digest: Digest::of(&manifest_bytes),
            layer_digest: Digest::of(component),
            config_digest: Digest::of(&config.data),
            config_bytes: config.data.to_vec(),
            manifest_bytes,
        })
    }
}

/// Checks that `manifest_bytes` is a Wasm component artifact whose layer
/// is at most `max_layer_bytes`, and says where its blobs are.
pub fn check_manifest(
    reference: &str,
    manifest_bytes: &[u8],
    max_layer_bytes: u64,
) -> Result<CheckedManifest, LayoutError> {
    let refuse = |reason: String| LayoutError::Manifest {
        reference: gatehouse_base::escape::escape(reference).into_owned(),
        reason,
    };
    if manifest_bytes.len() > MAX_MANIFEST_BYTES {
        return Err(refuse(format!(
            "{} bytes, over the {MAX_MANIFEST_BYTES}-byte limit",
            manifest_bytes.len()
        )));
    }
    let manifest: oci_client::manifest::OciImageManifest =
        serde_json::from_slice(manifest_bytes)
            .map_err(|err| refuse(format!("not an OCI image manifest ({err})")))?;
    if manifest.schema_version != 2 {
        return Err(refuse(format!(
            "schemaVersion is {}, not 2",
            manifest.schema_version
        )));
    }
    if let Some(media_type) = &manifest.media_type
        && media_type != MANIFEST_MEDIA_TYPE
    {
        return Err(refuse(format!(
            "its mediaType is {media_type:?}, not {MANIFEST_MEDIA_TYPE:?}"
        )));
    }
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(refuse(format!(
            "its config's mediaType is {:?}, not {CONFIG_MEDIA_TYPE:?} (is this a container image?)",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(refuse(format!(
            "it has {} layers; a component artifact has exactly one",
            manifest.layers.len()
        )));
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(refuse(format!(
            "its layer's mediaType is {:?}, not {LAYER_MEDIA_TYPE:?}",
            layer.media_type
        )));
    }
    let blob = |what: &str, descriptor: &oci_client::manifest::OciDescriptor, max: u64| {
        let digest: Digest = descriptor
            .digest
            .parse()
            .map_err(|err| refuse(format!("its {what}'s digest: {err}")))?;
        let size = u64::try_from(descriptor.size)
            .map_err(|_| refuse(format!("its {what}'s size is {}", descriptor.size)))?;
        if size > max {
            return Err(refuse(format!(
                "its {what} is {size} bytes, over the {max}-byte limit"
            )));
        }
        Ok(Blob { digest, size })
    };
    Ok(CheckedManifest {
        layer: blob("layer", layer, max_layer_bytes)?,
        config: blob("config", &manifest.config, MAX_CONFIG_BYTES)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        // The smallest component: its preamble and nothing else.
        b"\0asm\x0d\0\x01\0".to_vec()
    }

    fn manifest_with(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let artifact = Artifact::from_component(&component()).expect("lays out");
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&artifact.manifest_bytes).expect("json");
        edit(&mut manifest);
        serde_json::to_vec(&manifest).expect("json")
    }

    #[test]
    fn a_component_is_laid_out_as_wkg_lays_it_out() {
        let bytes = component();
        let artifact = Artifact::from_component(&bytes).expect("lays out");
        let manifest: serde_json::Value =
            serde_json::from_slice(&artifact.manifest_bytes).expect("json");
        assert_eq!(manifest["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(manifest["config"]["mediaType"], CONFIG_MEDIA_TYPE);
        assert_eq!(manifest["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
        assert_eq!(
            manifest["layers"][0]["digest"],
            Digest::of(&bytes).to_string()
        );
        let config: serde_json::Value =
            serde_json::from_slice(&artifact.config_bytes).expect("config json");
        assert_eq!(config["architecture"], "wasm");
        assert_eq!(config["os"], "wasip2");
        let checked =
            check_manifest("r", &artifact.manifest_bytes, bytes.len() as u64).expect("passes");
        assert_eq!(checked.layer.size, bytes.len() as u64);
        assert_eq!(checked.config.digest, artifact.config_digest);
    }

    #[test]
    fn a_core_module_or_garbage_is_not_a_component() {
        assert!(Artifact::from_component(b"\0asm\x01\0\0\0").is_err());
        assert!(Artifact::from_component(b"not wasm").is_err());
    }

    #[test]
    fn manifests_outside_the_layout_are_refused_naming_what_is_wrong() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                manifest_with(|m| {
                    m["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json".into()
                }),
                "container image",
            ),
            (
                manifest_with(|m| {
                    m["mediaType"] = "application/vnd.oci.image.index.v1+json".into()
                }),
                "not \"application/vnd.oci.image.manifest.v1+json\"",
            ),
            (
                manifest_with(|m| {
                    let layer = m["layers"][0].clone();
                    m["layers"].as_array_mut().expect("layers").push(layer);
                }),
                "2 layers",
            ),
            (
                manifest_with(|m| m["layers"] = serde_json::json!([])),
                "0 layers",
            ),
            (
                manifest_with(|m| {
                    m["layers"][0]["mediaType"] =
                        "application/vnd.oci.image.layer.v1.tar+gzip".into()
                }),
                "layer's mediaType",
            ),
            (
                manifest_with(|m| m["layers"][0]["size"] = (1u64 << 40).into()),
                "over the",
            ),
            (
                manifest_with(|m| m["layers"][0]["size"] = (-1).into()),
                "size is -1",
            ),
            (
                manifest_with(|m| m["layers"][0]["digest"] = "sha512:00".into()),
                "only sha256",
            ),
            (
                manifest_with(|m| m["schemaVersion"] = 1.into()),
                "schemaVersion",
            ),
            (b"{".to_vec(), "not an OCI image manifest"),
            (vec![b' '; MAX_MANIFEST_BYTES + 1], "limit"),
        ];
        for (bytes, says) in cases {
            let err = check_manifest("localhost:5000/m:1", &bytes, 1 << 20)
                .expect_err(says)
                .to_string();
            assert!(
                err.starts_with("localhost:5000/m:1: ") && err.contains(says),
                "{says}: {err}"
            );
        }
    }
}
