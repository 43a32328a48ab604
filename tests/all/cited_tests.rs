//! The documents that make promises cite the tests that prove them: SECURITY.md
//! names a test for each promise, docs/RELIABILITY.md for each measured figure,
//! ARCHITECTURE.md the files that hold each boundary. A test renamed or moved
//! would leave a promise citing nothing, and nobody reading the table would
//! know. This reads those documents and checks every citation against the tree.
//!
//! A citation is inline code of one of these forms:
//! - `path/to/file.rs`: the file exists. The path is from the repository root,
//!   or the end of one (`faults.rs`) that names exactly one file;
//! - `path/to/file.rs::name` (or `::tests::name`): a function `name` is in that
//!   file or its submodules (the directory `file/`, or for `mod.rs`, `lib.rs`
//!   and `main.rs` the directory they are in);
//! - `…::name`: a function `name` is in the file cited last;
//! - `…part`, `…part…`: a function whose name ends with, or holds, `part` is in
//!   the file cited last.
//!
//! A function named bare (`a_test_name`) cannot be checked, so it is reported
//! when a function of that name exists: cite it as `…::name` after its file.
//! Inline code may wrap onto the next line; fenced blocks are not read.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The documents whose citations must hold.
const DOCUMENTS: &[&str] = &["SECURITY.md", "docs/RELIABILITY.md", "ARCHITECTURE.md"];

/// Directories never searched for cited files.
const SKIPPED_DIRECTORIES: &[&str] = &["target", "node_modules"];

#[test]
fn every_file_and_test_the_promises_cite_exists() {
    let tree = Tree::read();
    let mut problems = Vec::new();
    let mut cited = 0;
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(tree.root.join(document))
            .unwrap_or_else(|error| panic!("{document} cannot be read: {error}"));
        let checked = check_document(document, &text, &tree);
        cited += checked.cited;
        problems.extend(checked.problems);
    }
    assert!(
        problems.is_empty(),
        "{} of {cited} citations point at nothing; name the test or file as it is now:\n{}",
        problems.len(),
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // SECURITY.md alone cites some 400; far fewer means the parsing broke.
    assert!(cited > 300, "only {cited} citations were found");
}

#[test]
fn a_renamed_test_a_missing_file_and_an_unclear_path_are_each_reported() {
    let tree = Tree::read();
    let document = "| promise | `tests/all/cited_tests.rs::every_file_and_test_the_promises_cite_exists`, \
                    `…::a_test_renamed_since`, `…renamed_test_a_missing_file…`, `…_never_written` |\n\
                    A file that moved: `tests/all/gone.rs`, and `…::its_test`; an unclear one: `main.rs`.\n\
                    Not citations: `[review.limits]`, `…[cut: N bytes]`, `cargo test`, `max_in_flight_per_server`.\n\
                    ```toml\n`tests/all/in_a_fence.rs`\n```\n\
                    Named bare: `every_file_and_test_the_promises_cite_exists`; again `tests/all/cited_tests.rs`, \
                    then code that wraps: `a wrapped\n\
                    piece`, then `…::a_test_renamed_since`.";
    let checked = check_document("EXAMPLE.md", document, &tree);
    let problems: Vec<String> = checked.problems.iter().map(ToString::to_string).collect();
    assert_eq!(checked.cited, 10, "{problems:#?}");
    assert_eq!(problems.len(), 6, "{problems:#?}");
    assert!(problems[0].starts_with("EXAMPLE.md:1: `…::a_test_renamed_since`: no function"));
    assert!(problems[1].starts_with("EXAMPLE.md:1: `…_never_written`: no function"));
    assert!(problems[2].starts_with("EXAMPLE.md:2: `tests/all/gone.rs`: no such file"));
    assert!(
        problems[3].starts_with("EXAMPLE.md:2: `main.rs`: names")
            && problems[3].contains("tests/all/main.rs"),
        "{problems:#?}"
    );
    assert!(
        problems[4].starts_with(
            "EXAMPLE.md:7: `every_file_and_test_the_promises_cite_exists`: a function named without its file"
        ),
        "{problems:#?}"
    );
    // Read line by line, the wrapped code would pair its closing backtick
    // with the next one, and the citation after it would go unread.
    assert!(
        problems[5].starts_with("EXAMPLE.md:8: `…::a_test_renamed_since`: no function")
            && problems[5].contains("tests/all/cited_tests.rs"),
        "{problems:#?}"
    );
}

