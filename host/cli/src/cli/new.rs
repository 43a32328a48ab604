//! `gatehouse new NAME [--lang rust|ts|py]`: a reviewer module project,
//! ready to build outside this repository.
//!
//! The project is one of the templates in `examples/` (embedded in this
//! binary) with its name put in, the WIT this gatehouse implements written
//! under `wit/` (the wasm-tools and wit-bindgen convention; the contract has
//! no dependencies, so there is no `wit/deps/`), its conformance cases under
//! `cases/`, and a README with the three steps: build, prove, use.
//! `host/cli/tests/all/new.rs` follows that README in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::ValueEnum;
use gatehouse_core::escape::Escaped;

/// Start a reviewer module project in a new directory: the template of a
/// language, the WIT of this gatehouse, conformance cases, and a README with
/// the steps to build, prove and use it.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's name: its directory and its package name (lowercase
    /// letters, digits, `-` and `_`, starting with a letter; at most 64).
    name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// The world the module is built for: `model-reviewer` asks a language
    /// model the operator grants it.
    #[arg(long, value_enum, default_value = "reviewer")]
    world: WorldArg,
    /// Where to create the project's directory.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// A template's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, with wit-bindgen (`cargo build --target wasm32-wasip2`).
    Rust,
    /// TypeScript, with componentize-js (node 20+ and npm).
    Ts,
    /// Python, with componentize-py (Python 3.9+ and pip).
    Py,
}

/// The world a new module is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorldArg {
    /// A reviewer: decides from the request and its config.
    Reviewer,
    /// A reviewer that asks a language model the operator grants it.
    ModelReviewer,
}

/// One file of a project: where it goes, and its text before the name is
/// put in.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

/// A text to change in a template file: `from` must occur exactly `count`
/// times, and each becomes `to` with `{name}` replaced by the project's.
#[derive(Clone, Copy)]
struct Rename {
    path: &'static str,
    from: &'static str,
    to: &'static str,
    count: usize,
}

/// One template as `templates.toml` describes it (embedded by `build.rs`).
struct TemplateData {
    lang: Lang,
    world: WorldArg,
    /// Its directory in the repository.
    #[cfg_attr(not(test), allow(dead_code))]
    dir: &'static str,
    /// Every file of a project, the contract and the README included.
    files: &'static [TemplateFile],
    renames: &'static [Rename],
}

// The templates: `TEMPLATES`, from `src/cli/new/templates.toml`.
include!(concat!(env!("OUT_DIR"), "/templates.rs"));

/// A template: a language and a world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Template {
    lang: Lang,
    world: WorldArg,
}

impl Template {
    /// Its data: every language and world has one template (`build.rs`
    /// refuses `templates.toml` otherwise).
    fn data(self) -> Option<&'static TemplateData> {
        TEMPLATES
            .iter()
            .find(|data| data.lang == self.lang && data.world == self.world)
    }

    fn files(self) -> &'static [TemplateFile] {
        self.data().map_or(&[], |data| data.files)
    }

    fn renames(self) -> &'static [Rename] {
        self.data().map_or(&[], |data| data.renames)
    }

    /// Every template there is, with the directory in `examples/` it comes
    /// from.
    #[cfg(test)]
    fn all() -> Vec<(Template, &'static str)> {
        TEMPLATES
            .iter()
            .map(|data| {
                (
                    Template {
                        lang: data.lang,
                        world: data.world,
                    },
                    data.dir,
                )
            })
            .collect()
    }
}

/// Names cargo refuses for a package: Rust's keywords and the standard
/// crates.
const RESERVED: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
];

/// Why a name cannot be a project's.
fn name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    if !chars.next().is_some_and(|first| first.is_ascii_lowercase()) {
        return Some("it must start with a lowercase letter");
    }
    if name.len() > 64 {
        return Some("it is longer than 64 characters");
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') {
        return Some("it may hold only lowercase letters, digits, `-` and `_`");
    }
    if RESERVED.contains(&name.replace('-', "_").as_str()) {
        return Some("it is a Rust keyword or a standard crate's name, which cargo refuses");
    }
    None
}

