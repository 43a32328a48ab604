//! `gatehouse new` as a module author uses it: in a temporary directory
//! outside this workspace, make a project, then run exactly the commands its
//! README names under "1. Build" and "2. Prove", then use the module as
//! "3. Use" says (its digest from `gatehouse inspect` pinned in a
//! `gatehouse.toml`) to review a request. This guards the generated README's
//! instructions as well as the templates.
//!
//! The Rust project always runs (it needs the `wasm32-wasip2` target and
//! crates.io). The TypeScript and Python projects need node, npm, Python and
//! the registries: they run when `GATEHOUSE_TEMPLATES` is set (`.ci/run` sets
//! it) and are skipped with a note otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Held while a project runs its README's "2. Prove" commands.
static PROVING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Set by `.ci/run`: the TypeScript and Python projects must build.
const REQUIRED: &str = "GATEHOUSE_TEMPLATES";

/// A directory with a `gatehouse` that is the built one. `conformance` and
/// `inspect` get `--deadline-ms 1000`: they are about answers, not speed, and
/// a debug host on a loaded CI machine must not fail them on time (CPython's
/// first call in a fresh instance takes ~7 ms in a release host).
fn gatehouse_on_path(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("gatehouse");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = conformance ] || [ \"$1\" = inspect ]; then exec {real:?} \"$@\" --deadline-ms 1000; fi\nexec {real:?} \"$@\"\n",
            real = env!("CARGO_BIN_EXE_gatehouse")
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// Where the Rust projects' nested cargo keeps its intermediate artifacts
/// (cargo's `build.build-dir`): one directory for both projects, so the
/// second reuses the dependencies (wit-bindgen's macro and the wasm-tools
/// crates it parses WIT with) that the first compiled, as an author's second
/// build would. Each project's `.wasm` still lands in its own `target/`,
/// where its README says. Measured: 23.8 s for the first project's build,
/// 1.8 s for the second.
fn nested_build_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-projects-build")
}

/// A command in `dir` with `bin` first on PATH and none of this cargo's
/// variables (a nested cargo must build the project as its author would).
fn command(program: &str, dir: &Path, bin: &Path) -> Command {
    let mut command = Command::new(program);
    command.current_dir(dir);
    command.env("XDG_CACHE_HOME", crate::paths::cache_home());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    command.env("PATH", std::env::join_paths(paths).unwrap());
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO") && key != "CARGO_HOME"
            || key.starts_with("RUST") && key != "RUSTUP_HOME"
        {
            command.env_remove(&key);
        }
    }
    command.env("CARGO_BUILD_BUILD_DIR", nested_build_dir());
    command
}

/// Runs `script` with `sh -eu` in `dir`, as the author would type it.
fn sh(dir: &Path, bin: &Path, script: &str, what: &str) -> Output {
    let mut sh = command("sh", dir, bin);
    sh.args(["-euc", script]);
    run(sh, what)
}

/// Runs the `gatehouse` on `bin` with `args` in `dir`.
fn gatehouse(dir: &Path, bin: &Path, args: &[&str], what: &str) -> Output {
    let mut gatehouse = command("gatehouse", dir, bin);
    gatehouse.args(args);
    run(gatehouse, what)
}

