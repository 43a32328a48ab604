//! Capability-root discovery: manifest forms, namespaces, placeholders,
//! limits, path escapes, the cache across passes, root combination,
//! restricted mode, and trust (manifest digests, refused fields, trusted
//! roots). Every test builds its own tree in a temporary directory.

use std::fs;
use std::path::{Path, PathBuf};

use gatehouse_mcp::discovery::{
    CapabilityRoot, DiscoveryCache, DiscoveryError, DiscoveryLimits, MAX_ROOTS, RootDiscovery,
    TrustMode, TrustPolicy, TrustState, TrustStore, assess, combine_roots, discover_root,
    discover_root_within,
};
use gatehouse_mcp::server_config::Transport;
use serde_json::{Value, json};
use tempfile::TempDir;

/// A temporary directory holding a root (`root/`) and a place outside it
/// (`outside/`).
struct Tree {
    _dir: TempDir,
    base: PathBuf,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(base.join("root")).unwrap();
        fs::create_dir_all(base.join("outside")).unwrap();
        Self { _dir: dir, base }
    }

    /// The root's path.
    fn root_dir(&self) -> PathBuf {
        self.base.join("root")
    }

    /// A path under the temporary directory, outside the root.
    fn outside(&self, rel: &str) -> PathBuf {
        self.base.join("outside").join(rel)
    }

    /// The root as a capability root named `id`.
    fn root(&self, id: &str) -> CapabilityRoot {
        CapabilityRoot::new(id, self.root_dir())
    }

    /// Writes `text` at `rel` under the root, creating folders.
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        write_at(&self.root_dir().join(rel), text)
    }

    /// Writes `value` as JSON at `rel` under the root.
    fn json(&self, rel: &str, value: &Value) -> PathBuf {
        self.write(rel, &value.to_string())
    }

    /// A folder under the root.
    fn dir(&self, rel: &str) -> PathBuf {
        let path = self.root_dir().join(rel);
        fs::create_dir_all(&path).unwrap();
        path
    }
}

fn write_at(path: &Path, text: &str) -> PathBuf {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    path.to_path_buf()
}

fn stdio(command: &str) -> Value {
    json!({ "command": command })
}

fn discover(root: &CapabilityRoot) -> RootDiscovery {
    discover_root(root, &DiscoveryLimits::default()).unwrap()
}

fn discover_with(root: &CapabilityRoot, limits: DiscoveryLimits) -> RootDiscovery {
    discover_root(root, &limits).unwrap()
}

fn names(found: &RootDiscovery) -> Vec<&str> {
    found
        .servers
        .iter()
        .map(|server| server.name.as_str())
        .collect()
}

fn warned(found: &RootDiscovery, parts: &[&str]) -> bool {
    found
        .warnings
        .iter()
        .any(|warning| parts.iter().all(|part| warning.contains(part)))
}

fn stdio_parts(transport: &Transport) -> (&str, &[String], Option<&PathBuf>) {
    match transport {
        Transport::Stdio {
            command, args, cwd, ..
        } => (command, args, cwd.as_ref()),
        Transport::Http { .. } => panic!("expected stdio, got {transport:?}"),
    }
}

/// Plugins `p1`..`pN` at the root, each with one inline server `s`.
fn plugins(tree: &Tree, count: usize) {
    for n in 1..=count {
        tree.json(
            &format!("p{n}/.codex-plugin/plugin.json"),
            &json!({ "name": format!("p{n}"), "mcpServers": { "s": stdio("srv") } }),
        );
    }
}

#[test]
fn codex_claude_and_cursor_manifests_with_inline_servers() {
    let tree = Tree::new();
    let codex = tree.json(
        "a/.codex-plugin/plugin.json",
        &json!({ "name": "alpha", "mcpServers": { "files": stdio("a") } }),
    );
    tree.json(
        "b/.claude-plugin/plugin.json",
        &json!({ "name": "beta", "mcpServers": { "files": stdio("b") } }),
    );
    tree.json(
        "c/.cursor-plugin/plugin.json",
        &json!({ "name": "gamma", "mcpServers": { "files": stdio("c") } }),
    );
    let found = discover(&tree.root("r"));
    assert_eq!(
        names(&found),
        ["alpha__files", "beta__files", "gamma__files"]
    );
    let first = &found.servers[0];
    assert_eq!(first.plugin, "alpha");
    assert_eq!(first.source, codex);
    assert_eq!(first.config.name, "alpha__files");
    assert_eq!(stdio_parts(&first.config.transport).0, "a");
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
}

