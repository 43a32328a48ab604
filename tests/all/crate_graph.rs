//! The crate graph enforces the layering ARCHITECTURE.md describes: each
//! crate's normal dependency tree (what an embedder links, proc-macros and
//! dev-dependencies left out) is read with `cargo tree` and must not contain
//! what belongs to a layer above it.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates a package's normal dependency tree holds, by name.
/// `prune` cuts the tree at those packages (their own dependencies are left
/// out, they themselves stay).
fn tree(package: &str, prune: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["--edges", "normal,no-proc-macro", "--package", package];
    for name in prune {
        args.extend(["--prune", name]);
    }
    packages(&args)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

fn assert_absent(package: &str, crates: &BTreeSet<String>, forbidden: &[&str], why: &str) {
    let found: Vec<&str> = forbidden
        .iter()
        .copied()
        .filter(|name| crates.contains(*name))
        .collect();
    assert!(
        found.is_empty(),
        "{package} depends on {found:?}: {why}. Run `cargo tree -p {package} -e normal -i {}` to see the path.",
        found.first().copied().unwrap_or_default()
    );
}

/// The gateway's, the CLI's and the test tooling's crates.
const ABOVE_THE_CORE: &[&str] = &[
    "rmcp",
    "axum",
    "reqwest",
    "hyper",
    "clap",
    "notify",
    "toml",
    "tracing-subscriber",
    "tracing-appender",
    "quick-junit",
    "criterion",
    "proptest",
    "gatehouse-conformance",
    "gatehouse-audit",
    "gatehouse-models",
    "gatehouse-registry",
    "gatehouse-mcp",
    "gatehouse-console",
    "gatehouse-telemetry",
    "gatehouse-gateway",
    "gatehouse-bench",
    "gatehouse-fuzzing",
    "prometheus-client",
];

#[test]
fn the_core_links_no_mcp_gateway_cli_or_config_format() {
    let crates = tree("gatehouse-core", &[]);
    assert!(crates.contains("wasmtime"), "the tree was read: {crates:?}");
    assert_absent(
        "gatehouse-core",
        &crates,
        ABOVE_THE_CORE,
        "the core is the embeddable reviewer runtime and knows no MCP transport, server, CLI or file format",
    );
}

#[test]
fn the_core_uses_anyhow_only_through_wasmtime() {
    // wasmtime-environ 48 depends on anyhow unconditionally; nothing else in
    // the core's tree may.
    let crates = tree(
        "gatehouse-core",
        &["wasmtime", "wasmtime-wasi", "wasmtime-wasi-io"],
    );
    assert!(
        crates.contains("jsonschema"),
        "the tree was read: {crates:?}"
    );
    assert_absent(
        "gatehouse-core",
        &crates,
        &["anyhow"],
        "library errors are typed (thiserror); anyhow belongs to the binary",
    );
}

#[test]
fn the_embedding_example_needs_nothing_above_the_core() {
    let crates = tree("gatehouse-embed-example", &[]);
    assert!(crates.contains("gatehouse-core"), "{crates:?}");
    assert_absent(
        "gatehouse-embed-example",
        &crates,
        ABOVE_THE_CORE,
        "examples/embed shows an embedder using the core alone",
    );
}

#[test]
fn the_conformance_kit_sits_on_the_core_alone() {
    let crates = tree("gatehouse-conformance", &[]);
    assert!(crates.contains("gatehouse-core"), "{crates:?}");
    let forbidden: Vec<&str> = ABOVE_THE_CORE
        .iter()
        .copied()
        .filter(|name| *name != "quick-junit" && *name != "gatehouse-conformance")
        .collect();
    assert_absent(
        "gatehouse-conformance",
        &crates,
        &forbidden,
        "the kit proves a module against the contract and needs no MCP side",
    );
}

/// Argument parsing, log output and test tooling: the binary's and the
/// unpublished crates'.
const CLI_AND_TOOLING: &[&str] = &[
    "clap",
    "tracing-subscriber",
    "tracing-appender",
    "criterion",
    "proptest",
    "gatehouse-bench",
    "gatehouse-fuzzing",
];

/// What runs WebAssembly: the reviewer core and everything that is wasmtime.
const THE_SANDBOX: &[&str] = &[
    "gatehouse-core",
    "gatehouse-conformance",
    "wasmtime",
    "wasmtime-wasi",
    "wasmtime-wasi-io",
    "cranelift-codegen",
    "wasmparser",
    "jsonschema",
];

#[test]
fn the_base_crate_links_nothing_of_gatehouse_wasmtime_mcp_or_async() {
    let crates = tree("gatehouse-base", &[]);
    assert!(
        crates.contains("serde_json"),
        "the tree was read: {crates:?}"
    );
    let mut forbidden: Vec<&str> = ABOVE_THE_CORE.to_vec();
    forbidden.extend(THE_SANDBOX);
    forbidden.extend(["tokio", "anyhow"]);
    assert_absent(
        "gatehouse-base",
        &crates,
        &forbidden,
        "the base is what every crate shares (escape, cut, private files, percentiles, loopback) and sits below all of them",
    );
}

#[test]
fn the_mcp_runtime_links_no_wasmtime_reviewer_gateway_or_cli() {
    let crates = tree("gatehouse-mcp", &[]);
    assert!(crates.contains("rmcp"), "the tree was read: {crates:?}");
    let mut forbidden: Vec<&str> = THE_SANDBOX.to_vec();
    forbidden.extend([
        "gatehouse-audit",
        "gatehouse-models",
        "gatehouse-gateway",
        "axum",
        "anyhow",
    ]);
    forbidden.extend(CLI_AND_TOOLING);
    assert_absent(
        "gatehouse-mcp",
        &crates,
        &forbidden,
        "the MCP runtime connects to servers and knows no reviewer, sandbox, audit, model or gateway; \
         elicitations leave it through `handler::ElicitationHandler`",
    );
}

#[test]
fn the_audit_log_and_the_models_link_no_mcp_transport_or_gateway() {
    for package in ["gatehouse-audit", "gatehouse-models"] {
        let crates = tree(package, &[]);
        assert!(crates.contains("gatehouse-core"), "{package}: {crates:?}");
        let mut forbidden = vec![
            "rmcp",
            "axum",
            "gatehouse-mcp",
            "gatehouse-gateway",
            "notify",
            "toml",
        ];
        forbidden.extend(CLI_AND_TOOLING);
        assert_absent(
            package,
            &crates,
            &forbidden,
            "the audit log (read by the CLI and, next, a console) and the model providers (a guest's granted capability) \
             serve more than the gateway, so they know no MCP transport",
        );
        let own = tree(package, &["wasmtime", "wasmtime-wasi", "wasmtime-wasi-io"]);
        assert_absent(
            package,
            &own,
            &["anyhow"],
            "library errors are typed (thiserror); anyhow belongs to the binary",
        );
    }
    let audit = tree("gatehouse-audit", &[]);
    assert_absent(
        "gatehouse-audit",
        &audit,
        &["reqwest", "hyper", "gatehouse-models"],
        "the audit log writes and reads files; it makes no network call",
    );
}

#[test]
fn the_gateway_has_no_cli_or_test_tooling() {
    let crates = tree("gatehouse-gateway", &[]);
    assert!(
        crates.contains("rmcp") && crates.contains("gatehouse-mcp"),
        "{crates:?}"
    );
    assert_absent(
        "gatehouse-gateway",
        &crates,
        CLI_AND_TOOLING,
        "argument parsing, log output and test tooling belong to the binary and the unpublished crates",
    );
    // wasmtime-environ and oci-wasm (whose API returns anyhow; the registry
    // turns it into a typed error at once) are the only ways in.
    let own = tree(
        "gatehouse-gateway",
        &["wasmtime", "wasmtime-wasi", "wasmtime-wasi-io", "oci-wasm"],
    );
    assert_absent(
        "gatehouse-gateway",
        &own,
        &["anyhow"],
        "library errors are typed (thiserror); anyhow belongs to the binary",
    );
}

#[test]
fn the_console_links_no_mcp_gateway_registry_or_cli() {
    let crates = tree("gatehouse-console", &[]);
    assert!(
        crates.contains("axum") && crates.contains("gatehouse-audit"),
        "the tree was read: {crates:?}"
    );
    let mut forbidden = vec![
        "rmcp",
        "gatehouse-mcp",
        "gatehouse-gateway",
        "gatehouse-registry",
        "gatehouse-models",
        "gatehouse-conformance",
        "reqwest",
    ];
    forbidden.extend(CLI_AND_TOOLING);
    assert_absent(
        "gatehouse-console",
        &crates,
        &forbidden,
        "the approvals console shows questions and takes answers; it knows no MCP, no gateway and no \
         registry, and makes no outgoing request: instances reach it over its socket (`link`)",
    );
    let own = tree(
        "gatehouse-console",
        &["wasmtime", "wasmtime-wasi", "wasmtime-wasi-io"],
    );
    assert_absent(
        "gatehouse-console",
        &own,
        &["anyhow"],
        "library errors are typed (thiserror); anyhow belongs to the binary",
    );
}

#[test]
fn telemetry_links_no_reviewer_mcp_or_gateway() {
    let crates = tree("gatehouse-telemetry", &[]);
    assert!(
        crates.contains("prometheus-client") && crates.contains("gatehouse-base"),
        "the tree was read: {crates:?}"
    );
    let mut forbidden = vec![
        "wasmtime",
        "rmcp",
        "reqwest",
        "gatehouse-core",
        "gatehouse-audit",
        "gatehouse-mcp",
        "gatehouse-console",
        "gatehouse-gateway",
        "anyhow",
    ];
    forbidden.extend(CLI_AND_TOOLING);
    assert_absent(
        "gatehouse-telemetry",
        &crates,
        &forbidden,
        "telemetry is metric families, their sums and their exposition: the gateway and the console record \
         into it, and the reviewer core (which an embedder links) never links an exporter",
    );
}

#[test]
fn the_registry_links_no_mcp_gateway_reviewer_or_cli() {
    let crates = tree("gatehouse-registry", &[]);
    assert!(
        crates.contains("gatehouse-base") && crates.contains("oci-client"),
        "the tree was read: {crates:?}"
    );
    let mut forbidden = vec![
        "rmcp",
        "axum",
        "wasmtime",
        "gatehouse-core",
        "gatehouse-mcp",
        "gatehouse-gateway",
        "gatehouse-audit",
        // sigstore's keys only: none of its network clients.
        "openidconnect",
        "tough",
        "webbrowser",
    ];
    forbidden.extend(CLI_AND_TOOLING);
    assert_absent(
        "gatehouse-registry",
        &crates,
        &forbidden,
        "modules as artifacts (the OCI client, the store, the lock file, signatures) know no MCP, no \
         gateway and no reviewer; the gateway reads a locked module's bytes through it",
    );
}

/// The OpenTelemetry SDK, its exporter and its bridge to `tracing`.
const OPENTELEMETRY: &[&str] = &[
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
    "opentelemetry-proto",
    "tracing-opentelemetry",
];

#[test]
fn only_the_binary_links_opentelemetry() {
    let binary = tree("gatehouse", &[]);
    assert!(
        OPENTELEMETRY
            .iter()
            .filter(|name| **name != "opentelemetry-proto")
            .all(|name| binary.contains(*name)),
        "the binary exports traces: {binary:?}"
    );
    for library in [
        "gatehouse-base",
        "gatehouse-core",
        "gatehouse-audit",
        "gatehouse-models",
        "gatehouse-mcp",
        "gatehouse-telemetry",
        "gatehouse-console",
        "gatehouse-gateway",
        "gatehouse-embed-example",
    ] {
        assert_absent(
            library,
            &tree(library, &[]),
            OPENTELEMETRY,
            "libraries emit `tracing` spans under gatehouse_base::trace::TARGET; only the binary \
             subscribes and exports them over OTLP, so an embedder never links an exporter",
        );
    }
}

/// The packages `cargo tree --prefix none` lists with `args`, by name and
/// version, and whether each is a proc macro.
fn packages(args: &[&str]) -> BTreeSet<(String, String, bool)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(gatehouse_tests::workspace_root())
        .args(["tree", "--quiet", "--prefix", "none"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((
                name.to_owned(),
                version.to_owned(),
                line.contains("(proc-macro)"),
            ))
        })
        .collect()
}

