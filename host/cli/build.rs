//! Embeds the project templates `gatehouse new` writes: reads
//! `src/cli/new/templates.toml` (the templates as data) and writes
//! `$OUT_DIR/templates.rs`, one `include_str!` per distinct file (by its
//! canonical path, so a file two templates share, or reach through a link,
//! is in the binary once) and the `TEMPLATES` table `cli/new.rs` reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Templates {
    contract: Contract,
    #[serde(default)]
    renames: BTreeMap<String, Rename>,
    template: Vec<Template>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Contract {
    path: String,
    from: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Template {
    lang: String,
    world: String,
    dir: String,
    readme: String,
    files: Vec<String>,
    #[serde(default)]
    executable: Vec<String>,
    #[serde(default)]
    from: BTreeMap<String, String>,
    #[serde(default)]
    text: BTreeMap<String, String>,
    #[serde(default)]
    shared_renames: Vec<String>,
    #[serde(default)]
    rename: Vec<Rename>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Rename {
    path: String,
    from: String,
    to: String,
    count: usize,
}

/// The `include_str!`s, one per distinct file.
#[derive(Default)]
struct Embedded {
    by_path: BTreeMap<PathBuf, String>,
    consts: String,
}

impl Embedded {
    /// The static holding `file`'s text.
    fn file(&mut self, file: &Path, named_in: &str) -> String {
        let canonical = file.canonicalize().unwrap_or_else(|error| {
            panic!("{named_in}: {}: {error}", file.display());
        });
        println!("cargo:rerun-if-changed={}", file.display());
        let count = self.by_path.len();
        self.by_path
            .entry(canonical.clone())
            .or_insert_with(|| {
                let name = format!("FILE_{count}");
                let _ = writeln!(
                    self.consts,
                    "static {name}: &str = include_str!({:?});",
                    canonical.display().to_string()
                );
                name
            })
            .clone()
    }
}

fn variant(field: &str, value: &str, known: &[(&str, &str)]) -> String {
    known
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, variant)| (*variant).to_owned())
        .unwrap_or_else(|| panic!("templates.toml: {field} {value:?} is none of {known:?}"))
}

fn file_entry(out: &mut String, path: &str, text: &str, executable: bool) {
    let _ = writeln!(
        out,
        "        TemplateFile {{ path: {path:?}, text: {text}, executable: {executable} }},"
    );
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let repository = manifest_dir.join("../..");
    let new_dir = manifest_dir.join("src/cli/new");
    let data = new_dir.join("templates.toml");
    println!("cargo:rerun-if-changed={}", data.display());
    let text = std::fs::read_to_string(&data)
        .unwrap_or_else(|error| panic!("{}: {error}", data.display()));
    let templates: Templates =
        toml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", data.display()));

    let mut embedded = Embedded::default();
    let mut table = String::from("static TEMPLATES: &[TemplateData] = &[\n");
    let contract = embedded.file(&repository.join(&templates.contract.from), "[contract]");
    for template in &templates.template {
        let named = format!("the {} {} template", template.lang, template.world);
        let lang = variant(
            "lang",
            &template.lang,
            &[
                ("rust", "Lang::Rust"),
                ("ts", "Lang::Ts"),
                ("py", "Lang::Py"),
            ],
        );
        let world = variant(
            "world",
            &template.world,
            &[
                ("reviewer", "WorldArg::Reviewer"),
                ("model-reviewer", "WorldArg::ModelReviewer"),
            ],
        );
        let _ = writeln!(
            table,
            "    TemplateData {{\n        lang: {lang},\n        world: {world},\n        dir: {:?},\n        files: &[",
            template.dir
        );
        file_entry(&mut table, &templates.contract.path, &contract, false);
        let dir = repository.join(&template.dir);
        for path in &template.executable {
            assert!(
                template.files.contains(path),
                "templates.toml: {named}: executable {path:?} is not one of its files"
            );
        }
        for path in &template.files {
            let text = embedded.file(&dir.join(path), &named);
            file_entry(&mut table, path, &text, template.executable.contains(path));
        }
        for (path, from) in &template.from {
            let text = embedded.file(&repository.join(from), &named);
            file_entry(&mut table, path, &text, false);
        }
        for (path, text) in &template.text {
            file_entry(&mut table, path, &format!("{text:?}"), false);
        }
        let readme = embedded.file(&new_dir.join(&template.readme), &named);
        file_entry(&mut table, "README.md", &readme, false);
        table.push_str("        ],\n        renames: &[\n");
        let shared = template.shared_renames.iter().map(|name| {
            templates
                .renames
                .get(name)
                .unwrap_or_else(|| panic!("templates.toml: {named}: no [renames.{name}]"))
        });
        for rename in template.rename.iter().chain(shared) {
            let _ = writeln!(
                table,
                "            Rename {{ path: {:?}, from: {:?}, to: {:?}, count: {} }},",
                rename.path, rename.from, rename.to, rename.count
            );
        }
        table.push_str("        ],\n    },\n");
    }
    table.push_str("];\n");
    for lang in ["rust", "ts", "py"] {
        for world in ["reviewer", "model-reviewer"] {
            let found = templates
                .template
                .iter()
                .filter(|template| template.lang == lang && template.world == world)
                .count();
            assert!(
                found == 1,
                "templates.toml: {found} templates for lang {lang:?}, world {world:?}; there must be one"
            );
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("templates.rs");
    let generated = format!(
        "// Generated by host/cli/build.rs from src/cli/new/templates.toml.\n\n{}\n{table}",
        embedded.consts
    );
    std::fs::write(&out, generated).unwrap_or_else(|error| panic!("{}: {error}", out.display()));
}