#[test]
fn mcp_servers_path_to_wrapped_and_bare_maps() {
    let tree = Tree::new();
    tree.json(
        "wrapped/.claude-plugin/plugin.json",
        &json!({ "name": "wrapped", "mcpServers": "./servers.json" }),
    );
    let wrapped = tree.json(
        "wrapped/servers.json",
        &json!({ "mcpServers": { "one": stdio("w") } }),
    );
    tree.json(
        "bare/.claude-plugin/plugin.json",
        &json!({ "name": "bare", "mcpServers": "./config/map.json" }),
    );
    let bare = tree.json("bare/config/map.json", &json!({ "two": stdio("b") }));
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["bare__two", "wrapped__one"]);
    assert_eq!(found.servers[0].source, bare);
    assert_eq!(found.servers[1].source, wrapped);
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
}

#[test]
fn mcp_json_fallback_with_stdio_and_http_servers() {
    let tree = Tree::new();
    tree.json("plug/.codex-plugin/plugin.json", &json!({ "name": "plug" }));
    let mcp_json = tree.json(
        "plug/.mcp.json",
        &json!({ "mcpServers": {
            "local": { "command": "srv", "args": ["--x"], "env": { "K": "V" } },
            "web": { "type": "http", "url": "https://example.com/mcp",
                     "headers": { "Authorization": "Bearer t" } }
        } }),
    );
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["plug__local", "plug__web"]);
    assert!(found.servers.iter().all(|server| server.source == mcp_json));
    let (command, args, _) = stdio_parts(&found.servers[0].config.transport);
    assert_eq!((command, args), ("srv", &["--x".to_owned()][..]));
    match &found.servers[1].config.transport {
        Transport::Http { url, headers, .. } => {
            assert_eq!(url, "https://example.com/mcp");
            assert_eq!(
                headers.get("Authorization").map(String::as_str),
                Some("Bearer t")
            );
        }
        other => panic!("expected http, got {other:?}"),
    }
}

#[test]
fn inline_servers_win_over_mcp_json() {
    let tree = Tree::new();
    tree.json(
        "plug/.codex-plugin/plugin.json",
        &json!({ "name": "plug", "mcpServers": { "inline": stdio("i") } }),
    );
    tree.json("plug/.mcp.json", &json!({ "ignored": stdio("x") }));
    assert_eq!(names(&discover(&tree.root("r"))), ["plug__inline"]);
}

#[test]
fn bare_mcp_json_is_named_under_the_root_id() {
    let tree = Tree::new();
    tree.json(".mcp.json", &json!({ "top": stdio("t") }));
    tree.json(
        "tools/deep/.mcp.json",
        &json!({ "mcpServers": { "deep": stdio("d") } }),
    );
    let found = discover(&tree.root("my root.v2"));
    assert_eq!(names(&found), ["my_root_v2__top", "my_root_v2__deep"]);
    assert_eq!(found.servers[1].plugin, "my_root_v2");
}

#[test]
fn nested_folders_take_the_nearest_ancestor_plugins_namespace() {
    let tree = Tree::new();
    tree.json(
        "outer/.codex-plugin/plugin.json",
        &json!({ "name": "outer" }),
    );
    tree.json(
        "outer/inner/.cursor-plugin/plugin.json",
        &json!({ "name": "inner", "mcpServers": { "own": stdio("o") } }),
    );
    tree.json("outer/inner/deep/.mcp.json", &json!({ "x": stdio("x") }));
    tree.json("outer/side/.mcp.json", &json!({ "y": stdio("y") }));
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["inner__own", "inner__x", "outer__y"]);
}

#[test]
fn codex_manifest_wins_over_claude_manifest_in_one_folder() {
    let tree = Tree::new();
    tree.json(
        "both/.claude-plugin/plugin.json",
        &json!({ "name": "claude", "mcpServers": { "s": stdio("c") } }),
    );
    tree.json(
        "both/.codex-plugin/plugin.json",
        &json!({ "name": "codex", "mcpServers": { "s": stdio("x") } }),
    );
    tree.json(
        "both/.cursor-plugin/plugin.json",
        &json!({ "name": "cursor", "mcpServers": { "s": stdio("u") } }),
    );
    assert_eq!(names(&discover(&tree.root("r"))), ["codex__s"]);
}

#[test]
fn namespace_falls_back_to_the_sanitised_folder_name() {
    let tree = Tree::new();
    tree.json(
        "my.plugin/.codex-plugin/plugin.json",
        &json!({ "mcpServers": { "s": stdio("a") } }),
    );
    tree.json(
        "other one/.codex-plugin/plugin.json",
        &json!({ "name": "bad name!", "mcpServers": { "s": stdio("b") } }),
    );
    tree.json(
        "third/.codex-plugin/plugin.json",
        &json!({ "name": 7, "mcpServers": { "s": stdio("c") } }),
    );
    assert_eq!(
        names(&discover(&tree.root("r"))),
        ["my_plugin__s", "other_one__s", "third__s"]
    );
}