/// Every package the workspace builds: each member's normal, build and dev
/// edges.
fn every_package() -> BTreeSet<(String, String, bool)> {
    packages(&["--workspace", "--edges", "normal,build,dev"])
}

/// The workspace's `[profile.dev.package]` table: package spec (`NAME` or
/// `NAME@VERSION`) to its settings.
fn dev_profile_packages() -> toml::Table {
    let manifest = std::fs::read_to_string(gatehouse_tests::workspace_root().join("Cargo.toml"))
        .expect("the workspace's Cargo.toml");
    let manifest: toml::Table = toml::from_str(&manifest).expect("Cargo.toml parses");
    manifest["profile"]["dev"]["package"]
        .as_table()
        .expect("[profile.dev.package] is a table")
        .clone()
}

/// Whether a `[profile.dev.package]` spec names this package: `NAME`, or
/// `NAME@VERSION` with the whole version or its leading parts.
fn spec_names(spec: &str, name: &str, version: &str) -> bool {
    match spec.split_once('@') {
        None => spec == name,
        Some((spec_name, spec_version)) => {
            spec_name == name
                && (version == spec_version
                    || version
                        .strip_prefix(spec_version)
                        .is_some_and(|rest| rest.starts_with('.')))
        }
    }
}

/// The specs the dev profile compiles unoptimised.
fn unoptimised_specs() -> Vec<String> {
    dev_profile_packages()
        .iter()
        .filter(|(_, settings)| {
            settings.get("opt-level").and_then(toml::Value::as_integer) == Some(0)
        })
        .map(|(spec, _)| spec.clone())
        .collect()
}

