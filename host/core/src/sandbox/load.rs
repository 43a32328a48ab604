//! Loading a module: digest, pin check, compilation, and validation against
//! the `reviewer` world, with errors that say which file and what to do.

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use super::compiling::Took;
use super::module::{Prepared, ReviewerModule};
use super::{
    Limits, MEMORIES_PER_COMPONENT, ModuleLimits, Shared, TABLES_PER_COMPONENT, WasiPolicy,
};
use crate::contract::{
    self, MODEL_INTERFACE, PACKAGE, REVIEW_INTERFACE, SUPPORTED_VERSIONS, World, split_versioned,
};

/// Why a module could not be loaded. Each error names the module's source.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error(
        "{}: cannot read the module: {source}; check the path (a relative one is from the current directory) and that this user may read it",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The digest differs from the pinned one.
    #[error(
        "{module}: sha256 is {actual}, but it is pinned to {expected}; refusing to load it (update the pin if the new module is intended)"
    )]
    DigestMismatch {
        /// Where the module came from.
        module: String,
        /// The pinned digest.
        expected: String,
        /// The module's digest.
        actual: String,
    },
    /// The bytes are a core module, not a component.
    #[error(
        "{0}: is a core WebAssembly module, not a component; build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule(String),
    /// The bytes are not WebAssembly, or do not compile.
    #[error(
        "{module}: does not compile as a WebAssembly component: {detail}; give the `.wasm` of a reviewer built for wasm32-wasip2"
    )]
    Compile {
        /// Where the module came from.
        module: String,
        /// wasmtime's error.
        detail: String,
    },
    /// The component does not export the review interface.
    #[error(
        "{module}: does not export `{REVIEW_INTERFACE}@{}` (this host also runs contract versions {}); it is not a reviewer (its exports: {exports})",
        contract::VERSION,
        SUPPORTED_VERSIONS.join(", ")
    )]
    NotAReviewer {
        /// Where the module came from.
        module: String,
        /// What it does export.
        exports: String,
    },
    /// The component was built against a contract version this host does not support.
    #[error(
        "{module}: `{interface}` is contract version {found}, but this host runs contract versions {}; rebuild the module against wit/ of this host",
        SUPPORTED_VERSIONS.join(" and ")
    )]
    UnsupportedVersion {
        /// Where the module came from.
        module: String,
        /// The interface.
        interface: String,
        /// The version it names.
        found: String,
    },
    /// The component imports something the host does not provide.
    #[error(
        "{module}: imports `{import}`, which the host does not provide; a reviewer of contract {version} may import only {allowed} and WASI 0.2"
    )]
    UnsupportedImport {
        /// Where the module came from.
        module: String,
        /// The import.
        import: String,
        /// The contract version the module's `review` export names.
        version: String,
        /// What that version lets it import.
        allowed: String,
    },
    /// The component's contract imports name another version than its
    /// `review` export.
    #[error(
        "{module}: exports `{REVIEW_INTERFACE}@{version}` but imports `{import}`; every `{PACKAGE}` interface of a module must be of one contract version: rebuild it against one wit/"
    )]
    MixedVersions {
        /// Where the module came from.
        module: String,
        /// The version of its `review` export.
        version: String,
        /// The import of another version.
        import: String,
    },
    /// The component's imports or exports have the wrong types.
    #[error(
        "{module}: does not match the `reviewer` world: {detail}; rebuild the module against wit/ of this host (contract {})",
        SUPPORTED_VERSIONS.join(" or ")
    )]
    WorldMismatch {
        /// Where the module came from.
        module: String,
        /// wasmtime's explanation.
        detail: String,
    },
    /// The component needs more than the instance pool provides.
    #[error(
        "{module}: needs {detail}, more than the instance pool allows; slim the module, or raise the limit named"
    )]
    TooLarge {
        /// Where the module came from.
        module: String,
        /// What it needs.
        detail: String,
    },
    /// The component needs more than its limits give it.
    #[error(
        "{module}: needs {needs} {what}, but its limit `{limit}` is {allowed}; give it its own limit (in gatehouse.toml, `limits = {{ {limit} = {needs} }}` on its [[review.modules]] entry; for `gatehouse conformance`, `review` and `bench`, --{flag} {needs})",
        flag = limit.replace('_', "-")
    )]
    OverLimit {
        /// Where the module came from.
        module: String,
        /// The limit, as gatehouse.toml names it (`memory_bytes`,
        /// `core_instances`).
        limit: &'static str,
        /// What it is measured in.
        what: &'static str,
        /// What the module needs.
        needs: u64,
        /// What its limits allow.
        allowed: u64,
    },
    /// The module's own limits are beyond what the sandbox's pool was sized
    /// for.
    #[error(
        "{module}: its limit `{limit}` is {asked}, but the instance pool was sized for at most {room}; the pool is sized when the sandbox is made, from the section's limits and every module's own (for `gatehouse serve`: restart it to apply a larger module limit)"
    )]
    BeyondPool {
        /// Where the module came from.
        module: String,
        /// The limit (`memory_bytes`, `core_instances`).
        limit: &'static str,
        /// What the module's limits ask for.
        asked: u64,
        /// What the pool has room for.
        room: u64,
    },
}

