//! The contract between the host and a reviewer: the WIT package
//! `gatehouse:reviewer` (`wit/reviewer.wit`), the version this host
//! implements, and the rule that decides whether a module built against
//! another version runs here.
//!
//! # One type per concept: host types, not wire types
//!
//! wasmtime's `bindgen!` turns the WIT records into Rust types. Those
//! generated types are the *wire form*: exactly what crosses into and out of
//! a guest, with every JSON value (a schema, `_meta`, accept content) as
//! unparsed text. They are private to this crate, on purpose: an embedder
//! works with the host types only, and each concept has one public name.
//!
//! | concept | public host type | private wire form (WIT) |
//! |---|---|---|
//! | what to review | [`ReviewRequest`](crate::request::ReviewRequest) | `review-request` |
//! | the host's side of it | [`ReviewContext`](crate::context::ReviewContext) | `review-context` |
//! | what a module decided | [`Outcome`](crate::outcome::Outcome), checked | `outcome` |
//! | what a module says it is | [`ModuleInfo`](crate::sandbox::ModuleInfo) | `module-info` |
//!
//! Each conversion happens in one place: [`ReviewRequest::new`] builds the
//! wire request once per request, and a guest's wire outcome is read and
//! checked into an [`Outcome`](crate::outcome::Outcome) before anything acts
//! on it. Two narrow doors serve tools that work beside the sandbox, both in
//! host types: [`Outcome::check`](crate::outcome::Outcome::check) checks an
//! outcome from a reviewer outside the sandbox (a process hook) exactly as a
//! guest's is checked, and [`ReviewRequest::elicitation_from_contract`] reads
//! back the elicitation a guest receives, so that `gatehouse-fuzzing` can
//! check the conversion.
//!
//! [`ReviewRequest::new`]: crate::request::ReviewRequest::new
//! [`ReviewRequest::elicitation_from_contract`]: crate::request::ReviewRequest::elicitation_from_contract

/// The code `bindgen!` generates for the `model-reviewer` world of the
/// current contract (a superset of `reviewer`): the wire types and the host
/// traits. Crate-private (see the [module docs](self)).
///
/// One set of wire types serves every supported version: 0.2.0 changed no
/// record or function of 0.1.0, and component types are structural, so a
/// 0.1.0 module's `review` takes and returns exactly these types. The 0.1.0
/// imports (`logging@0.1.0`) are linked to the same host functions
/// (`sandbox::link_contract`).
mod bindings {
    wasmtime::component::bindgen!({
        world: "model-reviewer",
        path: "../../wit",
    });
}

pub(crate) use self::bindings::ModelReviewer;
pub(crate) use self::bindings::gatehouse::reviewer::{call, logging, model, types};

/// The contract package name.
pub const PACKAGE: &str = "gatehouse:reviewer";

/// The current contract version: what `wit/reviewer.wit` declares and what
/// a module built against this host's `wit/` targets.
pub const VERSION: &str = "0.2.0";

/// Every contract version this host runs, oldest first. A module built
/// against a semver-compatible version of one of them loads (see
/// [`is_supported_version`]); `wit/0.1.0/` keeps 0.1.0 frozen.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];

/// The export every reviewer must provide, without its version.
pub const REVIEW_INTERFACE: &str = "gatehouse:reviewer/review";

/// The logging import, without its version (every version).
pub const LOGGING_INTERFACE: &str = "gatehouse:reviewer/logging";

/// The shared types, without their version (every version).
pub const TYPES_INTERFACE: &str = "gatehouse:reviewer/types";

/// The related-call import, without its version (since 0.2.0).
pub const CALL_INTERFACE: &str = "gatehouse:reviewer/call";

/// The model capability, without its version (since 0.2.0); only a module
/// granted a model may import it.
pub const MODEL_INTERFACE: &str = "gatehouse:reviewer/model";

/// The world a module targets, read from what it imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// `reviewer`: reviews with what the request carries (and, since 0.2.0,
    /// the related call).
    Reviewer,
    /// `model-reviewer` (since 0.2.0): may also ask a language model.
    ModelReviewer,
}

impl World {
    /// The world's name in the WIT.
    pub fn name(self) -> &'static str {
        match self {
            World::Reviewer => "reviewer",
            World::ModelReviewer => "model-reviewer",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The interfaces a version of the contract defines, without their version:
/// what a module of that version may import from `gatehouse:reviewer`.
pub fn interfaces_of(version: &str) -> &'static [&'static str] {
    match supported_version_for(version) {
        Some("0.1.0") => &[TYPES_INTERFACE, LOGGING_INTERFACE],
        Some(_) => &[
            TYPES_INTERFACE,
            LOGGING_INTERFACE,
            CALL_INTERFACE,
            MODEL_INTERFACE,
        ],
        None => &[],
    }
}

/// Whether a module built against contract `version` can run on this host.
///
/// Semver rules for a `0.x` package, against each supported version: the
/// minor version must match, and a module may not need a newer patch than
/// the host has.
///
/// ```
/// use gatehouse_core::contract::is_supported_version;
/// assert!(is_supported_version("0.1.0"));
/// assert!(is_supported_version("0.2.0"));
/// assert!(!is_supported_version("0.3.0"));
/// assert!(!is_supported_version("1.0.0"));
/// ```
pub fn is_supported_version(version: &str) -> bool {
    supported_version_for(version).is_some()
}

/// The supported version a module of `version` runs as, if any.
pub fn supported_version_for(version: &str) -> Option<&'static str> {
    let parse = |text: &str| -> Option<(u64, u64, u64)> {
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|part| part.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??, parts.next()??))
    };
    let (major, minor, patch) = parse(version)?;
    SUPPORTED_VERSIONS.iter().copied().find(|supported| {
        parse(supported).is_some_and(|(host_major, host_minor, host_patch)| {
            major == host_major
                && minor == host_minor
                && (major != 0 || minor != 0 || patch == host_patch)
                && patch <= host_patch
        })
    })
}

/// Splits a component import/export name such as
/// `gatehouse:reviewer/review@0.1.0` into the name and the version.
pub fn split_versioned(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once('@') {
        Some((base, version)) => (base, Some(version)),
        None => (name, None),
    }
}