#[test]
fn plugin_root_placeholders_are_replaced_and_relative_cwd_resolved() {
    let tree = Tree::new();
    let plugin = tree.dir("plug");
    tree.json(
        "plug/.claude-plugin/plugin.json",
        &json!({ "name": "plug", "mcpServers": {
            "a": { "command": "${CLAUDE_PLUGIN_ROOT}/bin/srv",
                   "args": ["--config", "${PLUGIN_ROOT}/c.json", "${OTHER}"],
                   "cwd": "${CLAUDE_PLUGIN_ROOT}/work" },
            "b": { "command": "srv", "cwd": "rel/dir" }
        } }),
    );
    let found = discover(&tree.root("r"));
    let root = plugin.display().to_string();
    let (command, args, cwd) = stdio_parts(&found.servers[0].config.transport);
    assert_eq!(command, format!("{root}/bin/srv"));
    assert_eq!(
        args,
        [
            "--config".to_owned(),
            format!("{root}/c.json"),
            "${OTHER}".to_owned()
        ]
    );
    assert_eq!(cwd, Some(&plugin.join("work")));
    let (_, _, cwd) = stdio_parts(&found.servers[1].config.transport);
    assert_eq!(cwd, Some(&plugin.join("rel/dir")));
}

#[test]
fn depth_six_is_found_and_depth_seven_is_not() {
    let tree = Tree::new();
    tree.json(
        "1/2/3/4/5/6/.codex-plugin/plugin.json",
        &json!({ "name": "six", "mcpServers": { "s": stdio("s") } }),
    );
    tree.json(
        "a/b/c/d/e/f/g/.codex-plugin/plugin.json",
        &json!({ "name": "seven", "mcpServers": { "s": stdio("s") } }),
    );
    tree.json("x/y/z/u/v/w/q/.mcp.json", &json!({ "deep": stdio("d") }));
    assert_eq!(names(&discover(&tree.root("r"))), ["six__s"]);
    let deeper = DiscoveryLimits {
        max_depth: 7,
        ..DiscoveryLimits::default()
    };
    assert_eq!(
        names(&discover_with(&tree.root("r"), deeper)),
        ["six__s", "seven__s", "r__deep"]
    );
}

#[test]
fn directory_limit_stops_the_walk_and_keeps_what_was_found() {
    let tree = Tree::new();
    plugins(&tree, 3);
    let limits = DiscoveryLimits {
        max_dirs: 3,
        ..DiscoveryLimits::default()
    };
    let found = discover_with(&tree.root("r"), limits);
    assert_eq!(names(&found), ["p1__s", "p2__s"]);
    assert!(
        warned(&found, &["limit of 3 directories"]),
        "{:?}",
        found.warnings
    );
    assert_eq!(
        names(&discover(&tree.root("r"))),
        ["p1__s", "p2__s", "p3__s"]
    );
}

#[test]
fn entry_limit_stops_the_walk_and_keeps_what_was_found() {
    let tree = Tree::new();
    plugins(&tree, 3);
    // The root lists 3 entries; listing p1 (its `.codex-plugin`) is the 4th.
    let limits = DiscoveryLimits {
        max_entries: 3,
        ..DiscoveryLimits::default()
    };
    let found = discover_with(&tree.root("r"), limits);
    assert_eq!(names(&found), ["p1__s"]);
    assert!(
        warned(&found, &["limit of 3 directory entries"]),
        "{:?}",
        found.warnings
    );
    let limits = DiscoveryLimits {
        max_entries: 2,
        ..DiscoveryLimits::default()
    };
    assert!(names(&discover_with(&tree.root("r"), limits)).is_empty());
}

#[test]
fn a_file_over_the_size_limit_is_skipped() {
    let tree = Tree::new();
    let big = tree.json(
        "big/.codex-plugin/plugin.json",
        &json!({ "name": "big", "description": "x".repeat(400),
                 "mcpServers": { "s": stdio("s") } }),
    );
    tree.json(
        "small/.codex-plugin/plugin.json",
        &json!({ "name": "small", "mcpServers": { "s": stdio("s") } }),
    );
    tree.json(
        "plain/.mcp.json",
        &json!({ "pad": "y".repeat(400), "s": stdio("s") }),
    );
    let limits = DiscoveryLimits {
        max_file_bytes: 200,
        ..DiscoveryLimits::default()
    };
    let found = discover_with(&tree.root("r"), limits);
    assert_eq!(names(&found), ["small__s"]);
    assert!(
        warned(&found, &[&big.display().to_string(), "200-byte limit"]),
        "{:?}",
        found.warnings
    );
    assert!(
        warned(&found, &[".mcp.json", "200-byte limit"]),
        "{:?}",
        found.warnings
    );
}