/// The sha256 of `bytes`, as lower-case hex: the digest a
/// `[[review.modules]]` entry pins (`sha256 = "..."`) and
/// [`Sandbox::load_bytes`](super::Sandbox::load_bytes) checks.
///
/// ```
/// assert_eq!(
///     gatehouse_core::sandbox::sha256_hex(b""),
///     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/// );
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Loads the reviewer `bytes`: every check, then the compile (through the
/// cache) unless `compiled` is that compile already done (`inspect`
/// compiles first to read the component's types).
pub(crate) fn load(
    shared: Arc<Shared>,
    name: &str,
    source: &str,
    bytes: &[u8],
    pinned_sha256: Option<&str>,
    module_limits: &ModuleLimits,
    compiled: Option<Component>,
) -> Result<ReviewerModule, LoadError> {
    let limits = shared.limits.for_module(module_limits);
    check_room(&shared.limits, &limits, source)?;
    let digest = sha256_hex(bytes);
    if let Some(expected) = pinned_sha256 {
        let expected = expected
            .trim()
            .trim_start_matches("sha256:")
            .to_ascii_lowercase();
        if expected != digest {
            return Err(LoadError::DigestMismatch {
                module: source.to_owned(),
                expected,
                actual: digest,
            });
        }
    }
    if is_core_module(bytes) {
        return Err(LoadError::CoreModule(source.to_owned()));
    }
    check_core_instances(&limits, bytes, source)?;
    let component = match compiled {
        Some(component) => Ok(component),
        None => compile(&shared, bytes, &digest),
    }
    .map_err(|error| {
        let detail = if bytes.starts_with(b"\0asm") {
            format!("{error:#}")
        } else {
            // wasmtime's own words for this are a dump of the first bytes.
            "it is not WebAssembly (it does not start with `\\0asm`)".to_owned()
        };
        // wasmtime checks memories against the pool while compiling.
        if detail.contains("pooling allocator") {
            LoadError::TooLarge {
                module: source.to_owned(),
                detail,
            }
        } else {
            LoadError::Compile {
                module: source.to_owned(),
                detail,
            }
        }
    })?;
    let (version, world) = check_world(&shared, &component, source)?;
    check_resources(&limits, &component, source)?;
    let world_mismatch = |error: wasmtime::Error| LoadError::WorldMismatch {
        module: source.to_owned(),
        detail: format!("{error:#}"),
    };
    let pre = match shared.wasi {
        WasiPolicy::Closed => shared.linker.instantiate_pre(&component),
        WasiPolicy::Deny => {
            let mut linker = shared.linker.clone();
            super::wasi::stub_denied(&mut linker, &shared.engine, &component)
                .and_then(|()| linker.instantiate_pre(&component))
        }
    }
    .map_err(world_mismatch)?;
    let prepared = Prepared::new(pre, &version, world).map_err(world_mismatch)?;
    Ok(ReviewerModule::new(
        shared,
        limits,
        name.to_owned(),
        source.to_owned(),
        digest,
        bytes.len(),
        prepared,
    ))
}

/// Compiles `bytes`, through the on-disk cache when the sandbox has one; a
/// load of the same module (`digest`) that overlaps a running compile of it
/// takes that compile's result ([`super::compiling`]).
pub(crate) fn compile(shared: &Shared, bytes: &[u8], digest: &str) -> wasmtime::Result<Component> {
    let (result, took) = shared
        .compiling
        .once(digest, || compile_alone(shared, bytes, digest));
    if took == Took::Joined {
        shared
            .compiles
            .joined
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    result
}

/// [`compile`], this load on its own.
fn compile_alone(shared: &Shared, bytes: &[u8], digest: &str) -> wasmtime::Result<Component> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(cache) = &shared.compile_cache else {
        shared.compiles.in_memory.fetch_add(1, Relaxed);
        return Component::new(&shared.engine, bytes);
    };
    let engine = compatibility(&shared.engine);
    // The artifact is read into memory rather than mapped: a cache file
    // truncated while mapped would crash the host.
    if let Some(artifact) = cache.get(digest, engine) {
        // SAFETY: `get` hands out only an artifact whose HMAC under this
        // host's key (kept outside the cache directory) verifies over its
        // bytes, `digest` and `engine`; only `put` below makes such tags, over
        // `precompile_component` of this engine configuration and of the bytes
        // whose sha256 is `digest`. wasmtime also checks the artifact's header
        // against the engine.
        match unsafe { Component::deserialize(&shared.engine, artifact.bytes()) } {
            Ok(component) => {
                shared.compiles.hits.fetch_add(1, Relaxed);
                return Ok(component);
            }
            Err(error) => cache.discard(digest, engine, &format_args!("{error:#}")),
        }
    }
    let compiled = shared.engine.precompile_component(bytes);
    // The functions compiled for it are kept even if it failed: each is
    // right for its own code.
    cache.functions().flush();
    let compiled = compiled?;
    shared.compiles.compiled.fetch_add(1, Relaxed);
    if let Err(error) = cache.put(digest, engine, &compiled) {
        tracing::warn!("cannot cache the compiled module: {error}");
    }
    // SAFETY: `compiled` was just produced by this engine's
    // `precompile_component`.
    unsafe { Component::deserialize(&shared.engine, &compiled) }
}

/// The engine's compatibility hash, as a number for file names.
pub(crate) fn compatibility(engine: &wasmtime::Engine) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// The eight-byte preamble of a core module, version 1.
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

/// Checks the exports and imports by name before wasmtime checks their types,
/// so the error says what is missing rather than how types differ. Returns
/// the contract version of the module's `review` export and the world it
/// targets.
fn check_world(
    shared: &Shared,
    component: &Component,
    source: &str,
) -> Result<(String, World), LoadError> {
    let ty = component.component_type();
    let exports: Vec<&str> = ty.exports(&shared.engine).map(|(name, _)| name).collect();
    let review = exports
        .iter()
        .find(|name| split_versioned(name).0 == REVIEW_INTERFACE);
    let Some(review) = review else {
        return Err(LoadError::NotAReviewer {
            module: source.to_owned(),
            exports: if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            },
        });
    };
    check_version(review, source)?;
    let version = split_versioned(review).1.unwrap_or_default().to_owned();
    let allowed = contract::interfaces_of(&version);
    let mut world = World::Reviewer;
    for (import, _) in ty.imports(&shared.engine) {
        let (base, import_version) = split_versioned(import);
        if base.starts_with(&format!("{PACKAGE}/")) {
            check_version(import, source)?;
            if import_version != Some(version.as_str()) {
                return Err(LoadError::MixedVersions {
                    module: source.to_owned(),
                    version,
                    import: import.to_owned(),
                });
            }
        }
        if allowed.contains(&base) {
            if base == MODEL_INTERFACE {
                world = World::ModelReviewer;
            }
        } else if !is_wasi_p2(import) {
            return Err(LoadError::UnsupportedImport {
                module: source.to_owned(),
                import: import.to_owned(),
                version,
                allowed: allowed
                    .iter()
                    .filter(|interface| **interface != contract::TYPES_INTERFACE)
                    .map(|interface| format!("`{interface}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    Ok((version, world))
}

fn check_version(name: &str, source: &str) -> Result<(), LoadError> {
    match split_versioned(name) {
        (_, Some(version)) if contract::is_supported_version(version) => Ok(()),
        (interface, found) => Err(LoadError::UnsupportedVersion {
            module: source.to_owned(),
            interface: interface.to_owned(),
            found: found.unwrap_or("(none)").to_owned(),
        }),
    }
}

fn is_wasi_p2(import: &str) -> bool {
    match split_versioned(import) {
        (base, Some(version)) => base.starts_with("wasi:") && version.starts_with("0.2."),
        _ => false,
    }
}

/// Refuses module limits beyond the pool's room.
fn check_room(sandbox: &Limits, module: &Limits, source: &str) -> Result<(), LoadError> {
    let beyond = |limit, asked: u64, room: u64| {
        (asked > room).then(|| LoadError::BeyondPool {
            module: source.to_owned(),
            limit,
            asked,
            room,
        })
    };
    let memory = beyond(
        "memory_bytes",
        module.memory_bytes() as u64,
        sandbox.pool_memory_bytes() as u64,
    );
    let instances = beyond(
        "core_instances",
        u64::from(module.core_instances()),
        u64::from(sandbox.pool_core_instances()),
    );
    match memory.or(instances) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Refuses a component that creates more core instances than its limit, before
/// it is compiled (wasmtime would refuse it only past the pool's room).
fn check_core_instances(limits: &Limits, bytes: &[u8], source: &str) -> Result<(), LoadError> {
    // Malformed bytes are left to the compiler, whose error says more.
    let Some(needs) = super::core_instances(bytes) else {
        return Ok(());
    };
    let allowed = u64::from(limits.core_instances());
    if needs > allowed {
        return Err(LoadError::OverLimit {
            module: source.to_owned(),
            limit: "core_instances",
            what: "core instances",
            needs,
            allowed,
        });
    }
    Ok(())
}

fn check_resources(limits: &Limits, component: &Component, source: &str) -> Result<(), LoadError> {
    let over = |limit, what, needs: u64, allowed: u64| LoadError::OverLimit {
        module: source.to_owned(),
        limit,
        what,
        needs,
        allowed,
    };

    let too_large = |detail: String| LoadError::TooLarge {
        module: source.to_owned(),
        detail,
    };
    let Some(needs) = component.resources_required() else {
        return Ok(());
    };
    if needs.num_memories > MEMORIES_PER_COMPONENT {
        return Err(too_large(format!(
            "{} memories (a reviewer may have {MEMORIES_PER_COMPONENT})",
            needs.num_memories
        )));
    }
    if needs.num_tables > TABLES_PER_COMPONENT {
        return Err(too_large(format!(
            "{} tables (a reviewer may have {TABLES_PER_COMPONENT})",
            needs.num_tables
        )));
    }
    if let Some(pages) = needs.max_initial_memory_size {
        let bytes = pages.saturating_mul(65_536);
        if bytes > limits.memory_bytes() as u64 {
            return Err(over(
                "memory_bytes",
                "bytes of initial memory",
                bytes,
                limits.memory_bytes() as u64,
            ));
        }
    }
    Ok(())
}
