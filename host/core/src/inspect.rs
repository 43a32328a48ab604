//! `gatehouse inspect`: what a component is, imports, exports, contract
//! version, size, digest, the pool resources it needs, and whether it loads
//! as a reviewer.

use serde::Serialize;

use crate::contract::{self, REVIEW_INTERFACE, split_versioned};
use crate::sandbox::{LoadError, ModuleInfo, ModuleLimits, Sandbox};

/// The pool resources a component needs per instance.
#[derive(Debug, Clone, Serialize)]
pub struct Resources {
    /// Linear memories.
    pub memories: u32,
    /// Largest initial memory, in bytes.
    pub initial_memory_bytes: Option<u64>,
    /// Tables.
    pub tables: u32,
    /// Largest initial table, in elements.
    pub initial_table_elements: Option<u64>,
    /// Core instances created per instantiation (what the `core_instances`
    /// limit is checked against).
    pub core_instances: Option<u64>,
}

/// What `inspect` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// Where the bytes came from.
    pub source: String,
    /// Size in bytes.
    pub size: usize,
    /// sha256, hex.
    pub sha256: String,
    /// The contract version of its `review` export, if it has one.
    pub contract_version: Option<String>,
    /// The world it targets (`reviewer`, or `model-reviewer` when it
    /// imports the model capability), if it has a `review` export.
    pub world: Option<contract::World>,
    /// Its imports.
    pub imports: Vec<String>,
    /// Its exports.
    pub exports: Vec<String>,
    /// Pool resources per instance, when they can be known statically.
    pub resources: Option<Resources>,
    /// `Ok(describe())` when it loads as a reviewer, else why not.
    #[serde(serialize_with = "serialize_loadable")]
    pub reviewer: Result<ModuleInfo, String>,
}

fn serialize_loadable<S: serde::Serializer>(
    value: &Result<ModuleInfo, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Shown<'a> {
        Ok(&'a ModuleInfo),
        Error(&'a str),
    }
    match value {
        Ok(info) => Shown::Ok(info).serialize(serializer),
        Err(error) => Shown::Error(error).serialize(serializer),
    }
}

/// Inspects a component. Fails only when the bytes are not a component that
/// compiles; a component of another world is reported, not refused.
pub fn inspect(sandbox: &Sandbox, source: &str, bytes: &[u8]) -> Result<Inspection, LoadError> {
    inspect_with(sandbox, source, bytes, &ModuleLimits::default())
}

/// [`inspect`], with the module loaded (and `describe()` run) under its own
/// `limits`, as a `[[review.modules]]` entry's `limits` give them. The
/// sandbox's pool must have room for them (`LimitsBuilder::room_for`).
pub fn inspect_with(
    sandbox: &Sandbox,
    source: &str,
    bytes: &[u8],
    limits: &ModuleLimits,
) -> Result<Inspection, LoadError> {
    let sha256 = crate::sandbox::sha256_hex(bytes);
    let component = sandbox
        .compile(bytes, &sha256)
        .map_err(|error| LoadError::Compile {
            module: source.to_owned(),
            detail: format!("{error:#}"),
        })?;
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(sandbox.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    let exports: Vec<String> = ty
        .exports(sandbox.engine())
        .map(|(name, _)| name.to_owned())
        .collect();
    let contract_version = exports.iter().find_map(|name| match split_versioned(name) {
        (base, Some(version)) if base == REVIEW_INTERFACE => Some(version.to_owned()),
        _ => None,
    });
    let world = contract_version.as_ref().map(|_| {
        let asks_model = imports
            .iter()
            .any(|name| split_versioned(name).0 == contract::MODEL_INTERFACE);
        if asks_model {
            contract::World::ModelReviewer
        } else {
            contract::World::Reviewer
        }
    });
    let resources = component.resources_required().map(|needs| Resources {
        memories: needs.num_memories,
        initial_memory_bytes: needs.max_initial_memory_size.map(|pages| pages * 65_536),
        tables: needs.num_tables,
        initial_table_elements: needs.max_initial_table_size,
        core_instances: crate::sandbox::core_instances(bytes),
    });
    let name = source.rsplit('/').next().unwrap_or(source);
    // The compile above, not another: without a compile cache it would
    // compile again.
    let reviewer = match sandbox.load_compiled(name, source, bytes, component.clone(), limits) {
        Ok(module) => module
            .describe()
            .map_err(|failure| format!("describe() failed: {failure}")),
        Err(error) => Err(error.to_string()),
    };
    Ok(Inspection {
        source: source.to_owned(),
        size: bytes.len(),
        sha256,
        contract_version,
        world,
        imports,
        exports,
        resources,
        reviewer,
    })
}

/// The contract versions this host runs, for display beside a module's:
/// `gatehouse:reviewer@0.2.0 (also runs 0.1.0)`.
pub fn host_contract() -> String {
    let older: Vec<&str> = contract::SUPPORTED_VERSIONS
        .iter()
        .copied()
        .filter(|version| *version != contract::VERSION)
        .collect();
    if older.is_empty() {
        format!("{}@{}", contract::PACKAGE, contract::VERSION)
    } else {
        format!(
            "{}@{} (also runs {})",
            contract::PACKAGE,
            contract::VERSION,
            older.join(", ")
        )
    }
}