#[test]
fn the_root_byte_budget_stops_reading() {
    let tree = Tree::new();
    plugins(&tree, 3);
    let size = |n: usize| {
        fs::metadata(
            tree.root_dir()
                .join(format!("p{n}/.codex-plugin/plugin.json")),
        )
        .unwrap()
        .len()
    };
    let limits = DiscoveryLimits {
        max_root_bytes: size(1) + size(2) + size(3) - 1,
        ..DiscoveryLimits::default()
    };
    let found = discover_with(&tree.root("r"), limits);
    assert_eq!(names(&found), ["p1__s", "p2__s"]);
    assert!(warned(&found, &["p3", "budget"]), "{:?}", found.warnings);
    let limits = DiscoveryLimits {
        max_root_bytes: size(1) + size(2) + size(3),
        ..DiscoveryLimits::default()
    };
    assert_eq!(names(&discover_with(&tree.root("r"), limits)).len(), 3);
}

#[cfg(unix)]
/// A plugin dropped beside a trusted one cannot borrow its server file
/// through a link: the reference resolves inside the root but outside the
/// plugin's own folder, so the servers (whose digest the operator trusted
/// for the other plugin) would run from the intruder's folder.
#[test]
fn a_plugin_cannot_point_at_another_plugins_server_file() {
    use std::os::unix::fs::symlink;

    let tree = Tree::new();
    tree.json(
        "trusted/.codex-plugin/plugin.json",
        &json!({ "name": "trusted", "mcpServers": "./servers.json" }),
    );
    tree.json("trusted/servers.json", &json!({ "s": stdio("./server") }));
    let intruder = tree.json(
        "aaa/.codex-plugin/plugin.json",
        &json!({ "name": "trusted", "mcpServers": "./borrowed.json" }),
    );
    symlink(
        tree.root_dir().join("trusted/servers.json"),
        tree.root_dir().join("aaa/borrowed.json"),
    )
    .unwrap();
    let found = discover(&tree.root("r"));
    // The real plugin's server is found, from its own folder; the
    // intruder contributes nothing and is named in a warning.
    assert_eq!(names(&found), ["trusted__s"]);
    let cwd = stdio_parts(&found.servers[0].config.transport).2;
    assert!(
        cwd.is_none_or(|cwd| !cwd.to_string_lossy().contains("/aaa")),
        "{cwd:?}"
    );
    assert!(
        warned(
            &found,
            &[
                &intruder.display().to_string(),
                "outside the plugin's folder"
            ]
        ),
        "{:?}",
        found.warnings
    );
}

#[test]
fn manifest_paths_that_escape_are_refused_while_siblings_work() {
    use std::os::unix::fs::symlink;

    let tree = Tree::new();
    let secret = write_at(
        &tree.outside("x.json"),
        &json!({ "stolen": stdio("s") }).to_string(),
    );
    tree.json(
        "good/.codex-plugin/plugin.json",
        &json!({ "name": "good", "mcpServers": "./servers.json" }),
    );
    tree.json("good/servers.json", &json!({ "s": stdio("g") }));
    let attempts = [
        ("parent", "../x.json".to_owned()),
        // Resolves to `root/x.json`, inside the root, but `..` is refused.
        ("dotdot", "./../x.json".to_owned()),
        ("dotdot-out", "./../../outside/x.json".to_owned()),
        ("absolute", secret.display().to_string()),
        ("link", "./link.json".to_owned()),
        ("noprefix", "servers.json".to_owned()),
    ];
    let mut manifests = Vec::new();
    for (name, reference) in &attempts {
        manifests.push(tree.json(
            &format!("{name}/.codex-plugin/plugin.json"),
            &json!({ "name": name, "mcpServers": reference }),
        ));
        // A file the reference could also mean, inside the plugin.
        tree.json(&format!("{name}/servers.json"), &json!({ "s": stdio("n") }));
    }
    write_at(
        &tree.root_dir().join("x.json"),
        &json!({ "near": stdio("n") }).to_string(),
    );
    symlink(&secret, tree.root_dir().join("link/link.json")).unwrap();

    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["good__s"]);
    for ((_, reference), manifest) in attempts.iter().zip(&manifests) {
        assert!(
            warned(
                &found,
                &[&manifest.display().to_string(), &format!("{reference:?}")]
            ),
            "no warning for {reference}: {:?}",
            found.warnings
        );
    }
    assert!(
        warned(&found, &["outside the root"]),
        "{:?}",
        found.warnings
    );
}

