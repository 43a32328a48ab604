//! How much of WASI 0.2 a guest is linked against.
//!
//! Rust's `wasm32-wasip2` standard library imports WASI interfaces whether a
//! module uses them or not, so the host must satisfy them. [`WasiPolicy::Closed`]
//! links all of WASI against an empty context: calls succeed and find
//! nothing. [`WasiPolicy::Deny`] does the same, then replaces every function
//! of the file-system and socket interfaces with a trap that names it, which
//! is how the conformance kit proves a module never reaches for them, and
//! answers the environment interface's reads itself (no variables, no
//! arguments, no working directory), recording each one: language runtimes
//! such as CPython read their environment when they start, and an empty
//! answer is all they get in production too.

use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, Val};

use super::state::ReviewState;

/// Which WASI interfaces a guest may call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WasiPolicy {
    /// All of WASI, against an empty context: no preopened directories, no
    /// environment or arguments, no network, stdin empty, stdout discarded,
    /// stderr captured up to a cap. The default for reviews.
    #[default]
    Closed,
    /// Like `Closed`, except that a call to a file-system or socket function
    /// traps with its name, and the environment's reads (`get-environment`,
    /// `get-arguments`, `initial-cwd`) answer empty and are recorded in the
    /// review's [`ReviewLogs::environment_reads`](super::ReviewLogs::environment_reads).
    Deny,
}

/// The error a denied function returns when called: a trap that names it.
#[derive(Debug, thiserror::Error)]
#[error("called `{0}`, which the sandbox denies")]
pub(crate) struct DeniedCall(pub(crate) String);

/// The WASI 0.2 version wasmtime-wasi defines its interfaces at. A guest's
/// import of any 0.2.x resolves to it; shadowing must use this exact name.
/// (The conformance test with `tests/guests/escape` fails if it drifts.)
pub(crate) const HOST_WASI_VERSION: &str = "0.2.12";

/// The interface whose reads [`WasiPolicy::Deny`] answers empty.
const ENVIRONMENT: &str = "wasi:cli/environment";

/// The interfaces [`WasiPolicy::Deny`] refuses, or (the environment) answers
/// itself.
fn is_denied(interface: &str) -> bool {
    interface.starts_with("wasi:filesystem/")
        || interface.starts_with("wasi:sockets/")
        || interface == ENVIRONMENT
}

/// What [`WasiPolicy::Deny`] answers a read of the environment with: what
/// the closed context answers too. `None` for a function it does not know,
/// which traps like a denied one.
fn empty_answer(function: &str) -> Option<Val> {
    match function {
        // list<tuple<string, string>>, list<string>
        "get-environment" | "get-arguments" => Some(Val::List(Vec::new())),
        // option<string>
        "initial-cwd" => Some(Val::Option(None)),
        _ => None,
    }
}

/// Redefines every function of every denied interface `component` imports as
/// a trap that names it ([`DeniedCall`]), except the environment's reads,
/// which answer empty and are recorded. `linker` must hold the closed WASI
/// and allow shadowing.
pub(crate) fn stub_denied(
    linker: &mut Linker<ReviewState>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<()> {
    for (name, item) in component.component_type().imports(engine) {
        let interface = crate::contract::split_versioned(name).0;
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        if !is_denied(interface) {
            continue;
        }
        let mut stubs = linker.instance(&format!("{interface}@{HOST_WASI_VERSION}"))?;
        for (export, item) in instance.exports(engine) {
            // Resources stay the real (closed) ones: the functions that could
            // make or use them are what is denied.
            if let ComponentItem::ComponentFunc(_) = item.ty {
                let full = format!("{name}#{export}");
                let answer = (interface == ENVIRONMENT)
                    .then(|| empty_answer(export))
                    .flatten();
                match answer {
                    Some(answer) => stubs.func_new(export, move |mut store, _, _, results| {
                        store.data_mut().record_environment_read(&full);
                        if let Some(slot) = results.first_mut() {
                            *slot = answer.clone();
                        }
                        Ok(())
                    })?,
                    None => stubs.func_new(export, move |_, _, _, _| {
                        Err(wasmtime::Error::new(DeniedCall(full.clone())))
                    })?,
                }
            }
        }
    }
    Ok(())
}

/// Links WASI for `policy` into `linker`.
pub(crate) fn add_to_linker(
    linker: &mut Linker<ReviewState>,
    policy: WasiPolicy,
) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    // Whatever a guest waits on, it waits no longer than its deadline.
    super::blocking::bound_waiting_calls(linker, HOST_WASI_VERSION)?;
    if policy == WasiPolicy::Deny {
        // Each module's denied functions are shadowed by traps at load time.
        linker.allow_shadowing(true);
    }
    Ok(())
}