fn run(mut command: Command, what: &str) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(
        output.status.success(),
        "{what} exited {}:\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The fenced blocks (` ```kind `) of the README section whose heading
/// starts with `heading`.
fn blocks(readme: &str, heading: &str, kind: &str) -> Vec<String> {
    let mut in_section = false;
    let mut block: Option<String> = None;
    let mut found = Vec::new();
    for line in readme.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_section = title.starts_with(heading);
            continue;
        }
        if !in_section {
            continue;
        }
        match (&mut block, line.strip_prefix("```")) {
            (None, Some(opening)) if opening == kind => block = Some(String::new()),
            (Some(_), Some("")) => found.extend(block.take()),
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

/// Makes the project and follows its README; the review of `request`
/// must print `expect`.
fn follow_the_readme(lang: &str, name: &str, request: &str, expect: &str) {
    follow_the_readme_of(&["--lang", lang], name, request, &[], expect);
}

/// [`follow_the_readme`] for `gatehouse new NAME new_args...`, with
/// `review_args` added to the final review.
fn follow_the_readme_of(
    new_args: &[&str],
    name: &str,
    request: &str,
    review_args: &[&str],
    expect: &str,
) {
    let lang = new_args.join(" ");
    let lang = lang.as_str();
    let scratch = tempfile::tempdir().unwrap();
    let bin = gatehouse_on_path(scratch.path());
    let mut args = vec!["new", name];
    args.extend_from_slice(new_args);
    let made = gatehouse(scratch.path(), &bin, &args, "gatehouse new");
    let stdout = String::from_utf8_lossy(&made.stdout);
    assert!(stdout.contains(&format!("Created {name}")), "{stdout}");
    let project = scratch.path().join(name);
    assert!(project.join("wit/reviewer.wit").is_file());
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();

    // The author's steps, verbatim.
    for heading in ["1. Build", "2. Prove"] {
        let steps = blocks(&readme, heading, "sh");
        assert!(!steps.is_empty(), "{lang}: no commands under {heading}");
        // One project proves (compiles its module) at a time, so that the
        // second of a language finds the functions the first compiled in the
        // shared cache, as an author's next build would.
        let _proving = (heading == "2. Prove").then(|| {
            PROVING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        for step in steps {
            let output = sh(&project, &bin, &step, &format!("{lang}: {heading}: {step}"));
            if step.contains("conformance") {
                let text = String::from_utf8_lossy(&output.stdout);
                assert!(text.contains(" 0 failed"), "{lang}: {step}:\n{text}");
            }
        }
    }

    // 3. Use: the digest inspect prints, pinned in the README's entry.
    let inspect = blocks(&readme, "3. Use", "sh");
    assert_eq!(inspect.len(), 1, "{lang}: one inspect command");
    let inspected = sh(&project, &bin, &inspect[0], "inspect");
    let text = String::from_utf8_lossy(&inspected.stdout);
    let sha256 = text
        .lines()
        .find_map(|line| line.strip_prefix("sha256"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{lang}: inspect printed no sha256:\n{text}"));
    let module = inspect[0]
        .trim()
        .strip_prefix("gatehouse inspect ")
        .unwrap()
        .trim();
    let entries = blocks(&readme, "3. Use", "toml");
    assert_eq!(entries.len(), 1, "{lang}: one gatehouse.toml entry");
    let config = entries[0]
        .replace(
            &format!("/path/to/{name}/"),
            &format!("{}/", project.display()),
        )
        .replace("the sha256 gatehouse inspect printed", sha256);
    assert!(config.contains(module), "{lang}: the entry names {module}");
    // Room for a loaded CI machine, as for `conformance` above.
    let config = format!("[review.limits]\ndeadline_ms = 1000\n\n{config}");
    std::fs::write(project.join("gatehouse.toml"), config).unwrap();
    std::fs::write(project.join("request.json"), request).unwrap();
    let mut args = vec![
        "review",
        "--config",
        "gatehouse.toml",
        "--request",
        "request.json",
        "--server",
        "docs",
        "--format",
        "json",
    ];
    args.extend_from_slice(review_args);
    let reviewed = gatehouse(&project, &bin, &args, "review");
    let text = String::from_utf8_lossy(&reviewed.stdout);
    assert!(text.contains(expect), "{lang}: expected {expect}:\n{text}");
}

/// Whether the TypeScript and Python projects run here.
fn registries_required() -> bool {
    let required = std::env::var_os(REQUIRED).is_some_and(|value| !value.is_empty());
    if !required {
        eprintln!(
            "skipped: set {REQUIRED}=1 (as .ci/run does) to build the TypeScript and Python projects"
        );
    }
    required
}

const URL_TO_OTHER_HOST: &str = r#"{"mode": "url", "message": "Sign in", "url": "https://login.attacker.example/x", "elicitationId": "e-1"}"#;
const TOOL_CALL_APPROVAL: &str = r#"{"message": "Allow the agent to run this tool?", "requestedSchema": {"type": "object", "properties": {}}, "_meta": {"codex_request_type": "approval_request", "codex_approval_kind": "mcp_tool_call", "tool_name": "delete_branch", "tool_params": {"branch": "scratch"}}}"#;
const URL_TO_TRACKER: &str = r#"{"mode": "url", "message": "Sign in to the issue tracker", "url": "https://tracker.example.com/oauth/start", "elicitationId": "e-2"}"#;

#[test]
fn a_rust_project_builds_proves_and_reviews_outside_the_workspace() {
    follow_the_readme("rust", "my-policy", URL_TO_OTHER_HOST, "\"decline\"");
}

#[test]
fn a_rust_model_reviewer_project_builds_proves_and_reviews_outside_the_workspace() {
    // The review is granted the kit's scripted model in place of the
    // README's endpoint: no real model is asked.
    follow_the_readme_of(
        &["--lang", "rust", "--world", "model-reviewer"],
        "my-model-policy",
        TOOL_CALL_APPROVAL,
        &["--model", "stub:allow"],
        "\"accept\"",
    );
}

#[test]
fn a_typescript_project_builds_proves_and_reviews_outside_the_workspace() {
    if registries_required() {
        follow_the_readme("ts", "ts-policy", URL_TO_TRACKER, "\"accept\"");
    }
}

#[test]
fn a_python_project_builds_proves_and_reviews_outside_the_workspace() {
    if registries_required() {
        follow_the_readme("py", "py-policy", URL_TO_TRACKER, "\"accept\"");
    }
}

#[test]
fn a_typescript_model_reviewer_project_builds_proves_and_reviews_outside_the_workspace() {
    if registries_required() {
        follow_the_readme_of(
            &["--lang", "ts", "--world", "model-reviewer"],
            "ts-model-policy",
            TOOL_CALL_APPROVAL,
            &["--model", "stub:deny"],
            "\"decline\"",
        );
    }
}

#[test]
fn a_python_model_reviewer_project_builds_proves_and_reviews_outside_the_workspace() {
    if registries_required() {
        follow_the_readme_of(
            &["--lang", "py", "--world", "model-reviewer"],
            "py-model-policy",
            TOOL_CALL_APPROVAL,
            &["--model", "stub:allow"],
            "\"accept\"",
        );
    }
}

#[test]
fn an_existing_directory_is_never_written_into() {
    let scratch = tempfile::tempdir().unwrap();
    let existing = scratch.path().join("taken");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("Cargo.toml"), "mine").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["new", "taken", "--dir"])
        .arg(scratch.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(existing.join("Cargo.toml")).unwrap(),
        "mine"
    );
}

#[test]
fn a_name_that_is_no_package_name_is_refused_with_the_rule() {
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["new", "../escape\u{1b}[31m", "--dir"])
        .arg(scratch.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("lowercase letter"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "escaped: {stderr:?}");
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}