#[cfg(unix)]
#[test]
fn files_and_folders_linked_from_outside_are_not_read() {
    use std::os::unix::fs::symlink;

    let tree = Tree::new();
    let outside_mcp = write_at(
        &tree.outside("plugin/.mcp.json"),
        &json!({ "stolen": stdio("s") }).to_string(),
    );
    write_at(
        &tree.outside("plugin/.codex-plugin/plugin.json"),
        &json!({ "name": "linked", "mcpServers": { "s": stdio("s") } }).to_string(),
    );
    symlink(tree.outside("plugin"), tree.root_dir().join("linked-dir")).unwrap();
    // A link to a folder inside the root that the walk skips: not followed.
    tree.json(
        "node_modules/pkg/.codex-plugin/plugin.json",
        &json!({ "name": "pkg", "mcpServers": { "s": stdio("s") } }),
    );
    symlink(
        tree.root_dir().join("node_modules/pkg"),
        tree.root_dir().join("alias"),
    )
    .unwrap();
    tree.dir("bare");
    symlink(&outside_mcp, tree.root_dir().join("bare/.mcp.json")).unwrap();
    tree.dir("plug/.codex-plugin");
    symlink(
        tree.outside("plugin/.codex-plugin/plugin.json"),
        tree.root_dir().join("plug/.codex-plugin/plugin.json"),
    )
    .unwrap();
    tree.json(".hidden/.mcp.json", &json!({ "h": stdio("h") }));
    tree.json("node_modules/x/.mcp.json", &json!({ "n": stdio("n") }));
    tree.json("target/.mcp.json", &json!({ "t": stdio("t") }));
    tree.json("ok/.mcp.json", &json!({ "ok": stdio("ok") }));

    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["r__ok"]);
    assert!(
        warned(&found, &["bare/.mcp.json", "outside the root"]),
        "{:?}",
        found.warnings
    );
    assert!(warned(
        &found,
        &["plug/.codex-plugin/plugin.json", "outside the root"]
    ));
}

#[test]
fn invalid_server_entries_are_skipped_with_warnings_naming_them() {
    let tree = Tree::new();
    let manifest = tree.json(
        "plug/.codex-plugin/plugin.json",
        &json!({ "name": "plug", "mcpServers": {
            "bad name": stdio("a"),
            "typo": { "comand": "a" },
            "both": { "command": "a", "url": "http://x" },
            "neither": { "args": [] },
            "wrongtype": { "type": "http", "command": "a" },
            "fine": stdio("ok")
        } }),
    );
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["plug__fine"]);
    let file = manifest.display().to_string();
    assert!(warned(&found, &[&file, "\"bad name\"", "letters, digits"]));
    assert!(warned(&found, &[&file, "\"typo\"", "comand"]));
    assert!(warned(
        &found,
        &[
            &file,
            "\"both\"",
            "mcp_servers.plug__both",
            "cannot both be set"
        ]
    ));
    assert!(warned(&found, &[&file, "\"neither\"", "invalid transport"]));
    assert!(warned(&found, &[&file, "\"wrongtype\"", "type"]));
    assert_eq!(found.warnings.len(), 5, "{:?}", found.warnings);
}

#[test]
fn invalid_json_skips_that_plugin_and_the_walk_goes_on() {
    let tree = Tree::new();
    let broken = tree.write("broken/.codex-plugin/plugin.json", "{ not json");
    tree.json("broken/sub/.mcp.json", &json!({ "s": stdio("s") }));
    tree.json(
        "listed/.codex-plugin/plugin.json",
        &json!({ "name": "listed", "mcpServers": "./servers.json" }),
    );
    let bad_servers = tree.write("listed/servers.json", "[1, 2");
    tree.json("notobject/.codex-plugin/plugin.json", &json!(["x"]));
    tree.json(
        "ok/.codex-plugin/plugin.json",
        &json!({ "name": "ok", "mcpServers": { "s": stdio("s") } }),
    );
    let found = discover(&tree.root("r"));
    // The broken plugin's namespace falls back to its folder's name.
    assert_eq!(names(&found), ["broken__s", "ok__s"]);
    assert!(warned(
        &found,
        &[&broken.display().to_string(), "invalid JSON"]
    ));
    assert!(warned(
        &found,
        &[&bad_servers.display().to_string(), "invalid JSON"]
    ));
    assert!(warned(&found, &["notobject", "not a JSON object"]));
}