/// The files of a project named `name` from `template`: paths and contents.
fn project(name: &str, template: Template) -> anyhow::Result<Vec<(&'static str, String, bool)>> {
    if template.data().is_none() {
        bail!("there is no {template:?} template: gatehouse new needs updating");
    }
    let mut files: Vec<(&'static str, String, bool)> = template
        .files()
        .iter()
        .map(|file| (file.path, file.text.to_owned(), file.executable))
        .collect();
    let crate_name = name.replace('-', "_");
    for (path, text, _) in &mut files {
        for rename in template
            .renames()
            .iter()
            .filter(|rename| rename.path == *path)
        {
            let found = text.matches(rename.from).count();
            if found != rename.count {
                // The template changed under this command: a bug of ours.
                bail!(
                    "the {template:?} template's {path} has `{}` {found} times, not {}: \
                     gatehouse new needs updating",
                    rename.from,
                    rename.count
                );
            }
            *text = text.replace(rename.from, &rename.to.replace("{name}", name));
        }
        if *path == "README.md" {
            *text = text
                .replace("{name}", name)
                .replace("{crate}", &crate_name)
                .replace("{version}", env!("CARGO_PKG_VERSION"));
        }
    }
    Ok(files)
}

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    if let Some(problem) = name_problem(&args.name) {
        bail!(
            "`{}` cannot be a project's name: {problem}",
            Escaped(&args.name)
        );
    }
    let template = Template {
        lang: args.lang,
        world: args.world,
    };
    let root = args.dir.join(&args.name);
    let files = project(&args.name, template)?;
    create_dir(&root)?;
    if let Err(error) = write_files(&root, &files) {
        // The directory is ours (created above): no half-made project stays.
        let _ = std::fs::remove_dir_all(&root);
        return Err(error);
    }
    println!(
        "Created {} ({} {} module, contract {}) in {}.",
        args.name,
        match args.lang {
            Lang::Rust => "a Rust",
            Lang::Ts => "a TypeScript",
            Lang::Py => "a Python",
        },
        match args.world {
            WorldArg::Reviewer => "reviewer",
            WorldArg::ModelReviewer => "model-reviewer",
        },
        gatehouse_core::contract::VERSION,
        root.display()
    );
    println!(
        "Next: read {}: build, prove with `gatehouse conformance`, add it to gatehouse.toml.",
        root.join("README.md").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the project's files under `root`.
fn write_files(root: &Path, files: &[(&'static str, String, bool)]) -> anyhow::Result<()> {
    for (path, text, executable) in files {
        let target = root.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("{}: cannot create the directory", parent.display()))?;
        }
        write_new(&target, text, *executable)?;
    }
    Ok(())
}

/// Creates the project's directory; one that exists is refused, so nothing
/// of anyone's is overwritten.
fn create_dir(root: &Path) -> anyhow::Result<()> {
    match std::fs::create_dir(root) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists: choose another name or --dir (gatehouse new never writes into an existing directory)",
            root.display()
        ),
        Err(error) => {
            Err(error).with_context(|| format!("{}: cannot create the directory", root.display()))
        }
    }
}