/// Not a layer but a build-time rule read from the same graph: proc macros run
/// only while compiling, so the dev profile, which optimises dependencies,
/// leaves each one unoptimised (docs/BENCHMARKS.md, "The test build": a
/// quarter of a cold test build's compile time went on optimising them).
#[test]
fn every_proc_macro_is_compiled_unoptimised_in_test_builds() {
    let packages = every_package();
    assert!(
        packages
            .iter()
            .any(|(name, _, proc_macro)| name == "serde_derive" && *proc_macro),
        "{packages:?}"
    );
    let unoptimised = unoptimised_specs();
    let optimised: BTreeSet<&String> = packages
        .iter()
        .filter(|(name, version, proc_macro)| {
            *proc_macro
                && !unoptimised
                    .iter()
                    .any(|spec| spec_names(spec, name, version))
        })
        .map(|(name, _, _)| name)
        .collect();
    assert!(
        optimised.is_empty(),
        "proc macros the dev profile optimises: {optimised:?}. Add `NAME.opt-level = 0` for each, and \
         for the parsers only they use, under [profile.dev.package] in Cargo.toml: an optimised proc \
         macro costs build time and buys nothing"
    );
}

/// The other side of that rule: what wasmtime compiles and runs guests with
/// stays optimised, whatever the list above names (a bare `wasmparser`
/// there would unoptimise the validator every module load goes through,
/// where `wasmparser@0.253.0`, oci-wasm's own copy, does not).
#[test]
fn nothing_wasmtime_runs_on_is_compiled_unoptimised_in_test_builds() {
    let stack = packages(&["--package", "wasmtime", "--edges", "normal,no-proc-macro"]);
    assert!(
        stack.iter().any(|(name, _, _)| name == "cranelift-codegen"),
        "{stack:?}"
    );
    let unoptimised = unoptimised_specs();
    let slowed: Vec<String> = stack
        .iter()
        .filter(|(name, version, _)| {
            unoptimised
                .iter()
                .any(|spec| spec_names(spec, name, version))
        })
        .map(|(name, version, _)| format!("{name} {version}"))
        .collect();
    assert!(
        slowed.is_empty(),
        "the dev profile compiles {slowed:?} unoptimised, but wasmtime runs on them: tests would \
         compile and validate every module with unoptimised code. Name only other versions in \
         [profile.dev.package] (`NAME@VERSION`)"
    );
}

/// A name in `[profile.dev.package]` that matches no package does nothing
/// (cargo only warns): after an upgrade moves a version, the line must move
/// with it or go.
#[test]
fn every_package_the_dev_profile_names_is_built() {
    // Every platform's: the guests' wasm32-only dependencies count too.
    let packages = packages(&[
        "--workspace",
        "--edges",
        "normal,build,dev",
        "--target",
        "all",
    ]);
    let stale: Vec<String> = dev_profile_packages()
        .keys()
        .filter(|spec| *spec != "*")
        .filter(|spec| {
            !packages
                .iter()
                .any(|(name, version, _)| spec_names(spec, name, version))
        })
        .cloned()
        .collect();
    assert!(
        stale.is_empty(),
        "[profile.dev.package] in Cargo.toml names {stale:?}, which the workspace no longer builds \
         (`cargo tree --workspace -e normal,build,dev --target all` lists what it does): move each to the version \
         now built or remove it"
    );
}
