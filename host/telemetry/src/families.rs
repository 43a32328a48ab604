//! Every metric gatehouse exports, as data: its name, help, unit, kind and
//! label names. A family's label values are always one of a bounded set (a
//! configured server, module or model grant name, or a word from a fixed
//! list), never a request id, a session or free text; [`crate::series`]
//! also caps each family's series, whatever a caller hands it.
//!
//! Names follow Prometheus's conventions: a counter's samples end in
//! `_total` and a unit is part of the name (`_seconds`), both added by the
//! exposition from [`Family::kind`] and [`Family::unit`].

/// What a family counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (exposed as `NAME_total`).
    Counter,
    /// Goes up and down: a level at the time of the snapshot.
    Gauge,
    /// Observations in [`LATENCY_BUCKETS`].
    Histogram,
}

/// A family's unit, appended to its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `_seconds`.
    Seconds,
}

/// One metric family.
#[derive(Debug, PartialEq)]
pub struct Family {
    /// Its name without unit or `_total`.
    pub name: &'static str,
    /// What it measures, for `# HELP`.
    pub help: &'static str,
    /// Its unit, if any.
    pub unit: Option<Unit>,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its label names, in order.
    pub labels: &'static [&'static str],
}

impl Family {
    /// The name a scrape shows for it (with the unit, without `_total`).
    pub fn full_name(&self) -> String {
        match self.unit {
            Some(Unit::Seconds) => format!("{}_seconds", self.name),
            None => self.name.to_owned(),
        }
    }
}

/// The buckets of every latency histogram, in seconds: from 10 µs (a rule
/// module's review) to 10 minutes (a person's answer), about three per
/// decade.
pub const LATENCY_BUCKETS: [f64; 25] = [
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    f64::INFINITY,
];