/// The repository as the check reads it.
struct Tree {
    root: PathBuf,
    /// Every `.rs` file, as a path from the root with `/`.
    files: Vec<String>,
    /// The name of every function in them.
    functions: HashSet<String>,
}

impl Tree {
    fn read() -> Tree {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate sits in the repository")
            .to_path_buf();
        let files = rust_files(&root);
        let mut functions = HashSet::new();
        for file in &files {
            let source = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            functions.extend(function_names(&source).map(str::to_owned));
        }
        Tree {
            root,
            files,
            functions,
        }
    }
}

/// Every `.rs` file in the repository, as a path from its root with `/`.
fn rust_files(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut directories = vec![root.to_path_buf()];
    while let Some(directory) = directories.pop() {
        let entries = std::fs::read_dir(&directory)
            .unwrap_or_else(|error| panic!("{} cannot be listed: {error}", directory.display()));
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !name.starts_with('.') && !SKIPPED_DIRECTORIES.contains(&name.as_str()) {
                    directories.push(path);
                }
            } else if kind.is_file()
                && name.ends_with(".rs")
                && let Ok(relative) = path.strip_prefix(root)
            {
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// What checking one document found.
struct Checked {
    cited: usize,
    problems: Vec<Problem>,
}

/// A citation that points at nothing.
struct Problem {
    document: String,
    line: usize,
    citation: String,
    what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.document, self.line, self.citation, self.what
        )
    }
}

/// One citation, as written.
enum Citation<'a> {
    /// A file, and the function named after it, if one is.
    File {
        path: &'a str,
        function: Option<&'a str>,
    },
    /// `…::name`: a function in the file cited last.
    Function(&'a str),
    /// `…part` or `…part…`: a function of the file cited last whose name ends
    /// with `part` (or holds it, when `at_end` is false).
    Part { part: &'a str, at_end: bool },
    /// A long snake_case name alone: a function cited without its file, if
    /// one of that name exists (else a config key or a metric, say).
    Bare(&'a str),
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse(code: &str) -> Option<Citation<'_>> {
    if let Some(rest) = code.strip_prefix("…::") {
        return last_segment(rest).map(Citation::Function);
    }
    if let Some(rest) = code.strip_prefix('…') {
        let (part, at_end) = match rest.strip_suffix('…') {
            Some(part) => (part, false),
            None => (rest, true),
        };
        return is_identifier(part).then_some(Citation::Part { part, at_end });
    }
    if is_identifier(code) && code.matches('_').count() >= 3 {
        return Some(Citation::Bare(code));
    }
    let (path, function) = match code.split_once(".rs::") {
        Some((stem, rest)) => (&code[..stem.len() + 3], Some(last_segment(rest)?)),
        None => (code, None),
    };
    let is_path = path.ends_with(".rs")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
    is_path.then_some(Citation::File { path, function })
}

/// The last of `a::b::name`'s segments, if every segment is an identifier.
fn last_segment(path: &str) -> Option<&str> {
    let segments: Vec<&str> = path.split("::").collect();
    segments
        .iter()
        .all(|segment| is_identifier(segment))
        .then(|| segments.last().copied())
        .flatten()
}

/// Each piece of inline code in `text` and the line it starts on: fenced
/// blocks are skipped, and a line with an unclosed backtick goes on into the
/// next (inline code never crosses a blank line).
fn inline_code(text: &str) -> Vec<(usize, String)> {
    let mut pieces = Vec::new();
    let mut in_fence = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            pending = None;
            continue;
        }
        if in_fence {
            continue;
        }
        let (start, joined) = match pending.take() {
            Some(_) if line.trim().is_empty() => continue,
            Some((start, mut joined)) => {
                joined.push('\n');
                joined.push_str(line);
                (start, joined)
            }
            None => (index + 1, line.to_owned()),
        };
        if joined.matches('`').count() % 2 == 1 {
            pending = Some((start, joined));
            continue;
        }
        let mut at = start;
        for (piece, code) in joined.split('`').enumerate() {
            if piece % 2 == 1 {
                pieces.push((at, code.to_owned()));
            }
            at += code.matches('\n').count();
        }
    }
    pieces
}

