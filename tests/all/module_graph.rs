//! No import circles inside a crate: each crate's modules, read with `syn`,
//! form a graph whose edges are the paths one module names of another
//! (`crate::…`, `super::…`, `self::…`, in `use` items and anywhere in the
//! code; test modules left out), and that graph has no cycle. A module may
//! use its ancestors and its descendants (a parent holds what its children
//! share); a circle among siblings or cousins means two modules share one
//! job, and ARCHITECTURE.md's "one job per module" no longer holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The crates whose modules are checked, by their directory. The model
/// guardian is the guardian's files compiled again (`#[path]`), so the
/// guardian's check covers it.
const CRATES: &[&str] = &[
    "host/base",
    "host/core",
    "host/conformance",
    "host/audit",
    "host/models",
    "host/registry",
    "host/mcp",
    "host/gateway",
    "host/cli",
    "host/bench",
    "host/fuzzing",
    "guests/guardian",
    "guests/allowlist",
    "guests/json-match",
];

type Module = Vec<String>;

/// A module's path from its file under `src`.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Module = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reads the directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            into.push(path);
        }
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Meta>()
                .is_ok_and(|meta| meta.path().is_ident("test"))
    })
}

/// Every `crate`/`super`/`self` path a file names outside its tests.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                let mut path = prefix.clone();
                path.push(name.ident.to_string());
                self.0.push(path);
            }
            syn::UseTree::Rename(rename) => {
                let mut path = prefix.clone();
                path.push(rename.ident.to_string());
                self.0.push(path);
            }
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(item) => &item.attrs,
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Enum(item) => &item.attrs,
            syn::Item::Const(item) => &item.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.0.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }
}

/// The crate's module graph: each module and the modules it names.
fn graph(dir: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let src = dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|file| (module_of(&src, file), file.clone()))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("reads the file");
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let mut named = BTreeSet::new();
        for path in paths.0 {
            let (mut base, rest): (Module, &[String]) = match path.first().map(String::as_str) {
                Some("crate") => (Vec::new(), &path[1..]),
                Some("self") => (module.clone(), &path[1..]),
                Some("super") => {
                    let supers = path.iter().take_while(|part| *part == "super").count();
                    let keep = module.len().saturating_sub(supers);
                    (module[..keep].to_vec(), &path[supers..])
                }
                _ => continue,
            };
            base.extend(rest.iter().cloned());
            let Some(target) = (0..=base.len())
                .rev()
                .map(|len| base[..len].to_vec())
                .find(|prefix| modules.contains_key(prefix))
            else {
                continue;
            };
            let related = target.starts_with(module) || module.starts_with(&target);
            if !related {
                named.insert(target);
            }
        }
        edges.insert(module.clone(), named);
    }
    edges
}

/// A cycle in `edges`, as the modules along it, if there is one.
fn cycle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        node: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeSet<Module>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = stack.iter().position(|on| on == node) {
            let mut found = stack[at..].to_vec();
            found.push(node.clone());
            return Some(found);
        }
        if !done.insert(node.clone()) {
            return None;
        }
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "the crate root".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = gatehouse_tests::workspace_root();
    let mut circles = Vec::new();
    for dir in CRATES {
        let edges = graph(&root.join(dir));
        assert!(!edges.is_empty(), "{dir}: no module read");
        if let Some(found) = cycle(&edges) {
            let names: Vec<String> = found.iter().map(name).collect();
            circles.push(format!("{dir}: {}", names.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles (move what both sides use into a module of its own, or into the parent):\n{}",
        circles.join("\n")
    );
}

/// The check sees a circle where there is one (two sibling modules naming
/// each other, one through `use`, one through a path in the code), and none
/// between a parent and its children.
#[test]
fn the_check_finds_a_planted_circle_and_allows_parents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("parent")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod parent;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    std::fs::write(
        src.join("b.rs"),
        "pub struct B;\nfn f() -> super::a::A { crate::a::A }\n#[cfg(test)]\nmod tests { use crate::parent::P; }\n",
    )
    .expect("write");
    std::fs::write(
        src.join("parent/mod.rs"),
        "mod child;\npub struct P;\nfn g() -> child::C { child::C }\nuse self::child::C as D;\n",
    )
    .expect("write");
    std::fs::write(
        src.join("parent/child.rs"),
        "pub struct C;\nfn h() -> super::P { super::P }\n",
    )
    .expect("write");
    let edges = graph(dir.path());
    let found = cycle(&edges).expect("a and b name each other");
    assert!(found.len() == 3, "{found:?}");
    let b = vec!["b".to_owned()];
    assert!(
        !edges[&b].contains(&vec!["parent".to_owned()]),
        "test modules are left out"
    );
    let mut without_b = edges.clone();
    without_b.remove(&b);
    for named in without_b.values_mut() {
        named.remove(&b);
    }
    assert_eq!(
        cycle(&without_b),
        None,
        "a parent and its child are not a circle"
    );
}
