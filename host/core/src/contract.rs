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

/// The code `bindgen!` generates for the `reviewer` world: the wire types
/// and the instantiation glue. Crate-private (see the [module docs](self)).
mod bindings {
    wasmtime::component::bindgen!({
        world: "reviewer",
        path: "../../wit",
    });
}

pub(crate) use self::bindings::gatehouse::reviewer::{logging, types};
pub(crate) use self::bindings::{Reviewer, ReviewerPre};

/// The contract package name.
pub const PACKAGE: &str = "gatehouse:reviewer";

/// The contract version this host implements.
pub const VERSION: &str = "0.1.0";

/// The export every reviewer must provide, without its version.
pub const REVIEW_INTERFACE: &str = "gatehouse:reviewer/review";

/// The host import a reviewer may use, without its version.
pub const LOGGING_INTERFACE: &str = "gatehouse:reviewer/logging";

/// Whether a module built against contract `version` can run on this host.
///
/// Semver rules for a `0.x` package: the minor version must match, and a
/// module may not need a newer patch than the host has.
///
/// ```
/// use gatehouse_core::contract::is_supported_version;
/// assert!(is_supported_version("0.1.0"));
/// assert!(!is_supported_version("0.2.0"));
/// assert!(!is_supported_version("1.0.0"));
/// ```
pub fn is_supported_version(version: &str) -> bool {
    let parse = |text: &str| -> Option<(u64, u64, u64)> {
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|part| part.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??, parts.next()??))
    };
    match (parse(version), parse(VERSION)) {
        (Some((major, minor, patch)), Some((host_major, host_minor, host_patch))) => {
            major == host_major
                && minor == host_minor
                && (major != 0 || minor != 0 || patch == host_patch)
                && patch <= host_patch
        }
        _ => false,
    }
}

/// Splits a component import/export name such as
/// `gatehouse:reviewer/review@0.1.0` into the name and the version.
pub fn split_versioned(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once('@') {
        Some((base, version)) => (base, Some(version)),
        None => (name, None),
    }
}
