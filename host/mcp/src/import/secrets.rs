//! The values of the imported servers' `env` and HTTP headers are never
//! written into the config: the config may sit in a project's working tree,
//! and a client's config keeps tokens there (`claude mcp add -e
//! TOKEN=...`). Every such value counts as a secret, whatever its name.
//! Each is read from gatehouse's own environment instead: an `env` key
//! becomes an `env_vars` entry of the same name (the server still sees the
//! variable it expects), a header an `env_http_headers` entry naming a
//! variable made from the server's and the header's names. [`Export`] says
//! what the user must export, and where the value is; the value itself is
//! never shown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use gatehouse_base::escape::Escaped;

use super::{Import, Note, NoteKind};

/// A value of the client's config that gatehouse now reads from its
/// environment: the user exports `variable` before `gatehouse serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The variable to export.
    pub variable: String,
    /// The server, by its gatehouse name.
    pub server: String,
    /// Its name in the client's config (untrusted text).
    pub original_name: String,
    /// The file that holds the value.
    pub source: PathBuf,
    /// Which value it is.
    pub field: ExportField,
    /// The variable the client reads the value from, when the value is
    /// exactly `${NAME}` (Claude Code and Cursor expand it).
    pub expanded_from: Option<String>,
    /// Whether the value holds `${` elsewhere (the client expands it).
    pub expands: bool,
}

/// Where in a server's table an [`Export`]'s value was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportField {
    /// `env` (untrusted key).
    Env(String),
    /// An HTTP header (`headers` or `http_headers`; untrusted name).
    Header(String),
}

impl fmt::Display for Export {
    /// One line, untrusted text escaped; the value is not in it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, key) = match &self.field {
            ExportField::Env(key) => ("env", key),
            ExportField::Header(name) => ("header", name),
        };
        write!(
            f,
            "{}: the value of {what} `{}` of server `{}` in {}",
            Escaped(&self.variable),
            Escaped(key),
            Escaped(&self.original_name),
            Escaped(&self.source.display().to_string())
        )?;
        if let Some(from) = &self.expanded_from {
            write!(
                f,
                " (written `${{{0}}}` there: the client reads it from ${0})",
                Escaped(from)
            )?;
        } else if self.expands {
            f.write_str(
                " (it holds `${...}`, which the client expands: export the expanded value)",
            )?;
        }
        Ok(())
    }
}

/// Whether `name` is a variable a shell can export: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `NAME` when `value` is exactly `${NAME}`.
fn pure_reference(value: &str) -> Option<String> {
    let name = value.strip_prefix("${")?.strip_suffix('}')?;
    is_variable_name(name).then(|| name.to_owned())
}

/// The variable for `server`'s header `header`: both upper-cased, every
/// other character `_` (`web` and `Authorization`: `WEB_AUTHORIZATION`).
fn header_variable(server: &str, header: &str) -> String {
    let mut name: String = format!("{server}_{header}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

impl Import {
    /// Moves every `env` and HTTP header value of the carried servers out
    /// of their tables into [`Import::exports`] (see the module's
    /// documentation). An `env` key that is no variable name, or whose name
    /// another server already uses for another value or passes through from
    /// the environment, is not carried and noted.
    pub(super) fn move_values_out(&mut self) {
        // Variables the servers already read from the environment.
        let mut reserved: BTreeMap<String, String> = BTreeMap::new();
        for (name, server) in &self.servers {
            let raw = &server.raw;
            for variable in raw
                .env_vars
                .iter()
                .chain(&raw.bearer_token_env_var)
                .chain(raw.env_http_headers.values())
            {
                reserved
                    .entry(variable.clone())
                    .or_insert_with(|| name.clone());
            }
        }
        // Variables given a value here: the value and the server.
        let mut taken: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut notes = Vec::new();
        for (name, server) in &mut self.servers {
            let mut note = |field: String, why: String| {
                notes.push(Note {
                    server: server.original_name.clone(),
                    source: server.source.clone(),
                    kind: NoteKind::FieldNotCarried { field, why },
                });
            };
            let mut exports = Vec::new();
            for (key, value) in std::mem::take(&mut server.raw.env) {
                let field = format!("env.{key}");
                if !is_variable_name(&key) {
                    note(
                        field,
                        "its name is no variable name ([A-Za-z_][A-Za-z0-9_]*), so gatehouse cannot read its value from the environment, and does not write values into the config; set it by hand in a config outside any working tree".to_owned(),
                    );
                    continue;
                }
                if let Some(other) = reserved.get(&key).filter(|other| *other != name) {
                    note(
                        field,
                        format!(
                            "server `{other}` passes `{key}` through from gatehouse's environment, so this server's own value cannot be read from a variable of that name; set it by hand in a config outside any working tree"
                        ),
                    );
                    continue;
                }
                match taken.get(&key) {
                    Some((earlier, other)) if *earlier != value => {
                        note(
                            field,
                            format!(
                                "server `{other}` takes another value from the variable `{key}`, and gatehouse passes one value per name; set it by hand in a config outside any working tree"
                            ),
                        );
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        taken.insert(key.clone(), (value.clone(), name.clone()));
                    }
                }
                if !server.raw.env_vars.contains(&key) {
                    server.raw.env_vars.push(key.clone());
                }
                exports.push((key.clone(), ExportField::Env(key), value));
            }
            for (header, value) in std::mem::take(&mut server.raw.http_headers) {
                if server.raw.env_http_headers.contains_key(&header) {
                    note(
                        format!("http_headers.{header}"),
                        "`env_http_headers` sets the same header from the environment, and that is kept".to_owned(),
                    );
                    continue;
                }
                let base = header_variable(name, &header);
                let mut variable = base.clone();
                let mut n = 1;
                while taken.contains_key(&variable) || reserved.contains_key(&variable) {
                    n += 1;
                    variable = format!("{base}_{n}");
                }
                taken.insert(variable.clone(), (value.clone(), name.clone()));
                server
                    .raw
                    .env_http_headers
                    .insert(header.clone(), variable.clone());
                exports.push((variable, ExportField::Header(header), value));
            }
            for (variable, field, value) in exports {
                self.exports.push(Export {
                    variable,
                    server: name.clone(),
                    original_name: server.original_name.clone(),
                    source: server.source.clone(),
                    field,
                    expanded_from: pure_reference(&value),
                    expands: value.contains("${"),
                });
            }
        }
        self.notes.extend(notes);
    }

    /// Every variable the carried servers read from gatehouse's environment
    /// (`env_vars`, `bearer_token_env_var`, `env_http_headers`): what the
    /// client must pass to `gatehouse serve`.
    pub fn environment(&self) -> BTreeSet<String> {
        self.servers
            .values()
            .flat_map(|server| {
                let raw = &server.raw;
                raw.env_vars
                    .iter()
                    .chain(&raw.bearer_token_env_var)
                    .chain(raw.env_http_headers.values())
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The exports of the carried server `name` (its gatehouse name).
    pub fn exports_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Export> + 'a {
        self.exports
            .iter()
            .filter(move |export| export.server == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_references() {
        for good in ["API_TOKEN", "_x", "a1"] {
            assert!(is_variable_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A=B", "A B", "É"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
        assert_eq!(pure_reference("${TOKEN}").as_deref(), Some("TOKEN"));
        assert_eq!(pure_reference("x${TOKEN}"), None);
        assert_eq!(pure_reference("${A:-b}"), None);
        assert_eq!(header_variable("web", "Authorization"), "WEB_AUTHORIZATION");
        assert_eq!(header_variable("9x", "X-Org"), "_9X_X_ORG");
    }
}
