//! Which servers of a project's `.mcp.json` Claude Code itself would run:
//! its approval state, read from the files a repository does not control.
//!
//! Claude Code starts a project-scoped server (one in `<project>/.mcp.json`)
//! only once the user approved it: its name in `enabledMcpjsonServers`, or
//! `enableAllProjectMcpServers` set, never when its name is in
//! `disabledMcpjsonServers`. It keeps that state in `~/.claude.json`, under
//! `projects[<absolute project path>]`, and in its settings files. gatehouse
//! takes approvals only from the user's own files (`~/.claude.json` and
//! `~/.claude/settings.json`, whose approvals hold for every folder and so
//! count only in one Claude Code trusts: `hasTrustDialogAccepted` in the
//! project's entry): the project's `.claude/settings.json` and
//! `.claude/settings.local.json` are inside the project, so a cloned
//! repository can carry them, and Claude Code honours them only after its
//! workspace-trust checks, which gatehouse cannot repeat. A denial counts
//! from every one of these files, and wins over any approval.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use gatehouse_base::escape::Escaped;
use serde_json::Value;

use super::read_json;

/// The key listing approved project servers.
const ENABLED: &str = "enabledMcpjsonServers";
/// The key listing rejected project servers.
const DISABLED: &str = "disabledMcpjsonServers";
/// The key approving every project server.
const ENABLE_ALL: &str = "enableAllProjectMcpServers";
/// The key of a project's entry recording that the user trusted the folder.
const TRUST_ACCEPTED: &str = "hasTrustDialogAccepted";

/// Where approval state was found, which decides what its approvals count
/// for (denials count from anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// This project's entry in `~/.claude.json`: Claude Code writes it
    /// there when the user approves in this folder.
    Project,
    /// The user's `~/.claude/settings.json`: it approves in every folder,
    /// but Claude Code runs nothing in one the user has not trusted.
    UserSettings,
    /// A settings file inside the project: a cloned repository can carry
    /// it, so its approvals are not taken.
    InsideProject,
}

/// Claude Code's approval state for one project, from every file that
/// holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    /// Approved names, each with where (this project's entry in
    /// `~/.claude.json`).
    enabled: BTreeMap<String, String>,
    /// Where `enableAllProjectMcpServers` is set (this project's entry).
    all: Option<String>,
    /// Approved names in the user's settings, which hold for every folder
    /// Claude Code trusts: taken only when it trusts this one.
    settings_enabled: BTreeMap<String, String>,
    /// Where the user's settings set `enableAllProjectMcpServers`.
    settings_all: Option<String>,
    /// Where `~/.claude.json` records that the user accepted Claude Code's
    /// trust dialog for this folder (`hasTrustDialogAccepted`).
    trusted: Option<String>,
    /// Rejected names, each with where (any file).
    disabled: BTreeMap<String, String>,
    /// Approvals found in the project's own settings files, not honoured.
    in_project: BTreeMap<String, String>,
    /// A file that holds approval state but could not be read: every
    /// server is refused, as a denial in it may be lost.
    unreadable: Option<String>,
    /// What was looked at, for the reason a server is not approved.
    looked: Vec<String>,
}

/// Whether a server is imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Claude Code approves it: where.
    Approved(String),
    /// Claude Code would not run it: why.
    Refused(String),
}

impl Approvals {
    /// Reads the approval state for `project` (the directory whose
    /// `.mcp.json` is imported) from `home/.claude.json`,
    /// `home/.claude/settings.json`, and, for denials only, the project's
    /// `.claude/settings.json` and `.claude/settings.local.json`.
    pub fn load(home: &Path, project: &Path) -> Approvals {
        let mut approvals = Approvals::default();
        let claude_json = home.join(".claude.json");
        match read_source(&claude_json) {
            Ok(None) => {}
            Ok(Some(value)) => {
                for (key, entry) in project_entries(&value, project) {
                    let place = format!(
                        "{} (projects[{}])",
                        claude_json.display(),
                        Value::String(key.to_owned())
                    );
                    if entry.get(TRUST_ACCEPTED) == Some(&Value::Bool(true))
                        && approvals.trusted.is_none()
                    {
                        approvals.trusted = Some(place.clone());
                    }
                    approvals.take(entry, &place, Scope::Project);
                }
            }
            Err(why) => approvals.unreadable = Some(why),
        }
        approvals.looked.push(format!(
            "{} (projects[{}])",
            claude_json.display(),
            Value::String(project.display().to_string())
        ));
        let user_settings = home.join(".claude").join("settings.json");
        approvals.read_settings(&user_settings, true);
        for name in ["settings.json", "settings.local.json"] {
            approvals.read_settings(&project.join(".claude").join(name), false);
        }
        approvals
    }