#[test]
fn server_names_repeated_in_a_root_keep_the_first() {
    let tree = Tree::new();
    tree.json(
        "a/.codex-plugin/plugin.json",
        &json!({ "name": "same", "mcpServers": { "s": stdio("first") } }),
    );
    let second = tree.json(
        "b/.codex-plugin/plugin.json",
        &json!({ "name": "same", "mcpServers": { "s": stdio("second") } }),
    );
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["same__s"]);
    assert_eq!(stdio_parts(&found.servers[0].config.transport).0, "first");
    assert!(warned(&found, &[&second.display().to_string(), "same__s"]));
}

#[test]
fn a_referenced_mcp_json_is_not_read_twice() {
    let tree = Tree::new();
    tree.json(
        "plug/.codex-plugin/plugin.json",
        &json!({ "name": "plug", "mcpServers": "./sub/.mcp.json" }),
    );
    tree.json("plug/sub/.mcp.json", &json!({ "s": stdio("s") }));
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["plug__s"]);
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);
}

#[test]
fn root_errors_name_the_root_and_say_whether_they_last() {
    let tree = Tree::new();
    let missing = CapabilityRoot::new("gone", tree.base.join("nope"));
    let error = discover_root(&missing, &DiscoveryLimits::default()).unwrap_err();
    assert!(matches!(error, DiscoveryError::Missing { .. }));
    assert!(error.is_transient());
    assert!(error.to_string().contains("`gone`"));
    assert!(
        error
            .to_string()
            .contains(&missing.path.display().to_string())
    );

    let file = write_at(&tree.base.join("file"), "x");
    let not_dir = CapabilityRoot::new("file", &file);
    let error = discover_root(&not_dir, &DiscoveryLimits::default()).unwrap_err();
    assert!(matches!(error, DiscoveryError::NotADirectory { .. }));
    assert!(!error.is_transient());
    assert!(error.to_string().contains("`file`"));
    assert!(error.to_string().contains(&file.display().to_string()));
}

#[test]
fn a_missing_root_is_retried_and_recovers() {
    let tree = Tree::new();
    let root = CapabilityRoot::new("late", tree.base.join("late"));
    let mut cache = DiscoveryCache::new();
    let limits = DiscoveryLimits::default();

    let first = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(matches!(
        first.result("late"),
        Some(Err(DiscoveryError::Missing { .. }))
    ));
    assert!(!first.recovered);
    let again = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(!again.roots[0].cached, "transient errors are not cached");
    assert!(!again.recovered);

    write_at(
        &root.path.join(".mcp.json"),
        &json!({ "s": stdio("s") }).to_string(),
    );
    let found = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(found.recovered);
    assert!(!found.roots[0].cached);
    assert_eq!(
        found
            .servers()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["late__s"]
    );

    let cached = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(cached.roots[0].cached);
    assert!(!cached.recovered);
}

#[test]
fn a_root_that_is_a_file_is_a_cached_permanent_error() {
    let tree = Tree::new();
    let path = write_at(&tree.base.join("plugins"), "not a directory");
    let root = CapabilityRoot::new("plugins", &path);
    let mut cache = DiscoveryCache::new();
    let limits = DiscoveryLimits::default();

    let first = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(matches!(
        first.result("plugins"),
        Some(Err(DiscoveryError::NotADirectory { .. }))
    ));
    assert!(!first.roots[0].cached);

    // Now a directory, but the permanent error is cached.
    fs::remove_file(&path).unwrap();
    write_at(
        &path.join(".mcp.json"),
        &json!({ "s": stdio("s") }).to_string(),
    );
    let second = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(second.roots[0].cached);
    assert!(matches!(
        second.result("plugins"),
        Some(Err(DiscoveryError::NotADirectory { .. }))
    ));

    cache.invalidate("plugins");
    let third = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(third.recovered);
    assert_eq!(third.servers().len(), 1);
}

#[test]
fn successes_are_cached_until_invalidated_or_cleared() {
    let tree = Tree::new();
    plugins(&tree, 1);
    let root = tree.root("r");
    let mut cache = DiscoveryCache::new();
    let limits = DiscoveryLimits::default();
    assert_eq!(
        cache
            .discover(std::slice::from_ref(&root), &limits)
            .servers()
            .len(),
        1
    );

    plugins(&tree, 2);
    let cached = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(cached.roots[0].cached);
    assert_eq!(cached.servers().len(), 1);

    cache.invalidate("other");
    assert_eq!(
        cache
            .discover(std::slice::from_ref(&root), &limits)
            .servers()
            .len(),
        1
    );
    cache.invalidate("r");
    assert_eq!(
        cache
            .discover(std::slice::from_ref(&root), &limits)
            .servers()
            .len(),
        2
    );

    plugins(&tree, 3);
    cache.clear();
    let fresh = cache.discover(std::slice::from_ref(&root), &limits);
    assert!(!fresh.roots[0].cached);
    assert_eq!(fresh.servers().len(), 3);
    assert!(!fresh.recovered);
}