macro_rules! families {
    ($($(#[$doc:meta])* $id:ident = $name:literal, $kind:ident, $unit:expr, [$($label:literal),*], $help:literal;)*) => {
        $(
            $(#[$doc])*
            pub static $id: Family = Family {
                name: $name,
                help: $help,
                unit: $unit,
                kind: Kind::$kind,
                labels: &[$($label),*],
            };
        )*
        /// Every family, in the order a scrape lists them.
        pub static ALL: &[&Family] = &[$(&$id),*];
    };
}

families! {
    /// Elicitations answered, by who decided and how.
    ELICITATIONS = "gatehouse_elicitations", Counter, None, ["server", "mode", "decided_by", "action"],
        "Elicitations answered: mode is form, url or invalid; decided_by is guest, person, policy, failure or unhandled; action is accept, decline, cancel or error.";
    /// From an elicitation's arrival to its answer.
    ELICITATION_DURATION = "gatehouse_elicitation_duration", Histogram, Some(Unit::Seconds), ["server", "decided_by"],
        "Time from an elicitation's arrival to its answer, audit line included.";
    /// Elicitations being routed now.
    ELICITATIONS_IN_FLIGHT = "gatehouse_elicitations_in_flight", Gauge, None, [],
        "Elicitations being routed now (reviews and waits for the person).";
    /// Module reviews, by outcome and failure code.
    REVIEWS = "gatehouse_reviews", Counter, None, ["module", "sha256", "outcome", "failure"],
        "Reviews by module: outcome is accept, decline, cancel, defer or failure; failure is the fail-closed code (deadline, memory, table, handles, stack-overflow, trap, output-too-large, invalid-content, schema-mismatch, url-content, denied-import, instantiate), empty otherwise.";
    /// A module's review time.
    REVIEW_DURATION = "gatehouse_review_duration", Histogram, Some(Unit::Seconds), ["module"],
        "Wall time of one module's review, model calls included.";
    /// Elicitations the router refused or failed closed without a module's verdict.
    FAIL_CLOSED = "gatehouse_fail_closed", Counter, None, ["server", "code"],
        "Elicitations failed closed: code is a module's failure code, or audit-unavailable when an accept was declined because its audit line could not be written.";
    /// Model calls by result.
    MODEL_CALLS = "gatehouse_model_calls", Counter, None, ["grant", "result"],
        "Calls to a granted model: result is ok or the error code (not-configured, timeout, cancelled, rate-limited, transient, rejected, over-budget).";
    /// HTTP attempts behind model calls.
    MODEL_ATTEMPTS = "gatehouse_model_attempts", Counter, None, ["grant"],
        "HTTP requests made for model calls, retries included.";
    /// Tokens the provider reported.
    MODEL_TOKENS = "gatehouse_model_tokens", Counter, None, ["grant", "kind"],
        "Tokens the provider reported: kind is input or output.";
    /// A model call's time.
    MODEL_CALL_DURATION = "gatehouse_model_call_duration", Histogram, Some(Unit::Seconds), ["grant"],
        "Wall time of one model call, retries included.";
    /// What a model's budget still allows in its window.
    MODEL_BUDGET_REMAINING = "gatehouse_model_budget_remaining", Gauge, None, ["grant", "limit"],
        "What a model's spending budget still allows in its current window: limit is calls or tokens.";
    /// A model budget's size.
    MODEL_BUDGET_LIMIT = "gatehouse_model_budget_limit", Gauge, None, ["grant", "limit"],
        "A model's spending budget per window: limit is calls or tokens.";
    /// Questions waiting for a person.
    PERSON_PENDING = "gatehouse_person_questions_pending", Gauge, None, ["channel"],
        "Questions waiting for a person's answer now: channel is client or console.";
    /// What the person answered, by channel.
    PERSON_ANSWERS = "gatehouse_person_answers", Counter, None, ["channel", "action"],
        "Answers a person gave: channel is client or console.";
    /// Backends by state.
    BACKENDS = "gatehouse_backends", Gauge, None, ["server", "state"],
        "Backend MCP servers by state (connected, failed, starting): with several instances, how many instances see the server in that state.";
    /// Backend connection attempts.
    BACKEND_STARTS = "gatehouse_backend_starts", Counter, None, ["server", "result"],
        "Connection attempts to a backend MCP server (a failed or changed server is started again): result is connected or failed.";
    /// Model reviews refused by the router's bounds.
    MODEL_REVIEWS_REFUSED = "gatehouse_model_reviews_refused", Counter, None, ["server", "limit"],
        "Elicitations declined before a model reviewed them: limit is max_model_reviews_per_call or max_model_reviews_per_server_per_minute.";
    /// Chain swaps.
    MODULE_SWAPS = "gatehouse_module_swaps", Counter, None, ["result"],
        "Reviewer chain loads and reloads: result is ok, or refused when the new chain was refused and the old one kept.";
    /// Modules in the chain.
    CHAIN_MODULES = "gatehouse_chain_modules", Gauge, None, ["mode"],
        "Modules in the running chain: mode is live or shadow.";
    /// The compile cache.
    COMPILE_CACHE = "gatehouse_compile_cache", Counter, None, ["result"],
        "Module loads by compile-cache result: hit, miss (compiled and stored), off (compiled in memory) or joined (took a compile of the same module another load had started).";
    /// Functions of compiled modules, by where they came from.
    COMPILED_FUNCTIONS = "gatehouse_compiled_functions", Counter, None, ["result"],
        "Functions of the modules compiled through the compile cache: result is reused (kept from an earlier compile of the same code) or compiled.";
    /// Audit writes.
    AUDIT_WRITES = "gatehouse_audit_writes", Counter, None, ["result"],
        "Audit lines written: result is ok or error.";
    /// An audit write's time.
    AUDIT_WRITE_DURATION = "gatehouse_audit_write_duration", Histogram, Some(Unit::Seconds), [],
        "Time to write one audit line (with audit_sync = always, to the disk).";
    /// Instances reporting.
    INSTANCES = "gatehouse_instances", Gauge, None, [],
        "gatehouse serve instances whose series this scrape includes (1 for an instance's own endpoint).";
}

/// The family named `name` (as in [`Family::name`]).
pub fn by_name(name: &str) -> Option<&'static Family> {
    ALL.iter().copied().find(|family| family.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for family in ALL {
            assert!(seen.insert(family.name), "{} twice", family.name);
            assert!(family.name.starts_with("gatehouse_"));
            assert!(
                family
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                family.name
            );
            assert!(!family.name.ends_with("_total"), "{}", family.name);
            assert!(!family.name.ends_with("_seconds"), "{}", family.name);
            for label in family.labels {
                assert!(!label.starts_with("__"), "{label}");
                assert_ne!(*label, "le");
                assert_ne!(*label, "instance", "the scrape adds instance");
            }
        }
        assert!(LATENCY_BUCKETS.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
