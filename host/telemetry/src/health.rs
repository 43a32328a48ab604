//! Liveness and readiness: `/healthz` answers while the process serves;
//! `/readyz` only when every [`Check`] passes (the modules are loaded, the
//! audit log takes lines, every required backend is up).

use serde::Serialize;

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What it checks (`modules`, `audit`, `backend NAME`).
    pub name: String,
    /// Whether it passes.
    pub ok: bool,
    /// What was seen (escaped: it may quote a server's error).
    pub detail: String,
}

impl Check {
    /// A check named `name` that passes when `ok`.
    pub fn new(name: impl Into<String>, ok: bool, detail: impl AsRef<str>) -> Check {
        Check {
            name: gatehouse_base::escape::escape(&name.into()).to_string(),
            ok,
            detail: gatehouse_base::escape::one_line(detail.as_ref()).into_owned(),
        }
    }
}

/// Every check at one moment.
///
/// ```
/// use gatehouse_telemetry::health::{Check, Readiness};
///
/// let readiness = Readiness::new(vec![
///     Check::new("modules", true, "2 live"),
///     Check::new("backend git", false, "connection refused"),
/// ]);
/// assert!(!readiness.ready());
/// assert_eq!(readiness.to_text(), "not ready\nok modules: 2 live\nfailed backend git: connection refused\n");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl Readiness {
    /// The result of `checks`.
    pub fn new(checks: Vec<Check>) -> Readiness {
        Readiness { checks }
    }

    /// Whether every check passes.
    pub fn ready(&self) -> bool {
        self.checks.iter().all(|check| check.ok)
    }

    /// As `/readyz` prints it: `ready` or `not ready`, then a line per check.
    pub fn to_text(&self) -> String {
        let mut text = String::from(if self.ready() {
            "ready\n"
        } else {
            "not ready\n"
        });
        for check in &self.checks {
            let state = if check.ok { "ok" } else { "failed" };
            text.push_str(&format!("{state} {}: {}\n", check.name, check.detail));
        }
        text
    }
}