    fn read_settings(&mut self, path: &Path, user: bool) {
        if user {
            self.looked.push(path.display().to_string());
        }
        let scope = if user {
            Scope::UserSettings
        } else {
            Scope::InsideProject
        };
        match read_source(path) {
            Ok(None) => {}
            Ok(Some(value)) => self.take(&value, &path.display().to_string(), scope),
            Err(why) => {
                if self.unreadable.is_none() {
                    self.unreadable = Some(why);
                }
            }
        }
    }

    /// Records the state `entry` holds, found at `place` in `scope`:
    /// denials count from anywhere, approvals by scope (see [`Scope`]).
    fn take(&mut self, entry: &Value, place: &str, scope: Scope) {
        for name in names(entry, DISABLED) {
            self.disabled
                .entry(name.to_owned())
                .or_insert_with(|| place.to_owned());
        }
        let approving = names(entry, ENABLED).map(str::to_owned).collect::<Vec<_>>();
        let all = entry.get(ENABLE_ALL) == Some(&Value::Bool(true));
        if scope == Scope::Project {
            for name in approving {
                self.enabled.entry(name).or_insert_with(|| place.to_owned());
            }
            if all && self.all.is_none() {
                self.all = Some(place.to_owned());
            }
        } else if scope == Scope::UserSettings {
            for name in approving {
                self.settings_enabled
                    .entry(name)
                    .or_insert_with(|| place.to_owned());
            }
            if all && self.settings_all.is_none() {
                self.settings_all = Some(place.to_owned());
            }
        } else {
            for name in approving {
                self.in_project
                    .entry(name)
                    .or_insert_with(|| format!("{ENABLED} in {place}"));
            }
            if all {
                self.in_project
                    .entry(String::new())
                    .or_insert_with(|| format!("{ENABLE_ALL} in {place}"));
            }
        }
    }

    /// Whether Claude Code would run the project server `name`.
    pub fn verdict(&self, name: &str) -> Verdict {
        if let Some(why) = &self.unreadable {
            return Verdict::Refused(format!("Claude Code's approvals cannot be told: {why}"));
        }
        if let Some(place) = self.disabled.get(name) {
            return Verdict::Refused(format!("Claude Code has it in {DISABLED} ({place})"));
        }
        if let Some(place) = self.enabled.get(name) {
            return Verdict::Approved(format!("{ENABLED} in {place}"));
        }
        if let Some(place) = &self.all {
            return Verdict::Approved(format!("{ENABLE_ALL} in {place}"));
        }
        let in_settings = self
            .settings_enabled
            .get(name)
            .map(|place| format!("{ENABLED} in {place}"))
            .or_else(|| {
                self.settings_all
                    .as_ref()
                    .map(|place| format!("{ENABLE_ALL} in {place}"))
            });
        if let Some(approval) = in_settings {
            return match &self.trusted {
                Some(trusted) => Verdict::Approved(format!(
                    "{approval}, for a folder Claude Code trusts ({TRUST_ACCEPTED} in {trusted})"
                )),
                None => Verdict::Refused(format!(
                    "{approval} holds only in folders Claude Code trusts, and it has not trusted this one (no {TRUST_ACCEPTED} in {})",
                    self.looked.first().map_or("~/.claude.json", String::as_str)
                )),
            };
        }
        let mut why = format!(
            "not approved in Claude Code (neither {ENABLED} nor {ENABLE_ALL} in {})",
            self.looked.join(" or ")
        );
        if let Some(place) = self
            .in_project
            .get(name)
            .or_else(|| self.in_project.get(""))
        {
            let _ = write!(
                why,
                "; {place} is inside the project, where a cloned repository can put it, so gatehouse does not take it"
            );
        }
        Verdict::Refused(why)
    }
}

/// The JSON at `path`: `None` when there is no such file, an error (the
/// reason, escaped) when it cannot be read or parsed.
fn read_source(path: &Path) -> Result<Option<Value>, String> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    read_json(path)
        .map(Some)
        .map_err(|error| Escaped(&error.to_string()).to_string())
}