#[test]
fn servers_across_roots_keep_root_order_and_the_first_name() {
    let first = Tree::new();
    let second = Tree::new();
    first.json(
        "a/.codex-plugin/plugin.json",
        &json!({ "name": "shared", "mcpServers": { "s": stdio("first") } }),
    );
    second.json(
        "a/.codex-plugin/plugin.json",
        &json!({ "name": "shared", "mcpServers": { "s": stdio("second"), "t": stdio("t") } }),
    );
    let roots = [first.root("one"), second.root("two")];
    let pass = DiscoveryCache::new().discover(&roots, &DiscoveryLimits::default());
    let servers = pass.servers();
    assert_eq!(
        servers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["shared__s", "shared__t"]
    );
    assert_eq!(stdio_parts(&servers[0].config.transport).0, "first");
    assert!(
        pass.warnings()
            .iter()
            .any(|w| w.contains("`two`") && w.contains("shared__s") && w.contains("`one`")),
        "{:?}",
        pass.warnings()
    );
}

#[test]
fn combine_roots_orders_dedupes_and_caps() {
    let selected = [
        CapabilityRoot::new("a", "/sel/a"),
        CapabilityRoot::new("b", "/sel/b"),
    ];
    let configured = [
        CapabilityRoot::new("b", "/conf/b"),
        CapabilityRoot::new("c", "/conf/c"),
        CapabilityRoot::new("a", "/sel/a"),
    ];
    let combined = combine_roots(&selected, &configured);
    assert_eq!(
        combined,
        [
            CapabilityRoot::new("a", "/sel/a"),
            CapabilityRoot::new("b", "/sel/b"),
            CapabilityRoot::new("c", "/conf/c"),
        ]
    );

    let many: Vec<CapabilityRoot> = (0..300)
        .map(|n| CapabilityRoot::new(format!("r{n}"), format!("/r/{n}")))
        .collect();
    let capped = combine_roots(&many[..10], &many);
    assert_eq!(capped.len(), MAX_ROOTS);
    assert_eq!(capped[0].id, "r0");
    assert_eq!(capped[MAX_ROOTS - 1].id, format!("r{}", MAX_ROOTS - 1));
}

#[test]
fn restricted_mode_skips_roots_outside_the_allowed_directories() {
    let workspace = Tree::new();
    let elsewhere = Tree::new();
    workspace.json(".mcp.json", &json!({ "s": stdio("s") }));
    elsewhere.json(".mcp.json", &json!({ "s": stdio("s") }));
    let inside = workspace.root("inside");
    let outside = elsewhere.root("outside");
    let limits = DiscoveryLimits::default();

    let mut cache = DiscoveryCache::restricted(vec![workspace.base.clone()]);
    let pass = cache.discover(&[inside.clone(), outside.clone()], &limits);
    assert_eq!(
        pass.servers()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["inside__s"]
    );
    let error = pass.result("outside").unwrap().as_ref().unwrap_err();
    assert!(matches!(error, DiscoveryError::OutsideWorkspace { .. }));
    assert!(!error.is_transient());
    assert!(
        cache
            .discover(std::slice::from_ref(&outside), &limits)
            .roots[0]
            .cached
    );

    // A path that leaves the workspace through `..` is judged by where it
    // really is.
    let sneaky = CapabilityRoot::new(
        "sneaky",
        workspace
            .base
            .join("root/../../")
            .join(elsewhere.base.file_name().unwrap())
            .join("root"),
    );
    let error =
        discover_root_within(&sneaky, &limits, std::slice::from_ref(&workspace.base)).unwrap_err();
    assert!(matches!(error, DiscoveryError::OutsideWorkspace { .. }));

    cache.set_allowed(None);
    assert_eq!(
        cache.discover(&[inside, outside], &limits).servers().len(),
        2
    );
}

/// A manifest is untrusted input: a timeout too long for a `Duration` (which
/// would panic the check, poison the discovery cache and fail every refresh
/// after it) skips that server with a warning naming the field.
#[test]
fn a_timeout_too_long_to_represent_skips_the_server_instead_of_panicking() {
    let tree = Tree::new();
    let manifest = tree.json(
        "plug/.codex-plugin/plugin.json",
        &json!({ "name": "plug", "mcpServers": {
            "slow": { "command": "srv", "startup_timeout_sec": 1e300 },
            "stuck": { "command": "srv", "tool_timeout_sec": 1e20 },
            "fine": stdio("ok")
        } }),
    );
    let found = discover(&tree.root("r"));
    assert_eq!(names(&found), ["plug__fine"]);
    let file = manifest.display().to_string();
    assert!(
        warned(&found, &[&file, "\"slow\"", "startup_timeout_sec"]),
        "{:?}",
        found.warnings
    );
    assert!(
        warned(&found, &[&file, "\"stuck\"", "tool_timeout_sec"]),
        "{:?}",
        found.warnings
    );
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(fs::read(path).unwrap()))
}