/// Writes a file that must not exist yet.
fn write_new(path: &Path, text: &str, executable: bool) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if executable { 0o755 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = executable;
    let mut file = options
        .open(path)
        .with_context(|| format!("{}: cannot create the file", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("{}: cannot write the file", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's root.
    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// A project's `build.sh` is executable, and nothing else is.
    #[test]
    fn only_build_scripts_are_executable() {
        for (template, _) in Template::all() {
            for file in template.files() {
                assert_eq!(
                    file.executable,
                    file.path == "build.sh",
                    "{template:?} {}",
                    file.path
                );
            }
        }
    }

    /// A file two templates share (strict_json.py, reached through a link
    /// from the model template) is embedded once.
    #[test]
    fn a_shared_file_is_embedded_once() {
        let texts = |lang, world| {
            Template { lang, world }
                .files()
                .iter()
                .find(|file| file.path == "strict_json.py")
                .map(|file| file.text.as_ptr())
                .expect("the Python templates have strict_json.py")
        };
        assert_eq!(
            texts(Lang::Py, WorldArg::Reviewer),
            texts(Lang::Py, WorldArg::ModelReviewer)
        );
    }

    #[test]
    fn every_rename_applies_to_every_language() {
        for (template, _) in Template::all() {
            let lang = template;
            let files = project("my-policy", template).unwrap();
            let readme = &files
                .iter()
                .find(|(path, ..)| *path == "README.md")
                .unwrap()
                .1;
            for placeholder in ["{name}", "{crate}", "{version}"] {
                assert!(!readme.contains(placeholder), "{lang:?}: {placeholder}");
            }
            for rename in template.renames() {
                let text = &files
                    .iter()
                    .find(|(path, ..)| *path == rename.path)
                    .unwrap()
                    .1;
                let to = rename.to.replace("{name}", "my-policy");
                assert!(text.contains(&to), "{lang:?} {}", rename.path);
            }
        }
    }

    #[test]
    fn the_wit_is_the_contract_this_gatehouse_implements() {
        let files = project("p", Template::all()[0].0).unwrap();
        let wit = &files
            .iter()
            .find(|(path, ..)| *path == "wit/reviewer.wit")
            .unwrap()
            .1;
        assert!(wit.contains(&format!(
            "package gatehouse:reviewer@{};",
            gatehouse_core::contract::VERSION
        )));
    }

    /// Every file a template has in git is in the project (the `wit` and
    /// `cases` links are written as files), and nothing else but the
    /// README: a file added to a template and not here fails this test.
    #[test]
    fn the_embedded_files_are_the_templates_files() {
        for (template, dir) in Template::all() {
            let lang = template.lang;
            let embedded_files = project("p", template).unwrap();
            // The one case file each template's `cases` link (or directory)
            // holds.
            let cases = embedded_files
                .iter()
                .map(|(path, ..)| *path)
                .find(|path| path.starts_with("cases/"))
                .unwrap();
            let listed = std::process::Command::new("git")
                .args(["ls-files", "--", dir])
                .current_dir(root())
                .output();
            let listed = match listed {
                Ok(listed) if listed.status.success() => listed,
                _ => {
                    eprintln!("{dir}: git ls-files failed (no git, or not a checkout): skipped");
                    continue;
                }
            };
            let mut in_git: Vec<String> = String::from_utf8_lossy(&listed.stdout)
                .lines()
                .map(|line| {
                    line.trim_start_matches(dir)
                        .trim_start_matches('/')
                        .to_owned()
                })
                .filter(|path| !path.is_empty())
                // The template's own README is about the repository; the
                // project gets its own.
                .filter(|path| path != "README.md")
                // Repository-only files: an example config with repository
                // paths.
                .filter(|path| path != "gatehouse.example.toml")
                .map(|path| match path.as_str() {
                    "wit" => "wit/reviewer.wit".to_owned(),
                    "cases" => cases.to_owned(),
                    _ => path,
                })
                .collect();
            if lang == Lang::Rust {
                in_git.push(".gitignore".to_owned());
            }
            if template
                == (Template {
                    lang: Lang::Ts,
                    world: WorldArg::Reviewer,
                })
            {
                in_git.push("demo-config.json".to_owned());
            }
            in_git.sort();
            let mut embedded: Vec<String> = project("p", template)
                .unwrap()
                .into_iter()
                .map(|(path, ..)| path.to_owned())
                .filter(|path| path != "README.md")
                .collect();
            embedded.sort();
            assert_eq!(embedded, in_git, "{template:?}");
        }
    }

    #[test]
    fn names_that_are_no_package_names_are_refused() {
        assert_eq!(name_problem("my-policy_2"), None);
        for bad in [
            "",
            "My",
            "2x",
            "-x",
            "a b",
            "a/b",
            "a\"b",
            "ä",
            &"a".repeat(65),
        ] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
    }
}