fn check_document(document: &str, text: &str, tree: &Tree) -> Checked {
    let mut checked = Checked {
        cited: 0,
        problems: Vec::new(),
    };
    // The file cited last: its path and its text (with its submodules').
    let mut last: Option<(String, String)> = None;
    for (line, code) in inline_code(text) {
        let Some(citation) = parse(&code) else {
            continue;
        };
        let mut problem = |what: String| {
            checked.problems.push(Problem {
                document: document.to_owned(),
                line,
                citation: code.clone(),
                what,
            })
        };
        let wanted = match citation {
            Citation::Bare(name) => {
                if tree.functions.contains(name) {
                    checked.cited += 1;
                    problem(format!(
                        "a function named without its file cannot be checked; cite it as `…::{name}` after its file"
                    ));
                }
                continue;
            }
            Citation::File { path, function } => {
                checked.cited += 1;
                match resolve(path, &tree.files) {
                    Ok(path) => {
                        last = Some((path.clone(), source_of(&tree.root, &path)));
                    }
                    Err(what) => {
                        last = None;
                        problem(what);
                        continue;
                    }
                }
                match function {
                    Some(name) => Wanted::Named(name),
                    None => continue,
                }
            }
            Citation::Function(name) => {
                checked.cited += 1;
                Wanted::Named(name)
            }
            Citation::Part { part, at_end } => {
                checked.cited += 1;
                Wanted::Part { part, at_end }
            }
        };
        let Some((path, source)) = &last else {
            // The file before it was reported already, or none came before.
            continue;
        };
        if !wanted.is_in(source) {
            problem(format!("no function {wanted} in {path}"));
        }
    }
    checked
}

/// The function a citation asks for.
enum Wanted<'a> {
    Named(&'a str),
    Part { part: &'a str, at_end: bool },
}

impl fmt::Display for Wanted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wanted::Named(name) => write!(f, "`{name}`"),
            Wanted::Part { part, at_end: true } => write!(f, "ends with `{part}`"),
            Wanted::Part { part, .. } => write!(f, "holds `{part}`"),
        }
    }
}

impl Wanted<'_> {
    fn is_in(&self, source: &str) -> bool {
        // A module cited whole (`file.rs::tests`) is a `mod`, not a function.
        if let Wanted::Named(name) = self
            && (source.contains(&format!("mod {name} "))
                || source.contains(&format!("mod {name};")))
        {
            return true;
        }
        function_names(source).any(|function| match self {
            Wanted::Named(name) => function == *name,
            Wanted::Part { part, at_end: true } => function.ends_with(part),
            Wanted::Part { part, .. } => function.contains(part),
        })
    }
}

/// The names after every `fn ` in a source.
fn function_names(source: &str) -> impl Iterator<Item = &str> {
    source.match_indices("fn ").filter_map(move |(at, _)| {
        let before = source[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &source[at + 3..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        Some(&rest[..end]).filter(|name| !name.is_empty())
    })
}

/// The one file a cited path names: from the root, or the end of exactly one path.
fn resolve(cited: &str, files: &[String]) -> Result<String, String> {
    if files.iter().any(|file| file == cited) {
        return Ok(cited.to_owned());
    }
    let tail = format!("/{cited}");
    let matching: Vec<&String> = files.iter().filter(|file| file.ends_with(&tail)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err("no such file in the repository".to_owned()),
        many => Err(format!(
            "names {} files ({}); write the path from the repository root",
            many.len(),
            many.iter()
                .map(|file| file.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A file's text, followed by its submodules' (the directory `file/` beside
/// `file.rs`; for `mod.rs`, `lib.rs` and `main.rs`, the directory they are in).
fn source_of(root: &Path, path: &str) -> String {
    let file = root.join(path);
    let mut source = std::fs::read_to_string(&file).unwrap_or_default();
    let owns_its_directory = ["mod.rs", "lib.rs", "main.rs"]
        .iter()
        .any(|name| file.file_name().is_some_and(|own| own == *name));
    let modules = match file.parent() {
        Some(parent) if owns_its_directory => parent.to_path_buf(),
        _ => file.with_extension(""),
    };
    let mut directories = vec![modules];
    while let Some(directory) = directories.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                source.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    source
}