/// The string items of the array `entry[key]` (anything else in it is not
/// a name Claude Code matches).
fn names<'a>(entry: &'a Value, key: &str) -> impl Iterator<Item = &'a str> + 'a {
    entry
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The entries of `value["projects"]` that are `project`'s, by key: the
/// same absolute path once trailing slashes and `.` parts are ignored, or
/// once both are resolved (symbolic links). The entry whose key is
/// `project` as written comes last. A relative key, or one naming another
/// directory (a parent, a child, a sibling), never matches.
pub fn project_entries<'a>(value: &'a Value, project: &Path) -> Vec<(&'a str, &'a Value)> {
    let Some(projects) = value.get("projects").and_then(Value::as_object) else {
        return Vec::new();
    };
    let canonical = project.canonicalize().ok();
    let mut exact = Vec::new();
    let mut same = Vec::new();
    let mut resolved = Vec::new();
    for (key, entry) in projects {
        let path = Path::new(key);
        if !path.is_absolute() {
            continue;
        }
        if path.as_os_str() == project.as_os_str() {
            exact.push((key.as_str(), entry));
        } else if path == project {
            same.push((key.as_str(), entry));
        } else if canonical.is_some() && path.canonicalize().ok() == canonical {
            resolved.push((key.as_str(), entry));
        }
    }
    resolved.extend(same);
    resolved.extend(exact);
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(path: &Path, value: &Value) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, value.to_string()).expect("writes");
    }

    #[test]
    fn the_project_is_found_by_its_path_with_a_slash_or_through_a_link_and_no_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = dir.path().join("p");
        std::fs::create_dir_all(project.join("sub")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("p2")).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&project, &link).expect("symlink");
        let key = |path: &Path| path.display().to_string();
        let value = json!({"projects": {
            format!("{}/", key(&project)): {"n": 1},
            key(&link): {"n": 2},
            key(&project): {"n": 3},
            key(&project.join("sub")): {"n": 4},
            key(dir.path()): {"n": 5},
            key(&dir.path().join("p2")): {"n": 6},
            "p": {"n": 7},
        }});
        let found: Vec<i64> = project_entries(&value, &project)
            .iter()
            .filter_map(|(_, entry)| entry["n"].as_i64())
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.contains(&1) && found.contains(&2), "{found:?}");
        assert_eq!(found.last(), Some(&3), "the exact key comes last");
    }

    #[test]
    fn a_denial_wins_and_approvals_count_only_from_the_users_files() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let p = project.path().display().to_string();
        write(
            &home.path().join(".claude.json"),
            &json!({"projects": {p: {
                ENABLED: ["ok", "both"],
                DISABLED: ["both"],
                ENABLE_ALL: true,
            }}}),
        );
        write(
            &home.path().join(".claude/settings.json"),
            &json!({DISABLED: ["user-off"]}),
        );
        write(
            &project.path().join(".claude/settings.local.json"),
            &json!({DISABLED: ["repo-off"], ENABLED: ["x"]}),
        );
        let approvals = Approvals::load(home.path(), project.path());
        assert!(matches!(approvals.verdict("ok"), Verdict::Approved(why) if why.contains(ENABLED)));
        assert!(
            matches!(approvals.verdict("other"), Verdict::Approved(why) if why.contains(ENABLE_ALL))
        );
        for name in ["both", "user-off", "repo-off"] {
            assert!(
                matches!(approvals.verdict(name), Verdict::Refused(why) if why.contains(DISABLED)),
                "{name}"
            );
        }

        // Without the user's approval, the project's own file approves
        // nothing, and the reason says so.
        write(&home.path().join(".claude.json"), &json!({"projects": {}}));
        let approvals = Approvals::load(home.path(), project.path());
        let Verdict::Refused(why) = approvals.verdict("x") else {
            panic!("approved from the project's own file");
        };
        assert!(why.starts_with("not approved in Claude Code"), "{why}");
        assert!(
            why.contains("settings.local.json is inside the project"),
            "{why}"
        );
    }

    #[test]
    fn the_users_settings_approve_only_in_a_folder_claude_code_trusts() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let p = project.path().display().to_string();
        write(
            &home.path().join(".claude/settings.json"),
            &json!({ENABLE_ALL: true, ENABLED: ["named"]}),
        );
        // A fresh clone: Claude Code was never opened there.
        let approvals = Approvals::load(home.path(), project.path());
        for name in ["helper", "named"] {
            let Verdict::Refused(why) = approvals.verdict(name) else {
                panic!("{name} approved in a folder Claude Code never trusted");
            };
            assert!(why.contains("has not trusted this one"), "{why}");
        }
        // Opened, but the trust dialog not accepted: still nothing.
        write(
            &home.path().join(".claude.json"),
            &json!({"projects": {p.clone(): {TRUST_ACCEPTED: false}}}),
        );
        let approvals = Approvals::load(home.path(), project.path());
        assert!(matches!(approvals.verdict("helper"), Verdict::Refused(_)));
        // Trusted: the user's settings hold.
        write(
            &home.path().join(".claude.json"),
            &json!({"projects": {p: {TRUST_ACCEPTED: true}}}),
        );
        let approvals = Approvals::load(home.path(), project.path());
        assert!(
            matches!(approvals.verdict("named"), Verdict::Approved(why) if why.contains(ENABLED) && why.contains(TRUST_ACCEPTED))
        );
        assert!(
            matches!(approvals.verdict("helper"), Verdict::Approved(why) if why.contains(ENABLE_ALL))
        );
    }

    #[test]
    fn an_unreadable_approval_file_refuses_every_server() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let p = project.path().display().to_string();
        write(
            &home.path().join(".claude.json"),
            &json!({"projects": {p: {ENABLE_ALL: true}}}),
        );
        let settings = project.path().join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().expect("parent")).expect("mkdir");
        std::fs::write(&settings, "{not json").expect("writes");
        let approvals = Approvals::load(home.path(), project.path());
        assert!(
            matches!(approvals.verdict("any"), Verdict::Refused(why) if why.contains("cannot be told")),
            "{:?}",
            approvals.verdict("any")
        );
    }
}