/// Each discovered server carries its root and the sha256 of the file its
/// table was read from (a referenced server file, not the plugin.json that
/// points at it); trust follows those bytes: new, trusted, then changed
/// after an edit, and trusted again once re-trusted.
#[test]
fn trust_follows_the_sha256_of_the_file_that_defines_each_server() {
    let tree = Tree::new();
    let inline = tree.json(
        "a/.codex-plugin/plugin.json",
        &json!({ "name": "a", "mcpServers": { "s": stdio("a") } }),
    );
    tree.json(
        "b/.claude-plugin/plugin.json",
        &json!({ "name": "b", "mcpServers": "./servers.json" }),
    );
    let referenced = tree.json("b/servers.json", &json!({ "s": stdio("b") }));
    let roots = [tree.root("r")];
    let limits = DiscoveryLimits::default();
    let policy = TrustPolicy::default();
    let mut cache = DiscoveryCache::new();
    let pass = cache.discover(&roots, &limits);
    let servers = pass.servers();
    assert_eq!(servers[0].source, inline);
    assert_eq!(servers[0].sha256, sha256_of(&inline));
    assert_eq!(servers[0].root, "r");
    assert_eq!(servers[1].source, referenced);
    assert_eq!(servers[1].sha256, sha256_of(&referenced));

    let mut store = TrustStore::empty(tree.base.join("gatehouse-trust.toml"));
    let states = |store: &TrustStore, cache: &mut DiscoveryCache| {
        cache.clear();
        assess(&cache.discover(&roots, &limits), &policy, store)
            .into_iter()
            .map(|status| (status.server.name, status.state, status.runs))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(&store, &mut cache),
        [
            ("a__s".to_owned(), TrustState::New, false),
            ("b__s".to_owned(), TrustState::New, false)
        ]
    );
    store.trust(&servers[0]);
    store.trust(&servers[1]);
    assert_eq!(
        states(&store, &mut cache),
        [
            ("a__s".to_owned(), TrustState::Trusted, true),
            ("b__s".to_owned(), TrustState::Trusted, true)
        ]
    );
    tree.json("b/servers.json", &json!({ "s": stdio("evil") }));
    assert_eq!(
        states(&store, &mut cache),
        [
            ("a__s".to_owned(), TrustState::Trusted, true),
            ("b__s".to_owned(), TrustState::Changed, false)
        ]
    );
    let all = TrustPolicy {
        mode: TrustMode::All,
        ..TrustPolicy::default()
    };
    assert!(
        assess(&cache.discover(&roots, &limits), &all, &store)
            .iter()
            .all(|status| status.runs),
        "trust = \"all\" runs what is discovered"
    );
}

/// `trusted = true` belongs to a configured root's id and path together: a
/// root selected at run time under that id (it wins the id) is not trusted,
/// so its entries that reach for the environment are refused.
#[test]
fn a_root_selected_under_a_trusted_roots_id_is_not_trusted() {
    let configured = Tree::new();
    let selected = Tree::new();
    for tree in [&configured, &selected] {
        tree.json(
            "p/.codex-plugin/plugin.json",
            &json!({ "name": "p", "mcpServers": {
                "s": { "command": "srv", "env_vars": ["SECRET"] } } }),
        );
    }
    let policy = TrustPolicy {
        mode: TrustMode::All,
        trusted_roots: vec![configured.root("work")],
    };
    let limits = DiscoveryLimits::default();
    let store = TrustStore::empty(configured.base.join("gatehouse-trust.toml"));

    let pass = DiscoveryCache::new().discover(&[configured.root("work")], &limits);
    let status = &assess(&pass, &policy, &store)[0];
    assert!(status.root_trusted && status.refused.is_empty() && status.runs);

    let roots = combine_roots(&[selected.root("work")], &[configured.root("work")]);
    let pass = DiscoveryCache::new().discover(&roots, &limits);
    let status = &assess(&pass, &policy, &store)[0];
    assert_eq!(status.root_path, selected.root_dir());
    assert!(!status.root_trusted);
    assert!(!status.runs);
    assert_eq!(status.refused[0].field, "env_vars");
    assert!(
        status.refused[0].to_string().contains("`SECRET`"),
        "{}",
        status.refused[0]
    );
}
